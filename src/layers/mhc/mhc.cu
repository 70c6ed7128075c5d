// mHC site on the GPU (model-spec §3 "mHC site"), the CUDA twin of mhc.cpp, for hc = 4 streams (V4 and V4.1).
//  - hc_site_mix: the 24 site logits are dot products of the flattened streams (hc * hidden values) with the
//    rows of `fn`, scaled by the unweighted RMS of the streams. Split over column chunks so that every SM reads
//    a slice of fn at decode sizes; the chunk partials are then summed in a fixed order (deterministic), and one
//    warp per token runs the sigmoid / softmax / Sinkhorn steps on the 24 numbers, in fp32 as the reference.
//  - hc_collapse / hc_expand: elementwise over hidden, 8 values per thread.
#include <algorithm>

#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/kernels.h"
#include "cuda/step_kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kHc = 4;
constexpr int kRows = (2 + kHc) * kHc;  // 24 logits: pre | post | comb
// 256 columns of the flattened streams per block: at decode (one token, 16384 or 20480 columns) that is 64 or
// 80 blocks reading fn in parallel; from 64 tokens on, a block takes 4 tokens so fn is re-read from L2 a
// quarter as often.
constexpr int kMixThreads = 64;
constexpr int kColsPerThread = 4;
constexpr int kChunkCols = kMixThreads * kColsPerThread;

// partial[(t * chunks + chunk) * 25 + r]: sum over the chunk of fn[r] . x (r < 24) and of x^2 (r = 24).
template <int kTokensPerBlock>
__global__ void __launch_bounds__(kMixThreads) hc_mix_partial_kernel(const bf16* __restrict__ X,
                                                                     const float* __restrict__ fn, int64_t tokens,
                                                                     int64_t width, int chunks,
                                                                     float* __restrict__ partial) {
  const int chunk = blockIdx.x;
  const int64_t t0 = int64_t(blockIdx.y) * kTokensPerBlock;
  const int64_t col = int64_t(chunk) * kChunkCols + threadIdx.x * kColsPerThread;
  float acc[kTokensPerBlock][kRows + 1];
#pragma unroll
  for (int t = 0; t < kTokensPerBlock; ++t)
#pragma unroll
    for (int r = 0; r <= kRows; ++r) acc[t][r] = 0.0f;

  if (col < width) {  // width is a multiple of 4 (hidden % 8 == 0)
    float x[kTokensPerBlock][4];
#pragma unroll
    for (int t = 0; t < kTokensPerBlock; ++t) {
      if (t0 + t < tokens) {
        const uint2 raw = *reinterpret_cast<const uint2*>(X + (t0 + t) * width + col);
        const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
        const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
        x[t][0] = lo.x, x[t][1] = lo.y, x[t][2] = hi.x, x[t][3] = hi.y;
      } else {
        x[t][0] = x[t][1] = x[t][2] = x[t][3] = 0.0f;
      }
      acc[t][kRows] = x[t][0] * x[t][0] + x[t][1] * x[t][1] + x[t][2] * x[t][2] + x[t][3] * x[t][3];
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float4 f = __ldg(reinterpret_cast<const float4*>(fn + r * width + col));
#pragma unroll
      for (int t = 0; t < kTokensPerBlock; ++t) acc[t][r] = f.x * x[t][0] + f.y * x[t][1] + f.z * x[t][2] + f.w * x[t][3];
    }
  }

  __shared__ float red[kMixThreads / 32][kTokensPerBlock][kRows + 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < kTokensPerBlock; ++t)
#pragma unroll
    for (int r = 0; r <= kRows; ++r) {
      const float v = dev::warp_sum(acc[t][r]);
      if (lane == 0) red[warp][t][r] = v;
    }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kTokensPerBlock * (kRows + 1); idx += kMixThreads) {
    const int t = idx / (kRows + 1), r = idx % (kRows + 1);
    if (t0 + t < tokens) {
      float v = 0.0f;
      for (int w = 0; w < kMixThreads / 32; ++w) v += red[w][t][r];
      partial[((t0 + t) * chunks + chunk) * (kRows + 1) + r] = v;
    }
  }
}

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// One warp per token, one lane per coefficient: lane e < 16 holds comb element (j, k) = (e / 4, e % 4), so a row
// of the 4x4 matrix is 4 neighbouring lanes (xor 1, 2) and a column is lanes k, k + 4, k + 8, k + 12 (xor 4, 8);
// lanes 16..19 hold pre, 20..23 post, lane 24 the sum of squares. The 20 Sinkhorn normalisations are then one
// shuffle pair and one division each instead of a serial loop over the matrix.
__global__ void hc_mix_finish_kernel(const float* __restrict__ partial, int64_t tokens, int chunks, int64_t width,
                                     const float* __restrict__ base, const float* __restrict__ scale, float norm_eps,
                                     float hc_eps, int sinkhorn_iters, float* __restrict__ mix) {
  const int64_t t = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= tokens) return;  // warp-uniform
  // Lane -> logit index: comb 8 + lane, pre / post lane - 16, sum of squares 24.
  const int idx = lane < 16 ? 2 * kHc + lane : lane < 24 ? lane - 16 : kRows;
  float m = 0.0f;
  if (lane <= 24)
    for (int ch = 0; ch < chunks; ++ch) m += partial[(t * chunks + ch) * (kRows + 1) + idx];
  const float ss = __shfl_sync(0xFFFFFFFFu, m, 24);
  const float r = rsqrtf(ss / float(width) + norm_eps);
  float* out = mix + t * kRows;
  if (lane >= 16 && lane < 20) out[idx] = sigmoidf(m * r * scale[0] + base[idx]) + hc_eps;
  if (lane >= 20 && lane < 24) out[idx] = 2.0f * sigmoidf(m * r * scale[1] + base[idx]);

  // comb: softmax over the last index (a row: 4 neighbouring lanes), + eps. Lanes >= 16 compute along unused.
  float v = lane < 16 ? m * r * scale[2] + base[idx] : 0.0f;
  float mx = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
  v = expf(v - mx);
  auto row_sum = [](float x) {
    x += __shfl_xor_sync(0xFFFFFFFFu, x, 1);
    return x + __shfl_xor_sync(0xFFFFFFFFu, x, 2);
  };
  auto col_sum = [](float x) {
    x += __shfl_xor_sync(0xFFFFFFFFu, x, 4);
    return x + __shfl_xor_sync(0xFFFFFFFFu, x, 8);
  };
  v = v / row_sum(v) + hc_eps;
  // Sinkhorn (model-spec §3): one column normalisation, then (iters - 1) x (rows, columns), each sum + hc_eps.
  v = v / (col_sum(v) + hc_eps);
  for (int it = 1; it < sinkhorn_iters; ++it) {
    v = v / (row_sum(v) + hc_eps);
    v = v / (col_sum(v) + hc_eps);
  }
  if (lane < 16) out[idx] = v;
}

__global__ void hc_collapse_kernel(const bf16* __restrict__ X, const float* __restrict__ mix, int64_t tokens,
                                   int64_t hidden, bf16* __restrict__ u) {
  const int64_t vecs_per_token = hidden / 8, total = tokens * vecs_per_token;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / vecs_per_token, v = i % vecs_per_token;
    float acc[8] = {};
#pragma unroll
    for (int j = 0; j < kHc; ++j) {
      const float pre = __ldg(mix + t * kRows + j);
      float x[8];
      dev::unpack8(reinterpret_cast<const dev::Bf16x8*>(X + (t * kHc + j) * hidden)[v], x);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] += pre * x[e];
    }
    reinterpret_cast<dev::Bf16x8*>(u + t * hidden)[v] = dev::pack8(acc);
  }
}

__global__ void hc_expand_kernel(const bf16* X, const bf16* __restrict__ y, const float* __restrict__ mix,
                                 int64_t tokens, int64_t hidden, bf16* X_out) {
  const int64_t vecs_per_token = hidden / 8, total = tokens * vecs_per_token;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / vecs_per_token, v = i % vecs_per_token;
    const float* mx = mix + t * kRows;
    float x[kHc][8], yv[8];
#pragma unroll
    for (int j = 0; j < kHc; ++j) dev::unpack8(reinterpret_cast<const dev::Bf16x8*>(X + (t * kHc + j) * hidden)[v], x[j]);
    dev::unpack8(reinterpret_cast<const dev::Bf16x8*>(y + t * hidden)[v], yv);
    // Every input stream is read before any output is written, so X_out may alias X.
#pragma unroll
    for (int k = 0; k < kHc; ++k) {
      const float post = __ldg(mx + kHc + k);
      float o[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = post * yv[e];
#pragma unroll
      for (int j = 0; j < kHc; ++j) {
        const float cjk = __ldg(mx + 2 * kHc + j * kHc + k);  // sum over the FIRST index (model-spec §3)
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] += cjk * x[j][e];
      }
      reinterpret_cast<dev::Bf16x8*>(X_out + (t * kHc + k) * hidden)[v] = dev::pack8(o);
    }
  }
}

int mix_chunks(int64_t hidden) { return int((kHc * hidden + kChunkCols - 1) / kChunkCols); }

void check_hc(int hc, int64_t hidden, const char* what) {
  DI_CHECK(hc == kHc, std::string("cuda::") + what + ": hc_mult " + std::to_string(hc) + " (the kernels are built for 4)");
  DI_CHECK(hidden % 8 == 0, std::string("cuda::") + what + ": hidden " + std::to_string(hidden) + " is not a multiple of 8");
}

unsigned grid_for(int64_t total, int threads) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>((total + threads - 1) / threads, 65535)));
}

}  // namespace

size_t hc_site_mix_workspace_bytes(int64_t tokens, int hc, int64_t hidden) {
  return size_t(tokens) * mix_chunks(hidden) * (kRows + 1) * sizeof(float);
}

void hc_site_mix(const bf16* X, int64_t tokens, int hc, int64_t hidden, const HcSite& site, float norm_eps,
                 float hc_eps, int sinkhorn_iters, float* mix, void* workspace, cudaStream_t stream) {
  check_hc(hc, hidden, "hc_site_mix");
  if (tokens == 0) return;
  const int chunks = mix_chunks(hidden);
  auto* partial = static_cast<float*>(workspace);
  if (tokens < 64) {
    const dim3 grid{unsigned(chunks), unsigned(tokens)};
    hc_mix_partial_kernel<1><<<grid, kMixThreads, 0, stream>>>(X, site.fn, tokens, kHc * hidden, chunks, partial);
  } else {
    const dim3 grid{unsigned(chunks), unsigned((tokens + 3) / 4)};
    hc_mix_partial_kernel<4><<<grid, kMixThreads, 0, stream>>>(X, site.fn, tokens, kHc * hidden, chunks, partial);
  }
  DI_CUDA_CHECK_LAUNCH("hc_mix_partial_kernel");
  hc_mix_finish_kernel<<<unsigned((tokens + 7) / 8), 256, 0, stream>>>(partial, tokens, chunks, kHc * hidden, site.base,
                                                                       site.scale, norm_eps, hc_eps, sinkhorn_iters, mix);
  DI_CUDA_CHECK_LAUNCH("hc_mix_finish_kernel");
}

void hc_collapse(const bf16* X, const float* mix, int64_t tokens, int hc, int64_t hidden, bf16* u,
                 cudaStream_t stream) {
  check_hc(hc, hidden, "hc_collapse");
  if (tokens == 0) return;
  hc_collapse_kernel<<<grid_for(tokens * hidden / 8, 256), 256, 0, stream>>>(X, mix, tokens, hidden, u);
  DI_CUDA_CHECK_LAUNCH("hc_collapse_kernel");
}

void hc_expand(const bf16* X, const bf16* y, const float* mix, int64_t tokens, int hc, int64_t hidden, bf16* X_out,
               cudaStream_t stream) {
  check_hc(hc, hidden, "hc_expand");
  if (tokens == 0) return;
  hc_expand_kernel<<<grid_for(tokens * hidden / 8, 256), 256, 0, stream>>>(X, y, mix, tokens, hidden, X_out);
  DI_CUDA_CHECK_LAUNCH("hc_expand_kernel");
}


namespace {

constexpr int kHeadThreads = 256;
constexpr int kMaxHc = 8;

// One block per row: the sum of squares and the hc dot products in one pass over the flattened streams (fixed
// reduction order: per thread, then per warp, then warp 0 over the warps), then the collapse.
__global__ void __launch_bounds__(kHeadThreads) hc_head_collapse_kernel(const bf16* __restrict__ X, int hc,
                                                                        int64_t hidden, const float* __restrict__ fn,
                                                                        const float* __restrict__ base,
                                                                        const float* __restrict__ scale,
                                                                        float norm_eps, float hc_eps, bf16* h) {
  const int64_t r = blockIdx.x;
  const int64_t width = hc * hidden;
  const bf16* x = X + r * width;
  float acc[kMaxHc + 1] = {};
  for (int64_t i = threadIdx.x; i < width; i += kHeadThreads) {
    const float v = __bfloat162float(x[i]);
    acc[kMaxHc] += v * v;
    for (int j = 0; j < hc; ++j) acc[j] += fn[j * width + i] * v;
  }
  __shared__ float partial[kHeadThreads / 32][kMaxHc + 1];
  __shared__ float pre[kMaxHc];
  for (int j = 0; j <= kMaxHc; ++j) {
    const float s = dev::warp_sum(acc[j]);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32][j] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float tot[kMaxHc + 1] = {};
    for (int w = 0; w < kHeadThreads / 32; ++w)
      for (int j = 0; j <= kMaxHc; ++j) tot[j] += partial[w][j];
    const float rn = rsqrtf(tot[kMaxHc] / float(width) + norm_eps);
    for (int j = 0; j < hc; ++j) pre[j] = 1.0f / (1.0f + expf(-(tot[j] * rn * scale[0] + base[j]))) + hc_eps;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < hidden; i += kHeadThreads) {
    float s = 0.0f;
    for (int j = 0; j < hc; ++j) s += pre[j] * __bfloat162float(x[j * hidden + i]);
    h[r * hidden + i] = __float2bfloat16(s);
  }
}

}  // namespace

void hc_head_collapse(const bf16* X, int rows, int hc, int64_t hidden, const float* fn, const float* base,
                      const float* scale, float norm_eps, float hc_eps, bf16* h, cudaStream_t stream) {
  DI_CHECK(hc >= 1 && hc <= kMaxHc, "cuda::hc_head_collapse: hc " + std::to_string(hc) + " outside [1, 8]");
  if (rows == 0) return;
  hc_head_collapse_kernel<<<unsigned(rows), kHeadThreads, 0, stream>>>(X, hc, hidden, fn, base, scale, norm_eps,
                                                                      hc_eps, h);
  DI_CUDA_CHECK_LAUNCH("hc_head_collapse_kernel");
}

}  // namespace deepinfer::cuda
