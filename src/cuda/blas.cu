#include "cuda/blas.h"

#include <string>

#include "core/error.h"

namespace deepinfer::cuda {

namespace {

void check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLAS error ") + std::to_string(int(st)) + " (" + cublasGetStatusString(st) + ") in " +
                what);
}

}  // namespace

BlasHandle::BlasHandle() {
  check(cublasCreate(&handle_), "cublasCreate");
  // bf16 operands: the tensor cores form exact products and accumulate in fp32 (TF32 concerns fp32 operands
  // only), so the default math mode keeps the CPU reference's numerics up to summation order.
  check(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  // A workspace of our own: cuBLAS then never allocates during a CUDA graph capture of a model step.
  if (cudaMalloc(&workspace_, kWorkspaceBytes) != cudaSuccess) throw Error("cuBLAS: cannot allocate its workspace");
  check(cublasSetWorkspace(handle_, workspace_, kWorkspaceBytes), "cublasSetWorkspace");
}

BlasHandle::~BlasHandle() {
  if (handle_) cublasDestroy(handle_);
  if (workspace_) cudaFree(workspace_);
}

void gemm_bf16(cublasHandle_t blas, const bf16* x, int64_t ldx, const bf16* w, int64_t ldw, void* y, OutType out,
               int64_t ldy, int64_t m, int64_t n, int64_t k, cudaStream_t stream, int batch, int64_t stride_x,
               int64_t stride_w, int64_t stride_y) {
  if (m == 0 || n == 0) return;
  check(cublasSetStream(blas, stream), "cublasSetStream");
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType_t ytype = out == OutType::F32 ? CUDA_R_32F : CUDA_R_16BF;
  // Column-major view: Y^T [n, m] = W [n, k] (W^T stored as k x n with ld ldw, transposed) . X^T [k, m].
  check(cublasGemmStridedBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &one, w, CUDA_R_16BF,
                                   int(ldw), stride_w, x, CUDA_R_16BF, int(ldx), stride_x, &zero, y, ytype, int(ldy),
                                   stride_y, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx (bf16)");
}

}  // namespace deepinfer::cuda
