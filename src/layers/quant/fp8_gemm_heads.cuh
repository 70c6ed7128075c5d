// A decode FP8 product whose output heads are finished in the product's own launch (cuda/stream_gemm.cuh's head
// epilogue: the block that stores a head's last tile runs HeadEpi::finish on each of its rows), the device-side
// counterpart of fp8_gemm.h's fused decode forms for epilogues defined by a layer (the V4 indexer's query finish,
// layers/indexer/indexer_gpu.cu). Only .cu files include this.
#pragma once

#include <cstdint>

#include "cuda/kernels.h"
#include "cuda/stream_gemm.cuh"

namespace deepinfer::cuda {

// Whether fp8_gemm (Auto path) runs m rows of w on decode v8's stream kernel (layers/quant/fp8_gemm.cu).
bool takes_stream_kernel(int64_t m, const Fp8Linear& w);
// The decode kernels' arguments of y = x . w^T over m rows (layers/quant/fp8_gemm.cu).
packed::Args decode_args(const uint8_t* q, const float* xs, int64_t m, const Fp8Linear& w, void* y);

// y = x . w^T (fp32) over m rows with every head of heads.head_dim columns finished by HeadEpi, in one launch (with
// PDL, the stream kernel's persistent grid), where fp8_gemm would take the stream kernel and its head epilogue
// applies; false (nothing launched) elsewhere: the caller then runs fp8_gemm and its own finish. HeadEpi sees the
// values fp8_gemm stores.
template <class HeadEpi>
bool fp8_gemm_heads(const uint8_t* q, const float* xs, int64_t m, const Fp8Linear& w, float* y,
                    const stream_gemm::HeadEpilogueArgs& heads, cudaStream_t stream) {
  if (!takes_stream_kernel(m, w)) return false;
  return stream_gemm::launch_stream<skinny::WeightFormat::FP8, float, false, false, HeadEpi>(
      decode_args(q, xs, m, w, y), 1, m, stream, {}, true, nullptr, {}, {}, heads);
}

}  // namespace deepinfer::cuda
