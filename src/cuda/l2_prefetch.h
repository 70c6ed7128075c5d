// L2 prefetch of the next decode GEMVs' weights beside the latency chain (issue 4, bench/gpu/NOTES.md "L2 prefetch of
// the next GEMV's weights"). At batch 1 a V4-Flash layer reads ~213 MB of weights (~50 us at the copy rate) but takes
// ~236 us: HBM idles while the ~30 dependent latency kernels of a layer run (mHC sites, norms, RoPE, routing, the
// attention core), and each GEMV pays its own ramp (ncu: 17.6 us for 22 MB on average, 31 % of the copy rate). The
// H200's L2 holds ~50 MB, so the weights of the NEXT dense GEMV (<= ~40 MB at a time) can be pulled into L2 while
// the latency kernels before it run; the GEMV then streams them from L2.
//
// l2_prefetch: a tiny grid (default 32 CTAs of one warp, DEEPINFER_L2_PREFETCH_CTAS) whose lane 0 issues
// `cp.async.bulk.prefetch.L2.global` over 32 KB chunks of the ranges, in stripe order (l2_prefetch.cu kStripes).
// PTX ISA 8.0, sm_90: a fire-and-forget bulk request to the SM's TMA unit; the kernel exits after issuing, ~40
// instructions per CTA for 40 MB, so it takes a few SM slots for a few microseconds and nothing else. The bulk form needs 16-byte aligned addresses and sizes: the
// aligned interior of a range goes in bulk, its unaligned head and tail (< 16 bytes each, so each inside one 128-byte
// line) by one `prefetch.global.L2` of their first byte, so no address outside a range is ever touched. A prefetch
// is a hint: it reads only weights, writes nothing, and the consumers read the same bytes with their own loads
// afterwards, so results are bitwise the same with it or without it (tests/gpu/model/test_l2_prefetch_gpu.cpp).
// L2PrefetchMode::Line / LineLast: one prefetch.global.L2 (::evict_last) per 128-byte line from all 32 lanes instead
// (fallbacks for the measurement; l2_prefetch.cu).
//
// L2PrefetchBranch: the fork / join around it. fork() records an event on the main stream, the branch's own stream
// waits for it and runs the prefetch, so the prefetch starts once the main stream's work enqueued so far has
// completed and overlaps whatever the main stream runs next; join() makes the main stream wait for the branch (once
// per step, before its end: a captured graph must join every forked stream; the prefetch kernels finish within
// microseconds, so the wait costs nothing). Captured into a CUDA graph, each fork is a parallel branch of one kernel
// node. Its own stream, not the model's side stream: that one carries the layer's branches with their own fork /
// join events (KV row, shared expert), which must not wait for a prefetch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace deepinfer::cuda {

// Process-wide switch: DEEPINFER_L2_PREFETCH=1 turns the step models' prefetch on (read once, default off until
// measured); set_l2_prefetch overrides it. A model reads it at construction (its graphs keep that setting).
bool l2_prefetch_enabled();
void set_l2_prefetch(bool on);
// How the kernel requests the lines: DEEPINFER_L2_PREFETCH_MODE = bulk (default) | line | line_last, read once;
// set_l2_prefetch_mode overrides it (tests). Takes effect at the next launch (a captured graph keeps its kernels).
enum class L2PrefetchMode { Bulk = 0, Line = 1, LineLast = 2 };
L2PrefetchMode l2_prefetch_mode();
void set_l2_prefetch_mode(L2PrefetchMode mode);
// Which of a model's fork points prefetch (for the measurement of each point alone): DEEPINFER_L2_PREFETCH_POINTS,
// a string of point numbers 1-9 ("13": points 1 and 3), read once; default (unset or empty): all. Bit p - 1 of the
// mask is point p.
unsigned l2_prefetch_points();

// A byte range of device memory (any alignment); empty ranges (null or 0 bytes) are skipped.
struct L2Range {
  const void* ptr = nullptr;
  size_t bytes = 0;
};

constexpr int kL2PrefetchMaxRanges = 8;  // per launch (the ranges travel in the kernel's parameters)

// Enqueues the prefetch of `ranges` (at most kL2PrefetchMaxRanges non-empty ones) into L2 on `stream`, earlier
// ranges first. Reads nothing but the ranges; nothing waits for the data to arrive.
void l2_prefetch(std::initializer_list<L2Range> ranges, cudaStream_t stream);

class L2PrefetchBranch {
 public:
  L2PrefetchBranch();
  ~L2PrefetchBranch();
  L2PrefetchBranch(const L2PrefetchBranch&) = delete;
  L2PrefetchBranch& operator=(const L2PrefetchBranch&) = delete;

  // Prefetches `ranges` on the branch once `main`'s work enqueued so far has completed.
  void fork(cudaStream_t main, std::initializer_list<L2Range> ranges);
  // `main` waits for every prefetch forked since the last join; nothing when there was none (so a step without
  // forks captures exactly the graph it would without the branch).
  void join(cudaStream_t main);

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t fork_event_ = nullptr, join_event_ = nullptr;
  bool pending_ = false;
};

}  // namespace deepinfer::cuda
