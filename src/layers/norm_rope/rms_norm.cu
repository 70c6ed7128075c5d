// RMSNorm on the GPU (model-spec §2), the CUDA twin of rms_norm.cpp: fp32 statistics over bf16 rows, bf16 out.
// Memory-bound: one read and one write of the row. One block per row; each thread keeps its slice in registers
// between the reduction and the scaling, so the row is read from memory once. The per-thread math lives in
// rms_norm.cuh, shared with the kernels that fuse a norm (the mHC site, the norm -> FP8 quantization below).
#include <type_traits>

#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/kernels.h"
#include "cuda/launch.h"
#include "cuda/step_kernels.h"
#include "layers/norm_rope/rms_norm.cuh"
#include "layers/norm_rope/rope.cuh"
#include "layers/quant/fp8_quant.cuh"
#include "layers/quant/fp8_quant_lanes.cuh"

namespace deepinfer::cuda {

namespace {

using dev::kNormMaxVecs;
using dev::kNormThreads;

__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(const bf16* __restrict__ x,
                                                                const bf16* __restrict__ weight, bf16* y, int n,
                                                                float eps) {
  const int64_t row = blockIdx.x;
  const int vecs = n / 8;
  const auto* xr = reinterpret_cast<const dev::Bf16x8*>(x + row * n);
  auto* yr = reinterpret_cast<dev::Bf16x8*>(y + row * n);
  const auto* wr = reinterpret_cast<const dev::Bf16x8*>(weight);
  pdl_wait();  // PDL (cuda/launch.h): x is the predecessor's output, y may alias it

  float v[kNormMaxVecs][8];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormMaxVecs; ++i) {
    int idx = threadIdx.x + i * kNormThreads;
    if (idx < vecs) {
      dev::unpack8(xr[idx], v[i]);
      ss = dev::add_squares8(ss, v[i]);
    }
  }
  // Rows wider than the register slice: the rest is read twice (L1 / L2 hits).
  for (int idx = threadIdx.x + kNormMaxVecs * kNormThreads; idx < vecs; idx += kNormThreads) {
    float t[8];
    dev::unpack8(xr[idx], t);
    ss = dev::add_squares8(ss, t);
  }

  const float r = rsqrtf(dev::norm_block_sum(ss) / float(n) + eps);
  pdl_launch_dependents();  // the row is read; only the scaled stores remain

  auto scale_store = [&](int idx, float (&t)[8]) {
    float o[8];
    dev::rms_scale8(t, r, wr, idx, o);
    yr[idx] = dev::pack8(o);
  };
#pragma unroll
  for (int i = 0; i < kNormMaxVecs; ++i) {
    int idx = threadIdx.x + i * kNormThreads;
    if (idx < vecs) scale_store(idx, v[i]);
  }
  for (int idx = threadIdx.x + kNormMaxVecs * kNormThreads; idx < vecs; idx += kNormThreads) {
    float t[8];
    dev::unpack8(xr[idx], t);
    scale_store(idx, t);
  }
}

}  // namespace

void rms_norm(const bf16* x, const bf16* weight, bf16* y, int64_t rows, int n, float eps, cudaStream_t stream) {
  DI_CHECK(n % 8 == 0, "cuda::rms_norm: width " + std::to_string(n) + " is not a multiple of 8");
  if (rows == 0) return;
  DI_CUDA_CHECK(launch(rms_norm_kernel, dim3(unsigned(rows)), dim3(kNormThreads), 0, stream, x, weight, y, n, eps));
}


namespace {

// The row's rsqrt(mean(x^2) + eps) of an fp32 row, thread i over the float4 i, i + kNormThreads, ... (head_bf16:
// V4's per-head query norm, in the reference's bf16 ops; rms_norm.cuh). Also the PDL points of both fp32 norms
// (cuda/launch.h): the wait before the first read of the row (the predecessor GEMM's output), dependents released
// once the statistics pass is done.
__device__ __forceinline__ float rms_f32_factor(const float4* __restrict__ xr, int n, float eps, bool head_bf16) {
  pdl_wait();
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n / 4; i += kNormThreads)
    ss = dev::add_squares4(ss, dev::gemm_out4(xr, i), head_bf16);
  const float sum = dev::norm_block_sum(ss);
  const float r = head_bf16 ? dev::head_rms_factor_bf16(sum, n, eps) : dev::rms_factor(sum, n, eps);
  pdl_launch_dependents();
  return r;
}

// fp32 rows (GEMM outputs): one block per row, the row read twice (the second pass from L1 / L2).
__global__ void __launch_bounds__(kNormThreads) rms_norm_f32_kernel(const float* __restrict__ x,
                                                                    const bf16* __restrict__ weight, bf16* y, int n,
                                                                    float eps) {
  const int64_t row = blockIdx.x;
  const auto* xr = reinterpret_cast<const float4*>(x + row * n);
  const float r = rms_f32_factor(xr, n, eps, weight == nullptr);
  bf16* yr = y + row * n;
  for (int i = threadIdx.x; i < n / 4; i += kNormThreads) {
    const float4 v = dev::gemm_out4(xr, i);
    const float t[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) yr[4 * i + j] = __float2bfloat16(dev::rms_scale_f32(t[j], r, weight, 4 * i + j));
  }
}

// Vector idx's scale slot where it is its quantization block's first vector, else null. lanes is a power of two (the
// host checks it): a mask and shifts, not three runtime 32-bit divisions (~45 dependent instructions between the
// codes' store and the scale's, the kernel's last; SASS).
__device__ __forceinline__ float* scale_slot(float* scales, int64_t row, int idx, int vecs, int lanes) {
  const int block_shift = __ffs(lanes) - 1;
  return (idx & (lanes - 1)) == 0 ? scales + row * (vecs >> block_shift) + (idx >> block_shift) : nullptr;
}

// One vector's quantization and stores (f: its bf16 values, zeros where !valid; the whole warp calls this).
template <int kLanes>
__device__ __forceinline__ void quantize_store_vec(const float (&f)[8], bool valid, int idx, int vecs, int lanes,
                                                   int64_t row, uint8_t* __restrict__ q, float* slot) {
  uint2 codes;
  const float scale = dev::fp8_quantize8_lanes<kLanes>(f, lanes, codes);
  if (!valid) return;
  reinterpret_cast<uint2*>(q + row * 8 * vecs)[idx] = codes;
  // st.global: the held slots' empty asm hides that they are global (a generic ST.E else).
  if (slot) asm volatile("st.global.f32 [%0], %1;\n" : : "l"(slot), "f"(scale) : "memory");
}

// The same norm, then fp8_quantize of the bf16 result: the second pass gives each thread 8 consecutive values
// (vector i, i + kNormThreads, ...), so a quantization block of `block` values is block / 8 consecutive lanes
// (fp8_quant.cuh). The whole block runs every pass (whole warps for the shuffles); lanes past the row pass zeros.
__global__ void __launch_bounds__(kNormThreads) rms_norm_f32_quantize_kernel(const float* __restrict__ x,
                                                                             const bf16* __restrict__ weight, bf16* y,
                                                                             uint8_t* __restrict__ q,
                                                                             float* __restrict__ scales, int n,
                                                                             float eps, int lanes_per_block) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * n;
  const int vecs = n / 8;
  // The thread's weights (a weight: read before pdl_wait, cuda/launch.h) start towards L1 here, ahead of the row's
  // statistics: loaded only in the second pass, their round trip (eight LDG.U16 of one line) came after the block's
  // reduction and the division, the kernel's last one before its stores (SASS).
  if (weight)
#pragma unroll 1
    for (int idx = threadIdx.x; idx < vecs; idx += kNormThreads)
      prefetch_l1(weight + 8 * idx);
  const float r = rms_f32_factor(reinterpret_cast<const float4*>(xr), n, eps, weight == nullptr);
  for (int base = 0; base < vecs; base += kNormThreads) {
    const int idx = base + threadIdx.x;
    const bool valid = idx < vecs;
    float f[8] = {};
    if (valid) {
      const auto* x4 = reinterpret_cast<const float4*>(xr);
      const float4 a = dev::gemm_out4(x4, 2 * idx), b = dev::gemm_out4(x4, 2 * idx + 1);
      const float t[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) f[j] = dev::rms_scale_f32(t[j], r, weight, 8 * idx + j);
      const dev::Bf16x8 rounded = dev::pack8(f);
      if (y) reinterpret_cast<dev::Bf16x8*>(y + row * n)[idx] = rounded;
      dev::unpack8(rounded, f);  // the quantization reads the bf16 values, as fp8_quantize of y does
    }
    quantize_store_vec<0>(f, valid, idx, vecs, lanes_per_block, row, q,
                          scale_slot(scales, row, idx, vecs, lanes_per_block));
  }
}

// rms_norm_f32_quantize_kernel for a few rows (decode: rows <= kFewRows, a block an SM, so its registers do not cost
// blocks), the same values in fewer dependent round trips (helper-155). Rows up to 8 * kNormThreads * kQuantHeldVecs
// values (V4's q_lora 1024, V4.1's 1280) are read in one round trip:
// pass 1's float4s (the statistics' mapping, kHeldF4 of them) and pass 2's vectors are loaded together after the
// wait and kept in registers, and pass 2's weights before it (a weight, cuda/launch.h). The loop form paid one L2
// round trip per float4 of pass 1 (2 at 1024, 3 at 1280), then pass 2's reloads and weights from L1 (SASS).
// kLanes: the quantization block's lanes at compile time (for_compiled_lanes), or 0. kForm: r's form for this launch's
// n and eps (rmsf::rms_form; rms_factor_as).
constexpr int kQuantHeldVecs = 2, kHeldF4 = 2 * kQuantHeldVecs, kFewRows = 128;

template <int kLanes, rmsf::RmsForm kForm>
__global__ void __launch_bounds__(kNormThreads) rms_norm_f32_quantize_rows_kernel(const float* __restrict__ x,
                                                                             const bf16* __restrict__ weight, bf16* y,
                                                                             uint8_t* __restrict__ q,
                                                                             float* __restrict__ scales, int n,
                                                                             float eps, int lanes_per_block) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * n;
  const auto* x4 = reinterpret_cast<const float4*>(xr);
  const int vecs = n / 8, lanes = kLanes > 0 ? kLanes : lanes_per_block;
  const float inv_n = kForm == rmsf::RmsForm::kPow2NormalEps ? rmsf::pow2_inverse(n) : 0.0f;
  // The held vectors' weights (8 bf16, one 16-byte load each), then the others' lines towards L1.
  dev::Bf16x8 w[kQuantHeldVecs] = {};
  if (weight) {
#pragma unroll
    for (int p = 0; p < kQuantHeldVecs; ++p) {
      const int idx = threadIdx.x + p * kNormThreads;
      if (idx < vecs) w[p] = reinterpret_cast<const dev::Bf16x8*>(weight)[idx];
    }
#pragma unroll 1
    for (int idx = threadIdx.x + kQuantHeldVecs * kNormThreads; idx < vecs; idx += kNormThreads)
      prefetch_l1(weight + 8 * idx);
  }
  // The held vectors' scale slots, kept in registers from here (the empty asm; ptxas forms them beside the row's
  // loads): formed where they are stored, their constant-bank load of `scales` and its address steps came after the
  // codes, the last dependent steps before the kernel's last store (SASS).
  float* slot[kQuantHeldVecs];
#pragma unroll
  for (int p = 0; p < kQuantHeldVecs; ++p) {
    slot[p] = scale_slot(scales, row, int(threadIdx.x) + p * kNormThreads, vecs, lanes);
    asm volatile("" : "+l"(slot[p]));
  }
  pdl_wait();  // PDL (cuda/launch.h): x is the predecessor's output
  float4 s4[kHeldF4], va[kQuantHeldVecs], vb[kQuantHeldVecs];
#pragma unroll
  for (int p = 0; p < kQuantHeldVecs; ++p) {
    const int idx = threadIdx.x + p * kNormThreads;
    va[p] = idx < vecs ? dev::gemm_out4(x4, 2 * idx) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    vb[p] = idx < vecs ? dev::gemm_out4(x4, 2 * idx + 1) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
#pragma unroll
  for (int k = 0; k < kHeldF4; ++k) {
    const int i = threadIdx.x + k * kNormThreads;
    s4[k] = i < n / 4 ? dev::gemm_out4(x4, i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  // rms_f32_factor's sum and factor, the same additions: float4 i, i + kNormThreads, ... in that order.
  const bool head_bf16 = weight == nullptr;
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kHeldF4; ++k)
    if (threadIdx.x + k * kNormThreads < n / 4) ss = dev::add_squares4(ss, s4[k], head_bf16);
  for (int i = threadIdx.x + kHeldF4 * kNormThreads; i < n / 4; i += kNormThreads)
    ss = dev::add_squares4(ss, dev::gemm_out4(x4, i), head_bf16);
  const float sum = dev::norm_block_sum(ss);
  const float r =
      head_bf16 ? dev::head_rms_factor_bf16(sum, n, eps) : dev::rms_factor_as<kForm>(sum, n, inv_n, eps);
  pdl_launch_dependents();  // the row is read; the statistics are done

  // Vector idx's bf16 values f[j] = bf16(w * (x * r)) (rms_scale_f32), stored to y where it is kept.
  auto normed = [&](int idx, const float (&t)[8], const float (&wf)[8], float (&f)[8]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = weight ? wf[j] * (t[j] * r) : t[j] * r;
    const dev::Bf16x8 rounded = dev::pack8(f);
    if (y) reinterpret_cast<dev::Bf16x8*>(y + row * n)[idx] = rounded;
    dev::unpack8(rounded, f);  // the quantization reads the bf16 values, as fp8_quantize of y does
  };
#pragma unroll
  for (int p = 0; p < kQuantHeldVecs; ++p) {
    if (p * kNormThreads >= vecs) break;  // block-uniform
    const int idx = threadIdx.x + p * kNormThreads;
    const bool valid = idx < vecs;
    float f[8] = {};
    if (valid) {
      const float t[8] = {va[p].x, va[p].y, va[p].z, va[p].w, vb[p].x, vb[p].y, vb[p].z, vb[p].w};
      float wf[8];
      dev::unpack8(w[p], wf);
      normed(idx, t, wf, f);
    }
    quantize_store_vec<kLanes>(f, valid, idx, vecs, lanes, row, q, slot[p]);
  }
  for (int base = kQuantHeldVecs * kNormThreads; base < vecs; base += kNormThreads) {  // wider rows
    const int idx = base + threadIdx.x;
    const bool valid = idx < vecs;
    float f[8] = {};
    if (valid) {
      const float4 a = dev::gemm_out4(x4, 2 * idx), b = dev::gemm_out4(x4, 2 * idx + 1);
      const float t[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      float wf[8] = {};
      if (weight) dev::unpack8(reinterpret_cast<const dev::Bf16x8*>(weight)[idx], wf);
      normed(idx, t, wf, f);
    }
    quantize_store_vec<kLanes>(f, valid, idx, vecs, lanes, row, q, scale_slot(scales, row, idx, vecs, lanes));
  }
}

// rms_norm_f32 -> rope (-> the window KV cache format) in one launch: rows of one attention head each (the query
// heads after wq_b, or the KV row after wkv; model-spec §3 / §4 "Attention": q / kv norm, RoPE on the last rope_dim
// channels, then the cache's FP8 format). Issue 4: at batch-1 decode these were 2 (query) and 3 (KV) dependent
// launches of a few microseconds each for 1-64 KB. Thread i holds float4 i, i + kNormThreads, ... of the row
// (rms_norm_f32's mapping, so the same r and the same bf16 values); the rope pairs (2p, 2p + 1) of the slice lie
// inside one float4 (the slice starts at an even channel), rotated from the bf16 values as rope() does (rope.cuh);
// a cache block of B channels is B / 4 consecutive threads, whose amax (fmaxf: order-free) over the bf16 values
// gives kv_fake_quant's / mxfp8_window_fake_quant's scale (fp8_quant.cuh). The whole block runs every pass (the
// cache shuffles).
__global__ void __launch_bounds__(kNormThreads) rms_norm_f32_rope_kernel(
    const float* __restrict__ x, const bf16* __restrict__ weight, bf16* y, int n, float eps, int heads,
    const int32_t* __restrict__ positions, const float* __restrict__ inv_freq, int rope_dim, const KvCacheRows cache) {
  const int64_t row = blockIdx.x;
  const auto* xr = reinterpret_cast<const float4*>(x + row * n);
  const int nope = n - rope_dim, block_lanes = cache.block / 4;
  // The position and the first pass's frequencies are loaded before the row's statistics, so that their round
  // trips run beside the reduction instead of after it; later passes (rows wider than 512) load theirs in place.
  // The position is only prefetched there (towards L1) and read after the statistics: read into a register before
  // them, it lived across rms_factor's division slow-path call and ptxas spilled it at once (an STL right behind its
  // LDG), so the row's loads waited for the position's round trip (SASS; the STL / LDL pair is gone now).
  // The thread's norm weights (the KV row's) towards L1 before the wait (a weight, cuda/launch.h): read only after
  // the statistics, their L2 round trip was the first thing after r, and the second pair's load waited for the
  // first pair's (SASS).
  if (weight)
#pragma unroll 1
    for (int c = 4 * int(threadIdx.x); c < n; c += 4 * kNormThreads) prefetch_l1(weight + c);
  pdl_wait();  // PDL (cuda/launch.h): positions and x are the step's / the predecessor's
  const int32_t* position_at = positions + int(blockIdx.x) / heads;  // 32-bit division: no 64-bit call
  prefetch_l1(position_at);
  float first_freq[2] = {};
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const int c = 4 * int(threadIdx.x) + 2 * p;
    if (c >= nope && c < n) first_freq[p] = inv_freq[(c - nope) / 2];
  }
  const float r = rms_f32_factor(xr, n, eps, weight == nullptr);  // its pdl_wait() is a no-op now
  const int32_t position = *position_at;
  for (int base = 0; base < n / 4; base += kNormThreads) {
    const int i = base + threadIdx.x;
    const bool valid = i < n / 4;
    __nv_bfloat162 out[2] = {};
    if (valid) {
      const float4 v = dev::gemm_out4(xr, i);
      const float t[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const int c = 4 * i + 2 * p;
        out[p] = dev::rms_scale_rope_pair(t[2 * p], t[2 * p + 1], r, weight, c, nope, [&] {
          return dev::rope_angle(position, base == 0 ? first_freq[p] : inv_freq[(c - nope) / 2], false);
        });
      }
      if (y) *reinterpret_cast<uint2*>(y + row * n + 4 * i) = *reinterpret_cast<const uint2*>(out);
    }
    if (!cache.rows) continue;  // block-uniform
    const float f[4] = {__low2float(out[0]), __high2float(out[0]), __low2float(out[1]), __high2float(out[1])};
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (4 * i + j < cache.quantized) amax = fmaxf(amax, fabsf(f[j]));
    for (int o = block_lanes / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    const float scale = dev::kv_fp8_scale(amax);
    if (!valid) continue;
    if (cache.format == KvFormat::Fp8) {  // the record (kv_record.h; the host checked V4's shape): block-uniform
      uint8_t* rec = static_cast<uint8_t*>(cache.rows) + row * kvrec::kRowBytes;
      if (4 * i < kvrec::kNope) {
        uint32_t codes = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) codes |= uint32_t(kvrec::encode_code(f[j], scale)) << (8 * j);
        *reinterpret_cast<uint32_t*>(rec + kvrec::kCodes + 4 * i) = codes;
        if ((4 * i) % kvrec::kBlock == 0) rec[kvrec::kScales + 4 * i / kvrec::kBlock] = kvrec::encode_scale(scale);
      } else {  // the RoPE channels as they are
        *reinterpret_cast<uint2*>(rec + kvrec::kRope + 2 * (4 * i - kvrec::kNope)) =
            *reinterpret_cast<const uint2*>(out);
      }
      if (i < (kvrec::kRowBytes - kvrec::kScales - kvrec::kBlocks))  // the scale pad and the row pad: zero
        rec[kvrec::kScales + kvrec::kBlocks + i] = 0;
      continue;
    }
    if (cache.format == KvFormat::Mxfp8) {  // V4.1's window record (kv_record.h kvrec41; the host checked the shape)
      uint8_t* rec = static_cast<uint8_t*>(cache.rows) + row * kvrec41::kWindowRowBytes;
      uint32_t codes = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) codes |= uint32_t(kvrec::encode_code(f[j], scale)) << (8 * j);
      *reinterpret_cast<uint32_t*>(rec + kvrec41::kWindowCodes + 4 * i) = codes;
      if ((4 * i) % kvrec41::kWindowBlock == 0)
        rec[kvrec41::kWindowScales + 4 * i / kvrec41::kWindowBlock] = kvrec::encode_scale(scale);
      continue;
    }
    bf16 q[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const bf16 b = j % 2 ? __high2bfloat16(out[j / 2]) : __low2bfloat16(out[j / 2]);
      q[j] = 4 * i + j < cache.quantized ? dev::kv_fp8_value(f[j], scale) : b;
    }
    *reinterpret_cast<uint2*>(static_cast<bf16*>(cache.rows) + row * n + 4 * i) = *reinterpret_cast<const uint2*>(q);
  }
}

}  // namespace

void rms_norm_f32_rope(const float* x, const bf16* weight, bf16* y, int64_t rows, int n, float eps, int heads,
                       const int32_t* positions, const float* inv_freq, int rope_dim, KvCacheRows cache,
                       cudaStream_t stream) {
  DI_CHECK(n % 4 == 0 && rope_dim % 2 == 0 && rope_dim >= 0 && rope_dim <= n && heads > 0 && rows % heads == 0,
           "cuda::rms_norm_f32_rope: width " + std::to_string(n) + " / rope_dim " + std::to_string(rope_dim) +
               " / heads " + std::to_string(heads) + " / rows " + std::to_string(rows) +
               ": need n % 4 == 0, an even rope_dim <= n, rows a multiple of heads");
  DI_CHECK(!cache.rows || ((cache.block == 32 || cache.block == 64) && cache.quantized >= 0 && cache.quantized <= n),
           "cuda::rms_norm_f32_rope: cache blocks of " + std::to_string(cache.block) + " over " +
               std::to_string(cache.quantized) + " channels (blocks of 32 or 64, at most the width)");
  DI_CHECK(!cache.rows || cache.format == KvFormat::Bf16 ||
               (cache.format == KvFormat::Fp8 && n == kvrec::kDim && cache.block == kvrec::kBlock &&
                cache.quantized == kvrec::kNope && rope_dim == kvrec::kRopeDim && heads == 1) ||
               (cache.format == KvFormat::Mxfp8 && n == kvrec41::kDim && cache.block == kvrec41::kWindowBlock &&
                cache.quantized == kvrec41::kDim && heads == 1),
           "cuda::rms_norm_f32_rope: a record holds one head of 512 channels (FP8: " +
               std::to_string(kvrec::kNope) + " of them in blocks of " + std::to_string(kvrec::kBlock) +
               "; MXFP8: all of them in blocks of " + std::to_string(kvrec41::kWindowBlock) + ")");
  if (rows == 0) return;
  DI_CUDA_CHECK(launch(rms_norm_f32_rope_kernel, dim3(unsigned(rows)), dim3(kNormThreads), 0, stream, x, weight, y,
                       n, eps, heads, positions, inv_freq, rope_dim, cache));
}

void rms_norm_f32(const float* x, const bf16* weight, bf16* y, int64_t rows, int n, float eps, cudaStream_t stream) {
  DI_CHECK(n % 4 == 0, "cuda::rms_norm_f32: width " + std::to_string(n) + " is not a multiple of 4");
  if (rows == 0) return;
  DI_CUDA_CHECK(launch(rms_norm_f32_kernel, dim3(unsigned(rows)), dim3(kNormThreads), 0, stream, x, weight, y, n,
                       eps));
}

void rms_norm_f32_quantize(const float* x, const bf16* weight, bf16* y, uint8_t* q, float* scales, int64_t rows,
                           int n, float eps, int block, cudaStream_t stream) {
  DI_CHECK(block >= 8 && block <= 256 && (block & (block - 1)) == 0 && n % block == 0,
           "cuda::rms_norm_f32_quantize: block " + std::to_string(block) +
               " must be a power of two in [8, 256] dividing the width " + std::to_string(n));
  if (rows == 0) return;
  const int lanes = block / 8;
  // Many rows (prefill): the loop form, 32 registers (16 blocks an SM); a few: the held form (54-55, a block an SM),
  // r in the cheapest form n and eps allow (decode: V4's q_lora 1024 and eps 1e-6 the power-of-two one, V4.1's 1280
  // and 1e-20 the normal-eps one).
  const auto held = [&](auto form) {
    constexpr rmsf::RmsForm kForm = decltype(form)::value;
    const auto by_lanes = [](auto l) { return rms_norm_f32_quantize_rows_kernel<decltype(l)::value, kForm>; };
    return dev::for_compiled_lanes(lanes, by_lanes);
  };
  using rmsf::RmsForm;
  const RmsForm form = rmsf::rms_form(n, eps);
  const auto kernel =
      rows > kFewRows                    ? rms_norm_f32_quantize_kernel
      : form == RmsForm::kPow2NormalEps ? held(std::integral_constant<RmsForm, RmsForm::kPow2NormalEps>{})
      : form == RmsForm::kNormalEps     ? held(std::integral_constant<RmsForm, RmsForm::kNormalEps>{})
                                        : held(std::integral_constant<RmsForm, RmsForm::kDivide>{});
  DI_CUDA_CHECK(launch(kernel, dim3(unsigned(rows)), dim3(kNormThreads), 0, stream, x, weight, y, q, scales, n, eps,
                       lanes));
}

}  // namespace deepinfer::cuda
