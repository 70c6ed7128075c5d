// Embedding into the mHC residual streams (model-spec §3 "Embedding").
#include <cstdlib>
#include <cstring>

#include "cuda/check.h"
#include "cuda/launch.h"
#include "cuda/step_kernels.h"

namespace deepinfer::cuda {

namespace {

// One block per (row, stream); 16-byte copies of the embedding row.
__global__ void embed_streams_kernel(const bf16* __restrict__ table, const int32_t* __restrict__ tokens, int hc,
                                     int64_t hidden, bf16* X) {
  const int r = blockIdx.x / hc, j = blockIdx.x % hc;
  pdl_wait();  // tokens come from resolve_tokens; X may still be read by the previous step's head
  pdl_launch_dependents();
  const auto* src = reinterpret_cast<const uint4*>(table + int64_t(tokens[r]) * hidden);
  auto* dst = reinterpret_cast<uint4*>(X + (int64_t(r) * hc + j) * hidden);
  for (int64_t i = threadIdx.x; i < hidden / 8; i += blockDim.x) dst[i] = src[i];
}

__global__ void resolve_tokens_kernel(int32_t* tokens, const int32_t* __restrict__ sampled, int rows) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  pdl_wait();  // sampled is the previous step's argmax / sampling output
  pdl_launch_dependents();
  if (r < rows && tokens[r] < 0) tokens[r] = sampled[-tokens[r] - 1];
}

}  // namespace

void resolve_tokens(int32_t* tokens, const int32_t* sampled, int rows, cudaStream_t stream) {
  if (rows == 0) return;
  DI_CUDA_CHECK(launch(resolve_tokens_kernel, dim3(unsigned((rows + 127) / 128)), dim3(128), 0, stream, tokens,
                       sampled, rows));
}

void embed_streams(const bf16* table, const int32_t* tokens, int rows, int hc, int64_t hidden, bf16* X,
                   cudaStream_t stream) {
  DI_CHECK(hidden % 8 == 0, "cuda::embed_streams: hidden " + std::to_string(hidden) + " is not a multiple of 8");
  if (rows == 0) return;
  DI_CUDA_CHECK(launch(embed_streams_kernel, dim3(unsigned(rows * hc)), dim3(128), 0, stream, table, tokens, hc,
                       hidden, X));
}

bool fused_attention_steps() {
  static const bool on = [] {
    const char* v = std::getenv("DEEPINFER_FUSED_ATTENTION_STEPS");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

bool fused_mhc_expand() {
  static const bool on = [] {
    const char* v = std::getenv("DEEPINFER_FUSED_MHC_EXPAND");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

}  // namespace deepinfer::cuda
