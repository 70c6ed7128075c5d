// Sampling on the GPU (sampling_params.h, src/runtime/sampler.cpp is the host reference).
//  - argmax_rows: the arg-max of each logits row, the lowest index among equal maxima and NaN counted as the
//    largest value (torch.argmax semantics). One block per row; at decode batch 1 the row (129280 fp32 = 517 KB) is
//    a few microseconds of a step that reads gigabytes of weights.
//  - sample_rows: one block per sampled row; thread t owns a contiguous range of token ids. The weights are
//    w_i = exp(l_i / T - max_j l_j / T) in fp32 (1 at the most likely token, recomputed in every pass rather than
//    stored), and every mass is a sum of w_i as fixed-point integers (2^-40 units): integer sums are exact, so no
//    result depends on the order in which threads add. Top-k and top-p are thresholds on the order key of w found
//    by a radix select (4 passes of 8 bits: a histogram of counts for top-k, of masses for top-p); ties at the
//    top-k threshold keep the lowest ids (a block scan ranks them), top-p keeps every token at its threshold (the
//    host keeps the lowest ids of such a tie: one of the near-ties where the two may differ). The draw is the
//    host's inverse CDF in token-id order: the first kept token whose cumulative mass exceeds floor(u * total).
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <cmath>

#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/kernels.h"
#include "cuda/launch.h"

namespace deepinfer::cuda {

namespace {

constexpr int kArgmaxThreads = 1024;

struct Best {
  float v;
  int64_t i;
};

// Is b a better arg-max candidate than a?
__device__ __forceinline__ bool better(const Best& a, const Best& b) {
  const bool an = isnan(a.v), bn = isnan(b.v);
  if (an != bn) return bn;
  if (!an && b.v != a.v) return b.v > a.v;
  return b.i < a.i;
}

__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* __restrict__ logits, int64_t vocab,
                                                                int32_t* __restrict__ out) {
  pdl_wait();  // PDL (cuda/launch.h), as every kernel of this file: the logits are the predecessor's
  const float* row = logits + int64_t(blockIdx.x) * vocab;
  Best best{-INFINITY, vocab};
  auto consider = [&](float v, int64_t i) {
    const Best c{v, i};
    if (better(best, c)) best = c;
  };
  if (vocab % 4 == 0) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
    for (int64_t i = threadIdx.x; i < vocab / 4; i += kArgmaxThreads) {
      const float4 v = __ldg(r4 + i);
      consider(v.x, 4 * i);
      consider(v.y, 4 * i + 1);
      consider(v.z, 4 * i + 2);
      consider(v.w, 4 * i + 3);
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += kArgmaxThreads) consider(__ldg(row + i), i);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Best other{__shfl_xor_sync(0xFFFFFFFFu, best.v, o),
                     static_cast<int64_t>(__shfl_xor_sync(0xFFFFFFFFu, static_cast<long long>(best.i), o))};
    if (better(best, other)) best = other;
  }
  __shared__ Best warp_best[kArgmaxThreads / 32];
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    Best b = warp_best[0];
    for (int w = 1; w < kArgmaxThreads / 32; ++w)
      if (better(b, warp_best[w])) b = warp_best[w];
    out[blockIdx.x] = int32_t(b.i);
  }
}

// One block per masked row; 32-bit words are read once per 32 logits.
__global__ void apply_token_bitmask_kernel(float* logits, int64_t vocab, const int32_t* __restrict__ rows,
                                           const uint32_t* __restrict__ masks, int64_t mask_words,
                                           int64_t mask_vocab) {
  pdl_wait();
  pdl_launch_dependents();
  float* row = logits + int64_t(rows[blockIdx.x]) * vocab;
  const uint32_t* mask = masks + int64_t(blockIdx.x) * mask_words;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
    const bool allowed = v < mask_vocab && ((mask[v >> 5] >> (v & 31)) & 1u);
    if (!allowed) row[v] = -INFINITY;
  }
}

// ---- seeded sampling

constexpr int kSampleThreads = 512;
constexpr float kFixedScale = 0x1p40f;  // fixed-point unit of the masses: 2^-40 of the top token's weight

// Philox4x64-10 and the uniform of runtime::uniform_at (sampler.cpp), bitwise: the same 53-bit u for (seed, position).
__device__ double uniform_at(uint64_t seed, uint64_t position) {
  uint64_t c0 = position, c1 = 0, c2 = 0, c3 = 0, k0 = seed, k1 = 0;
  for (int round = 0; round < 10; ++round) {
    const uint64_t hi0 = __umul64hi(0xD2E7470EE14C6C93ULL, c0), lo0 = 0xD2E7470EE14C6C93ULL * c0;
    const uint64_t hi1 = __umul64hi(0xCA5A826395121157ULL, c2), lo1 = 0xCA5A826395121157ULL * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B97F4A7C15ULL;
    k1 += 0xBB67AE8584CAA73BULL;
  }
  return double(c0 >> 11) * 0x1p-53;
}

using SampleReduceU64 = cub::BlockReduce<unsigned long long, kSampleThreads>;
using SampleScanU64 = cub::BlockScan<unsigned long long, kSampleThreads>;

struct SampleShared {
  union {
    typename SampleReduceU64::TempStorage reduce_u64;
    typename SampleScanU64::TempStorage scan_u64;
  };
  unsigned long long hist[256];
  unsigned long long value;
  uint32_t prefix;
  float warp_max[kSampleThreads / 32];
};

// Radix select from the top byte down over the keys of the tokens that `member(i, key)` admits: the largest key K
// such that the tokens with key >= K carry at least `need` of `amount(w)` (counts or masses). Returns K and, in
// `rest`, how much of `need` the tokens with key exactly K must supply. Every thread calls it (block-wide).
template <class Member, class Amount, class Walk>
__device__ uint32_t radix_select(SampleShared& sh, unsigned long long need, unsigned long long& rest, Walk walk,
                                 Member member, Amount amount) {
  uint32_t prefix = 0, mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kSampleThreads) sh.hist[b] = 0;
    __syncthreads();
    walk([&](int64_t i, float w, uint32_t key) {
      const bool in = member(i, key);  // called for every token: a member may count what it meets
      if (in && (key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 0xFFu], amount(w));
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long above = 0;
      int b = 255;
      for (; b > 0; --b) {
        if (above + sh.hist[b] >= need) break;
        above += sh.hist[b];
      }
      sh.prefix = prefix | (uint32_t(b) << shift);
      sh.value = need - above;
    }
    __syncthreads();
    prefix = sh.prefix;
    need = sh.value;
    mask |= 0xFFu << shift;
    __syncthreads();  // everyone has read sh.prefix / sh.value before the next pass rewrites them
  }
  rest = need;
  return prefix;
}

// A truncation threshold of sample_rows: the tokens with key > `key` are kept, and of those with key == `key` the
// `ties` lowest ids (sampling_params.h: more likely first, the lower id first among equals). admit() must see the
// thread's candidates in id order, once each per walk: it ranks the ties it meets after the earlier threads'
// (`base`, a block scan).
struct Threshold {
  bool on = false;
  uint32_t key = 0;
  unsigned long long ties = 0, base = 0, seen = 0;
  __device__ bool admit(uint32_t k) {
    if (!on || k > key) return true;
    if (k < key) return false;
    return base + seen++ < ties;
  }
};

__global__ void __launch_bounds__(kSampleThreads)
    sample_rows_kernel(const float* __restrict__ logits, int64_t vocab, const SampleRow* __restrict__ rows,
                       int32_t* __restrict__ tokens) {
  __shared__ SampleShared sh;
  pdl_wait();
  const SampleRow s = rows[blockIdx.x];
  const float* l = logits + int64_t(s.row) * vocab;
  const int64_t per = (vocab + kSampleThreads - 1) / kSampleThreads;
  const int64_t begin = min(vocab, int64_t(threadIdx.x) * per), end = min(vocab, begin + per);

  float lmax = -INFINITY;
  for (int64_t i = begin; i < end; ++i) lmax = fmaxf(lmax, l[i]);
  lmax = dev::warp_max(lmax);
  if (threadIdx.x % 32 == 0) sh.warp_max[threadIdx.x / 32] = lmax;
  __syncthreads();
  for (int w = 0; w < kSampleThreads / 32; ++w) lmax = fmaxf(lmax, sh.warp_max[w]);
  const float inv_t = 1.0f / s.temperature;
  const float zmax = lmax * inv_t;
  const bool finite = isfinite(zmax);
  // Visits the thread's tokens in id order with their weight and its order key (w >= 0: the float bits order it).
  auto walk = [&](auto&& visit) {
    for (int64_t i = begin; i < end; ++i) {
      float w = finite ? expf(l[i] * inv_t - zmax) : 0.0f;
      w = w >= 0.0f ? w : 0.0f;  // a NaN logit weighs nothing
      visit(i, w, __float_as_uint(w));
    }
  };
  auto fixed = [](float w) -> unsigned long long { return __float2ull_rz(w * kFixedScale); };

  // The block's exclusive prefix of the ties at the threshold among the candidates `before(key)` admits.
  auto rank_ties = [&](Threshold& t, auto&& walker, auto&& before) {
    unsigned long long mine = 0;
    walker([&](int64_t, float, uint32_t key) {
      if (before(key) && key == t.key) ++mine;
    });
    SampleScanU64(sh.scan_u64).ExclusiveSum(mine, t.base);
    __syncthreads();
  };

  // Top-k: the k-th largest key; of the tokens at it, as many of the lowest ids as complete k.
  Threshold top_k;
  top_k.on = s.top_k > 0 && int64_t(s.top_k) < vocab;
  if (top_k.on) {
    top_k.key = radix_select(sh, (unsigned long long)s.top_k, top_k.ties, walk,
                             [](int64_t, uint32_t) { return true; }, [](float) { return 1ull; });
    rank_ties(top_k, walk, [](uint32_t) { return true; });
  }
  auto in_top_k = [&](uint32_t key) { return top_k.admit(key); };
  // Every walk that asks in_top_k starts the tie count again.
  auto walk_top_k = [&](auto&& visit) {
    top_k.seen = 0;
    walk(visit);
  };

  // Top-p on the top-k distribution: the smallest set, most likely first, that carries >= top_p of the top-k mass.
  // Its last key K is found by a mass radix select; the tokens at K (equal weights q) complete the mass in id order.
  Threshold top_p;
  top_p.on = s.top_p < 1.0f;
  if (top_p.on) {
    unsigned long long mass = 0;
    walk_top_k([&](int64_t, float w, uint32_t key) {
      if (in_top_k(key)) mass += fixed(w);
    });
    mass = SampleReduceU64(sh.reduce_u64).Sum(mass);
    if (threadIdx.x == 0) sh.value = mass;
    __syncthreads();
    mass = sh.value;
    __syncthreads();
    const unsigned long long need = max(1ull, (unsigned long long)ceil(double(s.top_p) * double(mass)));
    unsigned long long rest = 0;
    top_p.key = radix_select(sh, need, rest, walk_top_k, [&](int64_t, uint32_t key) { return in_top_k(key); }, fixed);
    const unsigned long long q = fixed(__uint_as_float(top_p.key));
    top_p.ties = q > 0 ? (rest + q - 1) / q : ~0ull;
    rank_ties(top_p, walk_top_k, [&](uint32_t key) { return in_top_k(key); });
  }

  // The kept tokens (min-p relative to the top token, whose weight is 1) and the draw. Both thresholds are asked
  // about every token (their tie counts), top-p only about the tokens top-k admits.
  auto kept = [&](float w, uint32_t key) {
    const bool k = in_top_k(key);
    const bool p = k && top_p.admit(key);
    return p && w > 0.0f && w >= s.min_p;
  };
  auto walk_kept = [&](auto&& visit) {
    top_k.seen = 0;
    top_p.seen = 0;
    walk(visit);
  };
  unsigned long long local = 0;
  walk_kept([&](int64_t, float w, uint32_t key) {
    if (kept(w, key)) local += fixed(w);
  });
  unsigned long long before, total;
  SampleScanU64(sh.scan_u64).ExclusiveSum(local, before, total);
  if (total == 0) {  // no finite weight (all logits -inf or NaN): the lowest id, as no draw is possible
    if (threadIdx.x == 0) tokens[blockIdx.x] = 0;
    return;
  }
  unsigned long long target = (unsigned long long)(uniform_at(s.seed, s.position) * double(total));
  if (target >= total) target = total - 1;
  if (before <= target && target < before + local) {  // exactly one thread: the masses are exact integers
    unsigned long long cum = before;
    int32_t token = -1;
    walk_kept([&](int64_t i, float w, uint32_t key) {
      if (!kept(w, key) || token >= 0) return;
      cum += fixed(w);
      if (target < cum) token = int32_t(i);
    });
    tokens[blockIdx.x] = token;
  }
}

__global__ void mark_sampled_tokens_kernel(float* logits, int64_t vocab, const SampleRow* __restrict__ rows,
                                           const int32_t* __restrict__ tokens) {
  pdl_wait();
  pdl_launch_dependents();
  float* row = logits + int64_t(rows[blockIdx.x].row) * vocab;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x)
    if (isnan(row[v])) row[v] = -INFINITY;
  __syncthreads();
  if (threadIdx.x == 0) row[tokens[blockIdx.x]] = NAN;
}

}  // namespace

void sample_rows(const float* logits, int64_t vocab, const SampleRow* rows, int count, int32_t* tokens,
                 cudaStream_t stream) {
  DI_CHECK(vocab > 0 && vocab < (int64_t(1) << 31), "cuda::sample_rows: vocab " + std::to_string(vocab));
  if (count == 0) return;
  DI_CUDA_CHECK(launch(sample_rows_kernel, dim3(unsigned(count)), dim3(kSampleThreads), 0, stream, logits, vocab, rows,
                       tokens));
}

void mark_sampled_tokens(float* logits, int64_t vocab, const SampleRow* rows, const int32_t* tokens, int count,
                         cudaStream_t stream) {
  if (count == 0) return;
  DI_CUDA_CHECK(launch(mark_sampled_tokens_kernel, dim3(unsigned(count)), dim3(256), 0, stream, logits, vocab, rows,
                       tokens));
}

void apply_token_bitmask(float* logits, int64_t vocab, const int32_t* rows, int count, const uint32_t* masks,
                         int64_t mask_words, int64_t mask_vocab, cudaStream_t stream) {
  DI_CHECK(mask_vocab <= mask_words * 32, "cuda::apply_token_bitmask: " + std::to_string(mask_words) +
                                              " words cannot hold a " + std::to_string(mask_vocab) + "-token mask");
  if (count == 0) return;
  DI_CUDA_CHECK(launch(apply_token_bitmask_kernel, dim3(unsigned(count)), dim3(256), 0, stream, logits, vocab, rows,
                       masks, mask_words, mask_vocab));
}

void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream) {
  DI_CHECK(vocab > 0 && vocab < (int64_t(1) << 31), "cuda::argmax_rows: vocab " + std::to_string(vocab));
  if (rows == 0) return;
  DI_CUDA_CHECK(launch(argmax_kernel, dim3(unsigned(rows)), dim3(kArgmaxThreads), 0, stream, logits, vocab, out));
}

}  // namespace deepinfer::cuda
