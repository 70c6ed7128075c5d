// stream_probe: how fast one H200 reads a weight stream through a bulk-copy ring of one producer thread per block,
// against plain loads (bench/gpu/NOTES.md "Session 21").
//
// Why: the decode weight streams (cuda/stream_gemm.cuh, cuda/stream_fp4_wgmma.cuh) plateau at ~2.5-3 TB/s, 55-65 % of
// the copy kernel's rate, even at batch 8 where a launch streams 340 MB (run 122-123's phase stamps of the MXFP4
// stream: its consumers are busy ~0.51 us per 17 KB stage, about the copy rate's share of one SM, and still wait for
// data 17-27 % of the time). Either the consumer's rhythm leaves HBM idle, or the ring itself (one thread issuing
// cp.async.bulk per block, 11 stages of 4 x 4 KB pieces in flight per SM) cannot pull the copy rate. This probe
// takes the consumer's work away: its consumer warp only waits for each stage and frees it (optionally after a
// fixed spin, to mimic the arithmetic), so the ring's own ceiling shows, next to a grid of plain 16-byte loads.
//
// Pattern (the MXFP4 stream's, kernels.h "Fragment-ordered MXFP4 experts"): the buffer is cut into items of `tiles`
// contiguous tile ranges; stage c of an item is piece c of every tile (tiles bulk copies of piece bytes), blocks take
// contiguous item ranges (one block per SM unless said).
//
// Second probe (session 25): a block's read of a small L2-resident activation while its own producer's weight flood is
// in flight, as LDGs after / with the flood or as one bulk copy issued before it (act_under_flood_kernel).
//
// Third probe (session 40): the same activation fetched by a quiet CTA of a cluster and multicast into the flooding
// CTAs' shared memory (act_relay_kernel).
//
// Usage: stream_probe --out results.json [--act-only]   (--act-only: the activation probes alone, seconds)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda/check.h"
#include "cuda/launch.h"
#include "cuda/mbarrier.cuh"
#include "grid_read.cuh"
#include "latency_bench.h"

namespace {

using json = nlohmann::json;
using namespace deepinfer::cuda::dev;

struct RingArgs {
  const uint8_t* src;
  int64_t items;       // items of the whole stream
  int item_bytes;      // tiles x tile bytes
  int tiles;           // bulk copies per stage
  int piece;           // bytes per copy (a tile's share of one stage)
  int stages;          // ring depth
  int spin;            // consumer cycles per stage (0: free it at once)
  uint32_t* sink;
};

// One producer thread (warp 1, lane 0) fills the ring; consumer warp 0's lane 0 waits for each stage, optionally
// spins, and frees it.
__global__ void __launch_bounds__(64) bulk_ring_kernel(const RingArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int stage_bytes = a.tiles * a.piece;
  const uint32_t base = uint32_t(__cvta_generic_to_shared(smem));
  const uint32_t bars = base + uint32_t(a.stages * stage_bytes);  // full[s] at bars + 8 s, empty[s] after them
  if (threadIdx.x == 0) {
    for (int s = 0; s < a.stages; ++s) {
      mbar_init(bars + 8 * s, 1);
      mbar_init(bars + 8 * (a.stages + s), 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int64_t i0 = a.items * blockIdx.x / gridDim.x, i1 = a.items * (blockIdx.x + 1) / gridDim.x;
  const int per_item = a.item_bytes / stage_bytes, tile_bytes = a.item_bytes / a.tiles;
  const int64_t total = (i1 - i0) * per_item;
  if (threadIdx.x == 32) {  // producer
    for (int64_t q = 0; q < total; ++q) {
      const int s = int(q % a.stages);
      const uint32_t phase = uint32_t((q / a.stages) & 1);
      mbar_wait(bars + 8 * (a.stages + s), phase ^ 1u);
      const uint32_t full = bars + 8 * s;
      mbar_arrive_expect_tx(full, uint32_t(stage_bytes));
      const int64_t item = i0 + q / per_item;
      const int c = int(q % per_item);
      const uint8_t* p = a.src + item * a.item_bytes + int64_t(c) * a.piece;
      for (int t = 0; t < a.tiles; ++t)
        bulk_g2s_evict_first(base + uint32_t(s * stage_bytes + t * a.piece), p + int64_t(t) * tile_bytes,
                             uint32_t(a.piece), full);
    }
  } else if (threadIdx.x == 0) {  // consumer
    uint32_t acc = 0;
    for (int64_t q = 0; q < total; ++q) {
      const int s = int(q % a.stages);
      mbar_wait(bars + 8 * s, uint32_t((q / a.stages) & 1));
      acc ^= *reinterpret_cast<const uint32_t*>(smem + s * stage_bytes);
      if (a.spin > 0) {
        const long long t0 = clock64();
        while (clock64() - t0 < a.spin) {
        }
      }
      mbar_arrive(bars + 8 * (a.stages + s));
    }
    if (acc == 0x12345678u) a.sink[blockIdx.x] = acc;
  }
}

// How long a block's read of a small L2-resident activation (the predecessor's output: x's FP8 row, 4 KB) takes while
// the block's own producer has a weight flood in flight (bench/gpu/NOTES.md "Session 25": a stream launch consumes its
// first stage 2.3-4.5 us after its PDL wait, its activation read queued behind the flood). One block per SM, warp 0 the
// consumer, warp 1's lane 0 the producer; the producer issues `flood` stages of 4 x 8 KB bulk copies (the MXFP4 stage)
// from fresh memory, the consumer never frees them. Modes:
//   0 (ldg_after): the producer issues the flood, then tells the consumer (a shared flag), which then loads the
//     activation with 16-byte LDGs (every lane act_bytes / 512 of them, issued together); latency = flag seen -> last
//     load's value used.
//   1 (ldg_with): the consumer's loads start with the flood (the MXFP4 stream after its pdl_wait): latency = first
//     load issued -> values used.
//   2 (bulk_first): the producer issues the activation as one bulk copy into shared memory first, then the flood; the
//     consumer waits on its mbarrier: latency = copy issued -> barrier complete (both clocks of the same SM).
//   3 (bulk_after): the same copy issued after the flood (the order a producer has after its pdl_wait).
//   4 (quiet_sm): every fourth block (blockIdx % 4 == 3) streams nothing; its consumer waits until the other blocks
//     have issued their floods (a global count), then loads as in mode 0. Is the queue the activation waits in the
//     SM's own (then a quiet SM is fast) or the memory system's (then it is slow too)?
// cycles[block] receives the latency in SM cycles (-1 for the flooding blocks of mode 4).
struct ActArgs {
  const uint8_t* src;  // fresh weights: flood * 32 KB per block
  const uint4* act;    // act_bytes, just written (L2-resident)
  int act_bytes;
  int flood;           // stages of 4 x 8 KB
  int mode;
  long long* cycles;
  uint32_t* sink;
  int* issued;  // mode 4: flooding blocks that have issued their flood (zeroed before the launch)
};

__global__ void __launch_bounds__(64) act_under_flood_kernel(const ActArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int kPiece = 8192, kTiles = 4, kStage = kPiece * kTiles;
  __shared__ volatile int go;
  __shared__ long long t_issue;
  const uint32_t base = uint32_t(__cvta_generic_to_shared(smem));
  const uint32_t act_s = base + uint32_t(a.flood * kStage);
  const uint32_t bars = act_s + uint32_t(a.act_bytes);  // one per flood stage, then the activation's
  const uint32_t act_bar = bars + 8 * uint32_t(a.flood);
  if (threadIdx.x == 0) {
    go = 0;
    for (int s = 0; s <= a.flood; ++s) mbar_init(bars + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const bool quiet = a.mode == 4 && blockIdx.x % 4 == 3;
  const int flood = quiet ? 0 : a.flood;
  if (threadIdx.x == 32) {  // producer
    if (a.mode == 2) {
      t_issue = clock64();
      mbar_arrive_expect_tx(act_bar, uint32_t(a.act_bytes));
      bulk_g2s(act_s, a.act, uint32_t(a.act_bytes), act_bar);
    }
    const uint8_t* w = a.src + int64_t(blockIdx.x) * a.flood * kStage;
    for (int s = 0; s < flood; ++s) {
      mbar_arrive_expect_tx(bars + 8 * s, uint32_t(kStage));
      for (int t = 0; t < kTiles; ++t)
        bulk_g2s_evict_first(base + uint32_t(s * kStage + t * kPiece), w + int64_t(s) * kStage + t * kPiece,
                             uint32_t(kPiece), bars + 8 * s);
    }
    if (a.mode == 3) {
      t_issue = clock64();
      mbar_arrive_expect_tx(act_bar, uint32_t(a.act_bytes));
      bulk_g2s(act_s, a.act, uint32_t(a.act_bytes), act_bar);
    }
    if (a.mode == 4 && !quiet) atomicAdd(a.issued, 1);
    go = 1;
    for (int s = 0; s < flood; ++s) mbar_wait(bars + 8 * s, 0);  // the flood lands before the block exits
  } else if (threadIdx.x < 32) {  // consumer warp
    const int lane = threadIdx.x, per_lane = a.act_bytes / 512;
    long long t0 = 0, t1 = 0;
    uint32_t acc = 0;
    if (a.mode == 2 || a.mode == 3) {
      mbar_wait(act_bar, 0);
      t1 = clock64();
      acc = *reinterpret_cast<const uint32_t*>(smem + a.flood * kStage + 4 * lane);
      t0 = t_issue;  // written before the copy was issued, which completed before the wait returned
    } else {
      if (a.mode == 0 || (a.mode == 4 && !quiet))
        while (go == 0) {
        }
      if (quiet) {  // every flooding block has issued (all blocks are resident: one a SM)
        const int flooders = int(gridDim.x) - int(gridDim.x) / 4;  // blocks 3, 7, .. are quiet
        while (*reinterpret_cast<volatile int*>(a.issued) < flooders) {
        }
      }
      t0 = clock64();
      uint4 v[16];
#pragma unroll
      for (int i = 0; i < 16; ++i)
        if (i < per_lane) v[i] = __ldcg(a.act + i * 32 + lane);
#pragma unroll
      for (int i = 0; i < 16; ++i)
        if (i < per_lane) acc ^= v[i].x ^ v[i].w;
      acc = __shfl_xor_sync(0xFFFFFFFFu, acc, 1);
      t1 = clock64();
    }
    if (lane == 0) a.cycles[blockIdx.x] = a.mode == 4 && !quiet ? -1 : t1 - t0;
    if (acc == 0x12345678u) a.sink[blockIdx.x] = acc;
  }
}

// Third probe (session 40): can a launch's activation reach a flooding SM without waiting behind that SM's flood? The
// SM's request FIFO holds its own copies and loads in order (mode 0 / 3 above), and a quiet SM reads the same L2 hit
// in ~0.4 us (mode 4), so here a quiet CTA of each cluster (rank 0, the relay) fetches it for the others: one bulk copy
// with .multicast::cluster lands the activation in the shared memory of every CTA of the cluster and completes each
// one's barrier. Clusters of `cluster` CTAs, one CTA a SM. Every CTA but the relay issues `flood` stages first (the
// pre-wait flood of a stream launch); then the cluster synchronizes (the stand-in for the PDL wait: from here the
// activation may be read); then the relay issues the multicast, and after it its own flood. cycles[cta] is the
// latency from the cluster barrier to the activation's barrier completing, in the CTA's own clock; a flooding CTA
// compares with mode 0's "ldg after the flood is issued" at the same flood, the relay with mode 2.
__global__ void __launch_bounds__(64) act_relay_kernel(const ActArgs a, int cluster) {
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int kPiece = 8192, kTiles = 4, kStage = kPiece * kTiles;
  const uint32_t base = uint32_t(__cvta_generic_to_shared(smem));
  const uint32_t act_s = base + uint32_t(a.flood * kStage);
  const uint32_t bars = act_s + uint32_t(a.act_bytes);  // one per flood stage, then the activation's
  const uint32_t act_bar = bars + 8 * uint32_t(a.flood);
  const bool relay = cluster_ctarank() == 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s <= a.flood; ++s) mbar_init(bars + 8 * s, 1);
    mbar_fence_init();
    mbar_arrive_expect_tx(act_bar, uint32_t(a.act_bytes));  // before the cluster barrier: the copy may come at once
  }
  // Every CTA's barriers exist before the relay's copy can signal them.
  cluster_sync();
  const uint8_t* w = a.src + int64_t(blockIdx.x) * a.flood * kStage;
  auto issue_flood = [&] {
    for (int s = 0; s < a.flood; ++s) {
      mbar_arrive_expect_tx(bars + 8 * s, uint32_t(kStage));
      for (int t = 0; t < kTiles; ++t)
        bulk_g2s_evict_first(base + uint32_t(s * kStage + t * kPiece), w + int64_t(s) * kStage + t * kPiece,
                             uint32_t(kPiece), bars + 8 * s);
    }
  };
  if (threadIdx.x == 32 && !relay) issue_flood();
  // The stand-in for the PDL wait: every flooding CTA has issued its flood.
  cluster_sync();
  const long long t0 = clock64();
  if (threadIdx.x == 32 && relay) {
    bulk_g2s_multicast(act_s, a.act, uint32_t(a.act_bytes), act_bar, uint16_t((1u << cluster) - 1u));
    issue_flood();
  }
  if (threadIdx.x == 0) {
    mbar_wait(act_bar, 0);
    const long long t1 = clock64();
    a.cycles[blockIdx.x] = t1 - t0;
    const uint32_t v = *reinterpret_cast<const uint32_t*>(smem + a.flood * kStage);
    if (v == 0x12345678u) a.sink[blockIdx.x] = v;
  }
  if (threadIdx.x == 32)
    for (int s = 0; s < a.flood; ++s) mbar_wait(bars + 8 * s, 0);  // the flood lands before the CTA exits
  // No CTA exits while a peer may still write into its shared memory (each waited for its own copy above).
  cluster_sync();
}

// Rewrites the activation (so it is L2-resident and dirty, as the predecessor kernel's output is).
__global__ void touch_act_kernel(uint4* act, int n16, uint32_t salt) {
  for (int i = threadIdx.x; i < n16; i += blockDim.x) act[i] = make_uint4(salt, i, salt ^ i, 7);
}

struct Case {
  std::string name;
  int tiles, piece, stages, blocks_per_sm, spin;
  int64_t mb;  // MB streamed per launch
};

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  bool act_only = false;  // only the activation probes (seconds), not the ring cases
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--out" && i + 1 < argc) out_path = argv[++i];
    if (std::string(argv[i]) == "--act-only") act_only = true;
  }
  if (out_path.empty()) {
    std::fprintf(stderr, "usage: %s --out results.json [--act-only]\n", argv[0]);
    return 2;
  }
  cudaDeviceProp prop;
  DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  const size_t buf_bytes = size_t(2) << 30;  // 2 GiB: each launch starts at a fresh offset, so L2 holds none of it
  uint8_t* buf = nullptr;
  uint32_t* sink = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&buf, buf_bytes));
  DI_CUDA_CHECK(cudaMemset(buf, 1, buf_bytes));
  DI_CUDA_CHECK(cudaMalloc(&sink, 4096 * sizeof(uint32_t)));
  cudaStream_t stream;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  DI_CUDA_CHECK(cudaEventCreate(&e0));
  DI_CUDA_CHECK(cudaEventCreate(&e1));
  // Median us of `reps` timed launches of launch(offset) over rotating offsets of `bytes` each.
  auto time_us = [&](size_t bytes, auto&& launch) {
    const size_t slots = buf_bytes / bytes;
    std::vector<double> t;
    for (int r = 0; r < 12; ++r) {
      const size_t off = (size_t(r) % slots) * bytes;
      DI_CUDA_CHECK(cudaEventRecord(e0, stream));
      launch(off);
      DI_CUDA_CHECK(cudaEventRecord(e1, stream));
      DI_CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      DI_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 2) t.push_back(ms * 1e3);
    }
    return deepinfer::bench::median(t);
  };
  json rows = json::array();
  auto report = [&](const std::string& name, double mb, double us, double ref_gbps) {
    const double gbps = mb * 1e6 / (us * 1e3);
    std::printf("  %-46s %7.1f MB %9.2f us %8.0f GB/s  x%.3f of plain loads\n", name.c_str(), mb, us, gbps,
                ref_gbps > 0 ? gbps / ref_gbps : 1.0);
    rows.push_back({{"case", name}, {"mb", mb}, {"us", us}, {"gbps", gbps},
                    {"ratio_to_plain_loads", ref_gbps > 0 ? gbps / ref_gbps : 1.0}});
    return gbps;
  };
  std::printf("device: %s, %d SMs\n", prop.name, sms);
  double ref = 0;
  for (int64_t mb : {50, 400}) {
    if (act_only) break;
    const size_t bytes = size_t(mb) * 1000000 / 64 * 64;
    const double us = time_us(bytes, [&](size_t off) {
      deepinfer::bench::grid_read_kernel<false>
          <<<unsigned(sms * 4), 512, 0, stream>>>(reinterpret_cast<const uint4*>(buf + off), bytes / 16, sink);
    });
    const double g = report("plain loads (4 blocks x 512 threads per SM)", double(mb), us, ref);
    if (mb == 400) ref = g;
  }
  // The MXFP4 stream's stage: 4 tiles x 4 KB (the 256-byte scale pieces left out), 11 stages, one block per SM;
  // then one knob at a time.
  const std::vector<Case> cases = {
      {"mxfp4 stage 4 x 4 KB, 11 stages (50 MB)", 4, 4096, 11, 1, 0, 50},
      {"mxfp4 stage 4 x 4 KB, 11 stages (400 MB)", 4, 4096, 11, 1, 0, 400},
      {"4 x 4 KB, 11 stages, consumer 1000 cycles", 4, 4096, 11, 1, 1000, 400},
      {"4 x 4 KB, 11 stages, consumer 700 cycles", 4, 4096, 11, 1, 700, 400},
      {"4 x 4 KB, 4 stages", 4, 4096, 4, 1, 0, 400},
      {"4 x 4 KB, 6 stages, 2 blocks per SM", 4, 4096, 6, 2, 0, 400},
      {"1 x 16 KB, 11 stages", 1, 16384, 11, 1, 0, 400},
      {"4 x 8 KB, 6 stages", 4, 8192, 6, 1, 0, 400},
      {"16 x 1 KB, 11 stages", 16, 1024, 11, 1, 0, 400},
      {"4 x 4 KB, 11 stages, 2 blocks per SM (5 each)", 4, 4096, 5, 2, 0, 400},
      // With the consumer's work (~1,000 cycles per 16 KB in the MXFP4 stream, runs 122-123): which layout of the
      // same bytes keeps HBM busy.
      {"1 x 16 KB, 11 stages, consumer 1000", 1, 16384, 11, 1, 1000, 400},
      {"4 x 8 KB, 6 stages, consumer 2000", 4, 8192, 6, 1, 2000, 400},
      {"4 x 4 KB, 5 stages, 2 blocks per SM, consumer 2000", 4, 4096, 5, 2, 2000, 400},
      {"4 x 4 KB, 11 stages, consumer 500", 4, 4096, 11, 1, 500, 400},
      {"8 x 4 KB, 6 stages, consumer 2000", 8, 4096, 6, 1, 2000, 400},
      {"4 x 4 KB, 11 stages, consumer 1000 (50 MB)", 4, 4096, 11, 1, 1000, 50},
      {"4 x 8 KB, 6 stages, consumer 2000 (50 MB)", 4, 8192, 6, 1, 2000, 50},
  };
  for (const Case& c : act_only ? std::vector<Case>{} : cases) {
    const int stage_bytes = c.tiles * c.piece;
    const int item_bytes = stage_bytes * 8;  // 8 stages an item, as V4's w1|w3 (k = 4096)
    const int64_t items = c.mb * 1000000 / item_bytes;
    const size_t bytes = size_t(items) * size_t(item_bytes);
    const size_t smem = size_t(c.stages) * stage_bytes + 16 * size_t(c.stages);
    DI_CUDA_CHECK(cudaFuncSetAttribute(bulk_ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    RingArgs a{nullptr, items, item_bytes, c.tiles, c.piece, c.stages, c.spin, sink};
    const double us = time_us(bytes, [&](size_t off) {
      a.src = buf + off;
      bulk_ring_kernel<<<unsigned(sms * c.blocks_per_sm), 64, smem, stream>>>(a);
    });
    report(c.name, double(bytes) / 1e6, us, ref);
  }
  // The activation under the flood (act_under_flood_kernel): median over blocks and launches, in us at the SM clock.
  json act_rows = json::array(), relay_rows = json::array();
  {
    // 4 KB: an FP8 row of k = 4096 (modes 0-4 and the relay); 16 KB: wo_b's bf16 row of k = 8192 (relay only).
    constexpr int kAct = 4096, kActMax = 16384;
    uint4* act = nullptr;
    long long* cycles = nullptr;
    DI_CUDA_CHECK(cudaMalloc(&act, kActMax));
    DI_CUDA_CHECK(cudaMalloc(&cycles, sizeof(long long) * size_t(sms)));
    int clock_khz = 0;
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    const char* mode_names[] = {"ldg after the flood is issued", "ldg issued with the flood", "bulk copy before the flood",
                                "bulk copy after the flood", "ldg on a quiet SM (3/4 flood)"};
    int* issued = nullptr;
    DI_CUDA_CHECK(cudaMalloc(&issued, sizeof(int)));
    // The last launch's per-block latencies (cycles[0, n)), once it has completed.
    auto read_cycles = [&](int n) {
      std::vector<long long> c(static_cast<size_t>(n));
      DI_CUDA_CHECK(
          cudaMemcpyAsync(c.data(), cycles, sizeof(long long) * size_t(n), cudaMemcpyDeviceToHost, stream));
      DI_CUDA_CHECK(cudaStreamSynchronize(stream));
      return c;
    };
    std::printf("activation (%d B, L2-resident) under a flood of 32 KB stages per SM (us at %.0f MHz):\n", kAct,
                clock_khz / 1e3);
    size_t off = 0;
    for (int mode = 0; mode < 5; ++mode)
      for (int flood : {0, 2, 6}) {
        // At least 120 KB so that every block has an SM of its own (mode 4's quiet blocks spin on the others).
        const size_t smem = std::max<size_t>(size_t(flood) * 32768 + kAct + 8 * size_t(flood + 1), 120 * 1024);
        DI_CUDA_CHECK(
            cudaFuncSetAttribute(act_under_flood_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        std::vector<double> us;
        for (int r = 0; r < 10; ++r) {
          const size_t bytes = size_t(sms) * size_t(flood) * 32768;
          if (off + bytes > buf_bytes) off = 0;
          touch_act_kernel<<<1, 256, 0, stream>>>(act, kAct / 16, uint32_t(r));
          DI_CUDA_CHECK(cudaMemsetAsync(issued, 0, sizeof(int), stream));
          ActArgs a{buf + off, act, kAct, flood, mode, cycles, sink, issued};
          act_under_flood_kernel<<<unsigned(sms), 64, smem, stream>>>(a);
          off += bytes;
          const std::vector<long long> c = read_cycles(sms);
          if (r >= 2)
            for (long long v : c)
              if (v >= 0) us.push_back(double(v) / (clock_khz / 1e3));
        }
        std::sort(us.begin(), us.end());
        const double med = us[us.size() / 2], p90 = us[us.size() * 9 / 10];
        std::printf("  %-34s flood %2d x 32 KB: median %6.2f us, p90 %6.2f us\n", mode_names[mode], flood, med, p90);
        act_rows.push_back({{"mode", mode_names[mode]}, {"flood_stages", flood}, {"median_us", med}, {"p90_us", p90}});
      }
    // The same activation relayed by a quiet cluster peer (act_relay_kernel): median over the flooding CTAs and over
    // the relays, launches 3-10.
    std::printf("activation multicast by a quiet CTA of each cluster to the flooding others (us at %.0f MHz):\n",
                clock_khz / 1e3);
    for (int act_bytes : {kAct, kActMax})
      for (int cluster : {2, 4, 8})
        for (int flood : {0, 2, 6}) {
          const size_t smem = std::max<size_t>(size_t(flood) * 32768 + act_bytes + 8 * size_t(flood + 1), 120 * 1024);
          DI_CUDA_CHECK(cudaFuncSetAttribute(act_relay_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
          const int ctas = sms / cluster * cluster;
          deepinfer::cuda::LaunchSpec spec;  // clusters along x, launched plainly (no predecessor to wait for)
          spec.grid = dim3(unsigned(ctas));
          spec.block = dim3(64);
          spec.smem = smem;
          spec.stream = stream;
          spec.cluster_x = unsigned(cluster);
          spec.pdl = false;
          std::vector<double> peers, relays;
          for (int r = 0; r < 10; ++r) {
            const size_t bytes = size_t(ctas) * size_t(flood) * 32768;
            if (off + bytes > buf_bytes) off = 0;
            touch_act_kernel<<<1, 256, 0, stream>>>(act, act_bytes / 16, uint32_t(r));
            ActArgs a{buf + off, act, act_bytes, flood, 0, cycles, sink, nullptr};  // mode: unused here
            DI_CUDA_CHECK(deepinfer::cuda::launch(spec, act_relay_kernel, a, cluster));
            off += bytes;
            const std::vector<long long> c = read_cycles(ctas);
            if (r >= 2)
              for (int i = 0; i < ctas; ++i)
                (i % cluster == 0 ? relays : peers).push_back(double(c[i]) / (clock_khz / 1e3));
          }
          std::sort(peers.begin(), peers.end());
          std::sort(relays.begin(), relays.end());
          const double med = peers[peers.size() / 2], p90 = peers[peers.size() * 9 / 10],
                       relay_med = relays[relays.size() / 2];
          std::printf("  %5d B, %2d clusters of %d, flood %d x 32 KB: flooding CTAs median %6.2f us, p90 %6.2f us; "
                      "relay %6.2f us\n",
                      act_bytes, ctas / cluster, cluster, flood, med, p90, relay_med);
          relay_rows.push_back({{"bytes", act_bytes}, {"cluster", cluster}, {"clusters", ctas / cluster},
                                {"flood_stages", flood}, {"median_us", med}, {"p90_us", p90},
                                {"relay_median_us", relay_med}});
        }
    DI_CUDA_CHECK(cudaFree(act));
    DI_CUDA_CHECK(cudaFree(cycles));
    DI_CUDA_CHECK(cudaFree(issued));
  }
  DI_CUDA_CHECK(cudaGetLastError());
  json out = {{"device", prop.name}, {"rows", rows}, {"activation_under_flood", act_rows},
              {"activation_relayed", relay_rows},
              {"command", std::string("stream_probe --out ") + out_path + (act_only ? " --act-only" : "")}};
  FILE* f = std::fopen(out_path.c_str(), "w");
  if (f) {
    std::fputs(out.dump(2).c_str(), f);
    std::fclose(f);
  }
  return 0;
}
