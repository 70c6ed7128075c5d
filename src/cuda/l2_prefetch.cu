// The L2 prefetch kernel and its fork / join branch (cuda/l2_prefetch.h).
#include "cuda/l2_prefetch.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/env_switch.h"
#include "core/error.h"
#include "cuda/check.h"
#include "cuda/l2_policy.h"
#include "cuda/launch.h"

namespace deepinfer::cuda {

namespace {

// DEEPINFER_L2_PREFETCH=1 turns it on (cuda/l2_prefetch.h); read once.
EnvSwitch<bool> g_l2_prefetch{"DEEPINFER_L2_PREFETCH", [](const char* v) { return env_equals(v, "1"); }};

// l2_policy.h weight_l2_evict_first: All unless set (run 116: batch 1 -4.2 % on V4, -4.0 % on V4.1, every stream
// evict_first; run 117: the dense streams alone gain nothing measurable, the expert streams carry it).
EnvSwitch<WeightEvictFirst> g_weight_evict_first{"DEEPINFER_WEIGHT_L2_EVICT_FIRST", [](const char* v) {
  if (!v || env_equals(v, "1") || env_equals(v, "all")) return WeightEvictFirst::All;
  if (env_equals(v, "dense")) return WeightEvictFirst::Dense;
  return WeightEvictFirst::Off;
}};

// 32 KB per bulk request: 40 MB (the largest fork, bench/gpu/NOTES.md) is 1280 requests, 40 per CTA at 32 CTAs, so
// issuing takes ~1-2 us; a request is well under what one SM's TMA unit keeps in flight.
constexpr uint64_t kChunkBytes = 32 << 10;

// Stripes per range: chunks go out in stripe order (the first chunk of each of the 256 equal slices of a range, then
// the second of each, ...), because that is how the consumer reads: the stream GEMM's 256-264 persistent blocks each
// walk their own contiguous slice of the packed weight (wo_b: one 128 KB tile per block) from its start, all at
// once. A GEMV that starts before its prefetch has finished (P3: wo_b after a ~3 us quantize) then finds its next
// bytes arriving in every block's slice, instead of only in the first blocks' while the rest wait on HBM; a
// prefetch that finishes first (P1, P2, P4) is indifferent to the order.
constexpr uint64_t kStripes = 256;

// CTAs issuing requests (one warp each, lane 0 issues): enough TMA units to generate requests at the HBM rate (one
// SM's unit issues on the order of 100-200 GB/s of L2 requests, so ~32 SMs for ~4.8 TB/s), few enough that the
// latency kernels beside it keep their SMs. DEEPINFER_L2_PREFETCH_CTAS (1..132) tunes it; read once.
int prefetch_ctas() {
  static const int ctas = [] {
    const char* env = std::getenv("DEEPINFER_L2_PREFETCH_CTAS");
    const int v = env ? std::atoi(env) : 32;
    return std::clamp(v, 1, 132);
  }();
  return ctas;
}

// The kernel's parameters: per range its aligned interior [begin, begin + bytes) (multiples of 16, for the bulk
// form), its stripes and chunks per stripe (stripes x per_stripe >= its chunks: the last stripe may be short), the
// index of its first request slot in the concatenation of all ranges' slots (first_chunk[count] = the total), and
// its unaligned edges' first bytes (null: none).
struct PrefetchList {
  const char* begin[kL2PrefetchMaxRanges];
  uint64_t bytes[kL2PrefetchMaxRanges];
  uint64_t stripes[kL2PrefetchMaxRanges];
  uint64_t per_stripe[kL2PrefetchMaxRanges];
  uint64_t first_chunk[kL2PrefetchMaxRanges + 1];
  const char* head[kL2PrefetchMaxRanges];
  const char* tail[kL2PrefetchMaxRanges];
  int count;
};

// How the requests are made (cuda/l2_prefetch.h L2PrefetchMode): Bulk, one cp.async.bulk.prefetch.L2 per chunk from
// lane 0; Line / LineLast, one prefetch.global.L2 (::evict_last) per 128-byte line from all 32 lanes (8 per lane per
// chunk): the fallback if the TMA unit turns out to drop or throttle bulk prefetches, and a way to keep the
// prefetched lines ahead of the streamed ones in L2 (evict_last: risky, they then outlive their use until the next
// evict_last lines replace them). DEEPINFER_L2_PREFETCH_MODE, read once; anything but line / line_last is Bulk.
using Mode = L2PrefetchMode;
EnvSwitch<Mode> g_mode{"DEEPINFER_L2_PREFETCH_MODE", [](const char* v) {
  return env_equals(v, "line") ? Mode::Line : env_equals(v, "line_last") ? Mode::LineLast : Mode::Bulk;
}};

// One chunk [p, p + bytes) of an interior (16-byte aligned, bytes a multiple of 16).
template <Mode kMode>
__device__ __forceinline__ void prefetch_chunk(const char* p, unsigned bytes) {
  if constexpr (kMode == Mode::Bulk) {
    if (threadIdx.x == 0) prefetch_l2_bulk(p, bytes);
  } else {
    // Line-aligned steps from p's line; each address is clamped into the chunk (the line holding it is the same), so
    // no address outside the range is used.
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + bytes;
    const uintptr_t first = begin & ~uintptr_t(127);
    for (uintptr_t a = first + threadIdx.x * 128u; a < end; a += 32u * 128u) {
      const char* q = reinterpret_cast<const char*>(max(a, begin));
      if constexpr (kMode == Mode::Line)
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(q));
      else
        asm volatile("prefetch.global.L2::evict_last [%0];\n" ::"l"(q));
    }
  }
}

// Launched without PDL (it has no pdl_wait: it reads only weights, which no step writes, and writes nothing).
template <Mode kMode>
__global__ void __launch_bounds__(32) l2_prefetch_kernel(PrefetchList list) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (int r = 0; r < list.count; ++r) {  // the < 16-byte edges: one 128-byte line each holds them
      if (list.head[r]) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(list.head[r]));
      if (list.tail[r]) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(list.tail[r]));
    }
  }
  // CTA b issues request slots b, b + G, b + 2G, ... of the concatenation: across the grid the requests go out
  // roughly in the ranges' order (the first GEMV's weights arrive first), and within a range in stripe order.
  int r = 0;
  for (uint64_t g = blockIdx.x; g < list.first_chunk[list.count]; g += gridDim.x) {
    while (g >= list.first_chunk[r + 1]) ++r;
    const uint64_t i = g - list.first_chunk[r];
    const uint64_t chunk = (i % list.stripes[r]) * list.per_stripe[r] + i / list.stripes[r];
    const uint64_t offset = chunk * kChunkBytes;
    if (offset < list.bytes[r])  // the short last stripe's missing slots
      prefetch_chunk<kMode>(list.begin[r] + offset, unsigned(min(kChunkBytes, list.bytes[r] - offset)));
  }
}

}  // namespace

bool l2_prefetch_enabled() { return g_l2_prefetch.get(); }

void set_l2_prefetch(bool on) { g_l2_prefetch.set(on); }

WeightEvictFirst weight_l2_evict_first() { return g_weight_evict_first.get(); }
void set_weight_l2_evict_first(WeightEvictFirst mode) { g_weight_evict_first.set(mode); }

L2PrefetchMode l2_prefetch_mode() { return g_mode.get(); }

void set_l2_prefetch_mode(L2PrefetchMode mode) { g_mode.set(mode); }

unsigned l2_prefetch_points() {
  static const unsigned mask = [] {
    const char* env = std::getenv("DEEPINFER_L2_PREFETCH_POINTS");
    if (!env || !*env) return ~0u;
    unsigned m = 0;
    for (const char* c = env; *c; ++c)
      if (*c >= '1' && *c <= '9') m |= 1u << (*c - '1');
    return m;
  }();
  return mask;
}

void l2_prefetch(std::initializer_list<L2Range> ranges, cudaStream_t stream) {
  PrefetchList list{};
  bool edges = false;
  for (const L2Range& range : ranges) {
    if (!range.ptr || range.bytes == 0) continue;
    DI_CHECK(list.count < kL2PrefetchMaxRanges,
             "cuda::l2_prefetch: more than " + std::to_string(kL2PrefetchMaxRanges) + " ranges");
    const int r = list.count++;
    const uintptr_t p = reinterpret_cast<uintptr_t>(range.ptr), end = p + range.bytes;
    const uintptr_t a = (p + 15) & ~uintptr_t(15), e = end & ~uintptr_t(15);
    const uint64_t interior = e > a ? uint64_t(e - a) : 0;
    list.begin[r] = reinterpret_cast<const char*>(a);
    list.bytes[r] = interior;
    const uint64_t chunks = (interior + kChunkBytes - 1) / kChunkBytes;
    list.stripes[r] = std::max<uint64_t>(1, std::min(chunks, kStripes));
    list.per_stripe[r] = (chunks + list.stripes[r] - 1) / list.stripes[r];
    list.first_chunk[r + 1] = list.first_chunk[r] + (chunks ? list.stripes[r] * list.per_stripe[r] : 0);
    // The bytes outside the interior: [p, a) and [e, end) (all of the range when there is no interior).
    if (interior == 0 || p != a) list.head[r] = reinterpret_cast<const char*>(p);
    if (interior == 0 || end != e) list.tail[r] = reinterpret_cast<const char*>(end - 1);
    edges = edges || list.head[r] || list.tail[r];
  }
  const uint64_t chunks = list.first_chunk[list.count];
  if (chunks == 0 && !edges) return;
  LaunchSpec spec;
  spec.grid = dim3(unsigned(std::max<uint64_t>(1, std::min<uint64_t>(chunks, uint64_t(prefetch_ctas())))));
  spec.block = dim3(32);
  spec.stream = stream;
  spec.pdl = false;
  const Mode mode = l2_prefetch_mode();
  DI_CUDA_CHECK(launch(spec,
                       mode == Mode::Line       ? l2_prefetch_kernel<Mode::Line>
                       : mode == Mode::LineLast ? l2_prefetch_kernel<Mode::LineLast>
                                                : l2_prefetch_kernel<Mode::Bulk>,
                       list));
}

L2PrefetchBranch::L2PrefetchBranch() {
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  DI_CUDA_CHECK(cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming));
  DI_CUDA_CHECK(cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming));
}

L2PrefetchBranch::~L2PrefetchBranch() {
  if (stream_) cudaStreamSynchronize(stream_);
  if (fork_event_) cudaEventDestroy(fork_event_);
  if (join_event_) cudaEventDestroy(join_event_);
  if (stream_) cudaStreamDestroy(stream_);
}

void L2PrefetchBranch::fork(cudaStream_t main, std::initializer_list<L2Range> ranges) {
  DI_CUDA_CHECK(cudaEventRecord(fork_event_, main));
  DI_CUDA_CHECK(cudaStreamWaitEvent(stream_, fork_event_, 0));
  l2_prefetch(ranges, stream_);
  pending_ = true;
}

void L2PrefetchBranch::join(cudaStream_t main) {
  if (!pending_) return;
  DI_CUDA_CHECK(cudaEventRecord(join_event_, stream_));
  DI_CUDA_CHECK(cudaStreamWaitEvent(main, join_event_, 0));
  pending_ = false;
}

}  // namespace deepinfer::cuda
