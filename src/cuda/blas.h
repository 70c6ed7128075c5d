// cuBLAS for the bf16 GEMMs that have no kernel of ours (issue 4 allows cuBLAS as a first step where it fits):
// the weights that are bf16 on disk (compressor wkv / wgate, indexer weights_proj, the router gate, the head)
// and wo_a, whose input the official code does not quantize (model-spec §3 "Attention": the grouped low-rank
// output takes the bf16 attention output), kept as bf16 dequantized at load. Products of the bf16 operands are
// exact on the tensor cores; accumulation is fp32.
// cuBLAS picks its algorithm by shape, so these GEMMs are deterministic run to run but not batch-invariant; in
// batch-invariant mode (algorithms.md §4, cuda/numerics_mode.h) gemm_bf16 runs gemm_bf16_invariant instead.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels.h"

namespace deepinfer::cuda {

// One handle per stream user; the workspace is cuBLAS's own.
class BlasHandle {
 public:
  BlasHandle();
  ~BlasHandle();
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;
  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
};

// y[m, n] = x[m, k] . w[n, k]^T with row strides ldx / ldw / ldy (elements), fp32 accumulation; y is fp32 or
// bf16 (OutType). With batch > 1 the three operands advance by stride_x / stride_w / stride_y elements per
// batch entry (cublasGemmStridedBatchedEx): wo_a's groups are one call.
void gemm_bf16(cublasHandle_t blas, const bf16* x, int64_t ldx, const bf16* w, int64_t ldw, void* y, OutType out,
               int64_t ldy, int64_t m, int64_t n, int64_t k, cudaStream_t stream, int batch = 1,
               int64_t stride_x = 0, int64_t stride_w = 0, int64_t stride_y = 0);

// Two products of the same x: y1 = x . w1^T and y2 = x . w2^T (each [m, n], ldy), as one strided-batched call
// where w2 lies after w1 and y2 after y1 in memory at distances that keep 16-byte alignment, else as two calls. The
// compressors' kv and gate projections: at batch-1 decode each cuBLAS call is a split-K launch pair of ~4.5 + 1.6 us
// on the side branch that the attention waits for (the timeline, tools/gpu/trace_decode.sh, session 11). Up to
// kBf16GemvMaxRows (4) rows (outside batch-invariant mode) the pair is one bf16_gemv_pair launch instead
// (cuda/bf16_gemv.h).
// DEEPINFER_GEMM_PAIR=0 keeps two calls (read once).
void gemm_bf16_pair(cublasHandle_t blas, const bf16* x, int64_t ldx, const bf16* w1, const bf16* w2, int64_t ldw,
                    void* y1, void* y2, OutType out, int64_t ldy, int64_t m, int64_t n, int64_t k,
                    cudaStream_t stream);

// The same product by a tile kernel of ours whose reduction order per output element is fixed by k alone (no
// split-K, one tile and instruction shape for every m): a row's result is bitwise the same alone or among any
// other rows. k, ldx, ldw (and the batch strides of x, w) must be multiples of 8, x and w 16-byte aligned.
void gemm_bf16_invariant(const bf16* x, int64_t ldx, const bf16* w, int64_t ldw, void* y, OutType out, int64_t ldy,
                         int64_t m, int64_t n, int64_t k, cudaStream_t stream, int batch = 1, int64_t stride_x = 0,
                         int64_t stride_w = 0, int64_t stride_y = 0);

}  // namespace deepinfer::cuda
