// Embedding into the mHC residual streams (model-spec §3 "Embedding").
#include "cuda/check.h"
#include "cuda/step_kernels.h"

namespace deepinfer::cuda {

namespace {

// One block per (row, stream); 16-byte copies of the embedding row.
__global__ void embed_streams_kernel(const bf16* __restrict__ table, const int32_t* __restrict__ tokens, int hc,
                                     int64_t hidden, bf16* X) {
  const int r = blockIdx.x / hc, j = blockIdx.x % hc;
  const auto* src = reinterpret_cast<const uint4*>(table + int64_t(tokens[r]) * hidden);
  auto* dst = reinterpret_cast<uint4*>(X + (int64_t(r) * hc + j) * hidden);
  for (int64_t i = threadIdx.x; i < hidden / 8; i += blockDim.x) dst[i] = src[i];
}

__global__ void resolve_tokens_kernel(int32_t* tokens, const int32_t* __restrict__ sampled, int rows) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows && tokens[r] < 0) tokens[r] = sampled[-tokens[r] - 1];
}

}  // namespace

void resolve_tokens(int32_t* tokens, const int32_t* sampled, int rows, cudaStream_t stream) {
  if (rows == 0) return;
  resolve_tokens_kernel<<<unsigned((rows + 127) / 128), 128, 0, stream>>>(tokens, sampled, rows);
  DI_CUDA_CHECK_LAUNCH("resolve_tokens_kernel");
}

void embed_streams(const bf16* table, const int32_t* tokens, int rows, int hc, int64_t hidden, bf16* X,
                   cudaStream_t stream) {
  DI_CHECK(hidden % 8 == 0, "cuda::embed_streams: hidden " + std::to_string(hidden) + " is not a multiple of 8");
  if (rows == 0) return;
  embed_streams_kernel<<<unsigned(rows * hc), 128, 0, stream>>>(table, tokens, hc, hidden, X);
  DI_CUDA_CHECK_LAUNCH("embed_streams_kernel");
}

}  // namespace deepinfer::cuda
