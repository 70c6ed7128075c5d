// lane_probe: does a weight stream launched early (PDL) fill its ring while the decode step's latency kernels run, and
// what keeps it from doing so? (bench/gpu/NOTES.md "Session 47: the lane probe".)
//
// Why: at batch 1 a V4 layer spends ~44 us in latency kernels (mHC sites, routing, selects, attention split / merge)
// with HBM idle, and each dense stream consumes its first stage 2.3-3.7 us after its PDL wait (runs 133-134), although
// its producer issues the ring's bulk copies before the wait. Session 47's first runs of this probe (runs 231-234, on
// H100s) found that no stream block's first stage landed before its wait, even with the block resident ~5 us before
// it while the latency kernel ran: the copies landed ~3 us after the wait. This probe separates the candidates: the
// latency kernel's spinning grid barrier (every block's thread 0 polling one L2 word; or a latency kernel that only
// sleeps, with no memory traffic at all), the kind of early request
// (bulk copies into shared memory vs an L2 prefetch), and sharing SMs with the latency kernel (vs "lanes": the
// latency kernel's blocks on SMs of their own, exclusive by shared memory).
//
// The pair chain: P pairs (L, G) in one CUDA graph, every launch with PDL:
//   G (the stream): `sblocks` blocks, one per SM (200 KB of shared memory), a producer thread filling a ring of
//     6 x 32 KB stages (four 8 KB bulk copies each, evict_first) with this pair's 16 MB of weights (fresh each pair),
//     before its wait or after it (GPrefetch); four consumer warps load the 8 KB activation after the wait and fold
//     every stage with it; each consumer thread writes one float. Triggers its dependents at entry (the dense
//     stream's entry_trigger) unless `late`.
//   L (the latency kernel): `lblocks` blocks of 128 threads, triggers its dependents at entry, waits, then `rounds`
//     rounds: each block reads its share of G's outputs through L2 and, unless kNoBarrier, arrives on a counter and
//     spins until every block has (LSync; kSleepOnly: the rounds only sleep); then writes the next activation. With
//     `excl` (120 KB of shared memory beside G's 200 KB: over an SM's 228 KB) no G block shares an SM with an L
//     block ("lanes").
//   The flag form ("flags ..."): L on one stream and G on a second one of the same graph, launched plainly (no PDL
//     edge between them); G's consumers wait for L_p's published activation and L_p for G_{p-1}'s finished blocks on
//     words in global memory (acquire polls with a 100 ns sleep). G_{p+1}'s blocks start when G_p's leave and fill
//     their rings while L_{p+1} runs, with no griddepcontrol.wait anywhere: if PDL is what holds the early copies
//     back, here they land before the flag. Lanes only (every waiting block must be resident).
// Printed per configuration: us per pair, G's bytes / us per pair against a full-grid read of the same buffer in the
// same run, and the last pair's stamps (medians over blocks, us): G wait -> activation loaded, activation -> first
// stage ready, G's first wait -> last end, L wait -> end, G's entry before L's end, G entry -> first / last stage
// landed (producer's view, before its wait), G wait -> last stage landed, and the fraction of G's blocks whose first
// stage landed before their wait (ld<w).
//
// Usage: lane_probe [--only SUBSTRING] --out results.json
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/launch.h"
#include "cuda/mbarrier.cuh"
#include "grid_read.cuh"
#include "latency_bench.h"

namespace {

using json = nlohmann::json;
using namespace deepinfer::cuda;
using namespace deepinfer::cuda::dev;

constexpr int kPiece = 8192, kPieces = 4, kStage = kPiece * kPieces;  // the MXFP4 stream's stage
constexpr int kActFloats = 2048;                                      // 8 KB: V4's hidden in bf16
constexpr int kConsumerWarps = 4, kStreamThreads = 32 * (kConsumerWarps + 1);
constexpr int kLatencyThreads = 128;
// Stamps a block (globaltimer ns): G entry, wait returned, activation loaded, first stage ready, end; L entry, wait
// returned, end.
constexpr int kGStamps = 7, kLStamps = 3;  // G's 6th and 7th: its producer saw the first / last stage land

// One try of an mbarrier phase (true once phase `parity` has completed).
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// What a stream's producer issues before its PDL wait.
enum GPrefetch : int {
  kRingBeforeWait = 0,  // the ring's bulk copies into shared memory (the engine's streams)
  kL2BeforeWait = 1,    // cp.async.bulk.prefetch.L2 of the block's bytes; the ring's copies after the wait
  kNothingBeforeWait = 2,
};
// How the latency kernel's blocks wait for each other each round.
enum LSync : int {
  kSpinTight = 0,   // thread 0 polls the arrival count with acquire loads (the site / routing / select form)
  kSpinSleep = 1,   // the same polls with __nanosleep(200) between them
  kNoBarrier = 2,   // no grid barrier: each round is two dependent L2 loads per thread, no polling
  kSleepOnly = 3,   // no memory traffic at all: each round sleeps ~1.4 us (globaltimer), the cleanest test of PDL
};

// The flag form (a Handoff with flags): L and G on two streams of the graph, launched plainly (no PDL edge between
// them), each waiting for its input on a word in global memory. flags[0]: L launches finished (L_p's last block
// stores p + 1); flags[1]: G blocks finished (each adds 1 after its outputs). Polled by one thread with acquire loads
// and a short sleep between them.
struct Handoff {
  unsigned* flags = nullptr;  // null: the PDL form
  int pair = 0;
};
__device__ __forceinline__ void wait_flag_at_least(const unsigned* word, unsigned expected) {
  unsigned v;
  while (true) {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(word) : "memory");
    if (v >= expected) return;
    __nanosleep(100);
  }
}

struct StreamArgs {
  const uint8_t* w;   // this pair's weights
  int64_t bytes;      // a multiple of kStage x sblocks
  int stages;
  const float* act;   // [kActFloats], written by the previous L
  float* out;         // [sblocks x 128]
  unsigned long long* stamps;  // [sblocks x kGStamps] (ns)
  bool trigger_late;  // dependents triggered after the last stage, not at entry
  int prefetch;       // GPrefetch
  Handoff handoff;
};

// The stream: stage q of block b is bytes [(b * per_block + q) * kStage, +kStage).
__global__ void __launch_bounds__(kStreamThreads, 1) stream_kernel(const StreamArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  const unsigned long long t_entry = globaltimer_ns();
  // At entry (the dense stream's entry_trigger): the next L may take its SMs now (it waits for this grid before
  // reading); trigger_late: after the last stage, so that at most two kernels of the chain are in flight.
  if (!a.trigger_late) pdl_launch_dependents();
  const uint32_t base = uint32_t(__cvta_generic_to_shared(smem));
  const uint32_t bars = base + uint32_t(a.stages * kStage);  // full[s], then empty[s]
  float* act_s = reinterpret_cast<float*>(smem + a.stages * kStage + 16 * a.stages);
  if (threadIdx.x == 0) {
    for (int s = 0; s < a.stages; ++s) {
      mbar_init(bars + 8 * s, 1);
      mbar_init(bars + 8 * (a.stages + s), kConsumerWarps);
    }
    mbar_fence_init();
  }
  __syncthreads();
  const int64_t per_block = a.bytes / kStage / gridDim.x;
  const uint8_t* w = a.w + int64_t(blockIdx.x) * per_block * kStage;
  const int warp = threadIdx.x / 32;
  if (warp == kConsumerWarps) {  // the producer: weights need no wait (launch.h's contract)
    const bool lead = threadIdx.x % 32 == 0;
    auto issue_ring = [&] {
      for (int64_t q = 0; q < per_block; ++q) {
        const int s = int(q % a.stages);
        mbar_wait(bars + 8 * (a.stages + s), uint32_t(((q / a.stages) & 1) ^ 1));
        mbar_arrive_expect_tx(bars + 8 * s, uint32_t(kStage));
        for (int p = 0; p < kPieces; ++p)
          bulk_g2s_evict_first(base + uint32_t(s * kStage + p * kPiece), w + q * kStage + p * kPiece, kPiece,
                               bars + 8 * s);
      }
    };
    if (lead && a.prefetch == kRingBeforeWait) issue_ring();
    if (lead && a.prefetch == kL2BeforeWait)
      for (int64_t q = 0; q < per_block; ++q) prefetch_l2_bulk(w + q * kStage, kStage);
    // When the first and the last stage land, seen by the producer before its own wait (polled for at most 30 us;
    // 0: not landed by then). The question: does a bulk copy issued before griddepcontrol.wait land before it?
    unsigned long long t_land0 = 0, t_land_all = 0;
    if (lead && a.prefetch == kRingBeforeWait && per_block > 0 && per_block <= a.stages) {
      const unsigned long long deadline = globaltimer_ns() + 30000;
      while (!mbar_try_wait(bars, 0) && globaltimer_ns() < deadline) {
      }
      if (mbar_try_wait(bars, 0)) t_land0 = globaltimer_ns();
      while (t_land0 && !mbar_try_wait(bars + 8 * int(per_block - 1), 0) && globaltimer_ns() < deadline) {
      }
      if (t_land0 && mbar_try_wait(bars + 8 * int(per_block - 1), 0)) t_land_all = globaltimer_ns();
    }
    if (!a.handoff.flags) pdl_wait();  // every thread waits (launch.h); the flag form's producer needs no input
    if (lead && a.prefetch != kRingBeforeWait) issue_ring();
    if (lead) {
      a.stamps[blockIdx.x * kGStamps + 5] = t_land0;
      a.stamps[blockIdx.x * kGStamps + 6] = t_land_all;
    }
    if (a.trigger_late) pdl_launch_dependents();
    return;
  }
  const int tid = threadIdx.x;  // 0..127
  if (a.handoff.flags) {  // the flag form: L_p has stored its activation
    if (tid == 0) wait_flag_at_least(a.handoff.flags, unsigned(a.handoff.pair + 1));
    asm volatile("bar.sync 1, %0;\n" ::"n"(32 * kConsumerWarps) : "memory");
  } else {
    pdl_wait();
  }
  const unsigned long long t_wait = globaltimer_ns();
  // The activation: 16 floats a thread, all loads in flight together (as the streams' prologues issue them).
  float4 v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = __ldcg(reinterpret_cast<const float4*>(a.act) + tid * 4 + i);
#pragma unroll
  for (int i = 0; i < 4; ++i) reinterpret_cast<float4*>(act_s)[tid * 4 + i] = v[i];
  asm volatile("bar.sync 1, %0;\n" ::"n"(32 * kConsumerWarps) : "memory");
  const unsigned long long t_act = globaltimer_ns();
  float acc = 0.0f;
  unsigned long long t_first = 0;
  for (int64_t q = 0; q < per_block; ++q) {
    const int s = int(q % a.stages);
    mbar_wait(bars + 8 * s, uint32_t((q / a.stages) & 1));
    if (q == 0) t_first = globaltimer_ns();
    const uint4* st = reinterpret_cast<const uint4*>(smem + s * kStage);
#pragma unroll 4
    for (int i = tid; i < kStage / 16; i += 32 * kConsumerWarps) {
      const uint4 x = st[i];
      const float* av = act_s + (i * 4) % kActFloats;
      acc += float(x.x & 0xffu) * av[0] + float(x.y & 0xffu) * av[1] + float(x.z & 0xffu) * av[2] +
             float(x.w & 0xffu) * av[3];
    }
    warp_release_stage(bars + 8 * (a.stages + s));
  }
  a.out[blockIdx.x * 128 + tid] = acc;
  if (a.handoff.flags) {  // this block's outputs, then its count (release)
    asm volatile("bar.sync 1, %0;\n" ::"n"(32 * kConsumerWarps) : "memory");
    if (tid == 0) {
      __threadfence();
      atomicAdd(a.handoff.flags + 1, 1u);
    }
  }
  if (a.trigger_late) pdl_launch_dependents();
  if (tid == 0) {
    unsigned long long* st = a.stamps + blockIdx.x * kGStamps;
    st[0] = t_entry, st[1] = t_wait, st[2] = t_act, st[3] = t_first, st[4] = globaltimer_ns();
  }
}

struct LatencyArgs {
  const float* in;        // G's outputs
  int in_floats;
  float* act;             // [kActFloats]
  unsigned* counter;      // [2]: arrivals, exits (zero between launches)
  int rounds;
  unsigned long long* stamps;  // [lblocks x kLStamps] (ns)
  int sync;                    // LSync
  Handoff handoff;
  int stream_blocks;           // the flag form: G's grid (L_p waits for stream_blocks x p finished G blocks)
};

// The latency kernel: `rounds` dependent grid rounds; every block must be resident (grid <= free SMs, checked by
// the host's choice of sizes: at most 32 blocks).
__global__ void __launch_bounds__(kLatencyThreads) latency_kernel(const LatencyArgs a) {
  const unsigned long long t_entry = globaltimer_ns();
  pdl_launch_dependents();  // at entry: the next stream's blocks may start filling their rings
  if (a.handoff.flags) {  // the flag form: G_{p-1} has stored its outputs
    if (threadIdx.x == 0) wait_flag_at_least(a.handoff.flags + 1, unsigned(a.stream_blocks * a.handoff.pair));
    __syncthreads();
  } else {
    pdl_wait();
  }
  const unsigned long long t_wait = globaltimer_ns();
  __shared__ float red[kLatencyThreads / 32];
  __shared__ float total;
  const int tid = threadIdx.x;
  float carry = 0.0f;
  for (int r = 0; r < a.rounds; ++r) {
    if (a.sync == kSleepOnly) {
      const unsigned long long until = globaltimer_ns() + 1400;
      while (globaltimer_ns() < until) __nanosleep(100);
      continue;
    }
    // A share of the predecessor's outputs, offset by what the previous round learned (a dependent load).
    const int i = (int(blockIdx.x) * kLatencyThreads + tid + r * 977 + int(__float_as_uint(carry) & 1u)) % a.in_floats;
    float x = __ldcg(a.in + i) + carry * 1e-30f;
    if (a.sync == kNoBarrier) {
      const int j = (i + 389 + int(__float_as_uint(x) & 1u)) % a.in_floats;  // a second load, after the first
      carry = x + __ldcg(a.in + j) * 1e-30f;
      continue;
    }
    x = warp_sum(x);
    if (tid % 32 == 0) red[tid / 32] = x;
    __syncthreads();
    if (tid == 0) {
      float s = 0.0f;
      for (int w = 0; w < kLatencyThreads / 32; ++w) s += red[w];
      total = s;
      __threadfence();
      atomicAdd(a.counter, 1u);
      // At least (not exactly) this round's count: a fast block may already have arrived for the next round
      // (session 47's first form compared for equality and hung when one did).
      const unsigned expected = gridDim.x * unsigned(r + 1);
      unsigned v;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(a.counter) : "memory");
        if (a.sync == kSpinSleep && v < expected) __nanosleep(200);
      } while (v < expected);
    }
    __syncthreads();
    carry = total;
  }
  for (int i = int(blockIdx.x) * kLatencyThreads + tid; i < kActFloats; i += int(gridDim.x) * kLatencyThreads)
    a.act[i] = 1.0f + carry * 1e-30f;
  __syncthreads();  // the block's activation stores before its exit count (the flag form publishes them)
  if (tid == 0) {
    // Every block has passed the last round; the last to leave zeroes both words for the next launch and, in the
    // flag form, publishes the activation.
    __threadfence();
    if (atomicAdd(a.counter + 1, 1u) == gridDim.x - 1) {
      a.counter[0] = 0u;
      a.counter[1] = 0u;
      if (a.handoff.flags) {
        __threadfence();
        asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(a.handoff.flags), "r"(unsigned(a.handoff.pair + 1))
                     : "memory");
      }
    }
    unsigned long long* st = a.stamps + blockIdx.x * kLStamps;
    st[0] = t_entry, st[1] = t_wait, st[2] = globaltimer_ns();
  }
}

struct Config {
  std::string name;
  int sblocks;   // stream blocks (0: all SMs)
  int lblocks;   // latency blocks (0: no latency kernel: G after G)
  int excl_kb;   // L's shared memory (KB): > 228 - G's keeps G's blocks off L's SMs
  bool l_only = false;
  bool trigger_late = false;  // G's trigger after its last stage
  int rounds = 3;             // L's grid rounds (~1.4 us each)
  int sync = kSpinTight;      // LSync
  int prefetch = kRingBeforeWait;  // GPrefetch
  bool flags = false;         // the flag form (two streams, no PDL between L and G); lanes only (deadlock rule)
};

double median_of(std::vector<double> v) { return deepinfer::bench::median(std::move(v)); }

std::string only;  // --only SUBSTRING: the configurations whose name contains it

json run(const cudaDeviceProp& prop) {
  const int sms = prop.multiProcessorCount;
  const int pairs = 16, stages = 6;
  const int64_t mb = 16;
  const int64_t pair_bytes = mb << 20;
  // Pairs' weights apart (pairs x 16 MB = 256 MB, five times L2), a multiple of every grid's stage count.
  uint8_t* w = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&w, size_t(pair_bytes) * pairs));
  DI_CUDA_CHECK(cudaMemset(w, 1, size_t(pair_bytes) * pairs));
  float *act = nullptr, *out = nullptr;
  unsigned* counter = nullptr;
  unsigned long long *gst = nullptr, *lst = nullptr;
  uint32_t* sink = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&act, kActFloats * sizeof(float)));
  DI_CUDA_CHECK(cudaMalloc(&out, size_t(sms) * 128 * sizeof(float)));
  DI_CUDA_CHECK(cudaMalloc(&counter, 2 * sizeof(unsigned)));
  DI_CUDA_CHECK(cudaMalloc(&gst, size_t(sms) * kGStamps * sizeof(unsigned long long)));
  DI_CUDA_CHECK(cudaMalloc(&lst, size_t(sms) * kLStamps * sizeof(unsigned long long)));
  DI_CUDA_CHECK(cudaMalloc(&sink, size_t(sms) * 8 * sizeof(uint32_t)));
  DI_CUDA_CHECK(cudaMemset(act, 0, kActFloats * sizeof(float)));
  DI_CUDA_CHECK(cudaMemset(out, 0, size_t(sms) * 128 * sizeof(float)));
  DI_CUDA_CHECK(cudaMemset(counter, 0, 2 * sizeof(unsigned)));
  const int stream_smem = stages * kStage + 16 * stages + kActFloats * 4;
  DI_CUDA_CHECK(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, stream_smem));
  DI_CUDA_CHECK(cudaFuncSetAttribute(latency_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10));
  cudaStream_t stream, side;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  DI_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  DI_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  unsigned* flags = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&flags, 2 * sizeof(unsigned)));

  // The copy rate's reference: a full-grid read of the same bytes.
  const size_t n16 = size_t(pair_bytes) * pairs / 16;
  const double read_us = deepinfer::bench::graph_us_per_call(stream, 1, 10, 5, [&] {
    deepinfer::bench::grid_read_kernel<true>
        <<<sms * 4, 512, 0, stream>>>(reinterpret_cast<const uint4*>(w), n16, sink);
  });
  const double copy_gbs = double(pair_bytes) * pairs / (read_us * 1e3);
  std::printf("copy reference: %.1f us for %lld MB, %.0f GB/s; stream smem %d KB, %d stages of %d KB\n", read_us,
              (long long)(pair_bytes * pairs >> 20), copy_gbs, stream_smem >> 10, stages, kStage >> 10);

  // Positional fields: name, stream blocks (0: all SMs), latency blocks (0: none), latency shared KB, L only, late
  // trigger, rounds, LSync, GPrefetch, flag form.
  const int all = 0, lanes = sms - 16;
  const std::vector<Config> configs = {
      {"G alone", all, 0, 0},
      {"G alone, L2 prefetch", all, 0, 0, false, false, 3, kSpinTight, kL2BeforeWait},
      {"G alone, nothing before wait", all, 0, 0, false, false, 3, kSpinTight, kNothingBeforeWait},
      {"G alone, SMs-16", lanes, 0, 0},
      {"L alone, spin", all, 16, 0, true},
      {"L alone, spin+sleep", all, 16, 0, true, false, 3, kSpinSleep},
      {"L alone, no barrier", all, 16, 0, true, false, 3, kNoBarrier},
      {"L alone, spin, 64 blocks", all, 64, 0, true},
      {"shared SMs: spin", all, 64, 0},
      {"shared SMs: spin+sleep", all, 64, 0, false, false, 3, kSpinSleep},
      {"shared SMs: no barrier", all, 64, 0, false, false, 3, kNoBarrier},
      {"shared SMs: sleep only", all, 64, 0, false, false, 3, kSleepOnly},
      {"L alone, sleep only", all, 16, 0, true, false, 3, kSleepOnly},
      {"shared SMs: spin, L2 prefetch", all, 64, 0, false, false, 3, kSpinTight, kL2BeforeWait},
      {"shared SMs: no barrier, L2 pref", all, 64, 0, false, false, 3, kNoBarrier, kL2BeforeWait},
      {"shared SMs: spin, nothing early", all, 64, 0, false, false, 3, kSpinTight, kNothingBeforeWait},
      {"lanes: spin", lanes, 16, 120},
      {"lanes: spin+sleep", lanes, 16, 120, false, false, 3, kSpinSleep},
      {"lanes: no barrier", lanes, 16, 120, false, false, 3, kNoBarrier},
      {"lanes: sleep only", lanes, 16, 120, false, false, 3, kSleepOnly},
      {"lanes: spin, L2 prefetch", lanes, 16, 120, false, false, 3, kSpinTight, kL2BeforeWait},
      {"lanes: no barrier, L2 prefetch", lanes, 16, 120, false, false, 3, kNoBarrier, kL2BeforeWait},
      {"lanes: spin, late trigger", lanes, 16, 120, false, true},
      {"lanes: spin, 12 rounds", lanes, 16, 120, false, false, 12},
      {"flags lanes: spin", lanes, 16, 120, false, false, 3, kSpinTight, kRingBeforeWait, true},
      {"flags lanes: spin+sleep", lanes, 16, 120, false, false, 3, kSpinSleep, kRingBeforeWait, true},
      {"flags lanes: no barrier", lanes, 16, 120, false, false, 3, kNoBarrier, kRingBeforeWait, true},
      {"flags lanes: sleep only", lanes, 16, 120, false, false, 3, kSleepOnly, kRingBeforeWait, true},
      {"flags lanes: spin, 12 rounds", lanes, 16, 120, false, false, 12, kSpinTight, kRingBeforeWait, true},
      {"shared SMs: spin, 12 rounds", all, 64, 0, false, false, 12},
      {"L alone, spin, 12 rounds", all, 16, 0, true, false, 12},
  };
  json rows = json::array();
  std::printf("%-34s %8s %6s %7s %8s %8s %8s %8s %8s %8s %8s %8s %5s\n", "config", "us/pair", "GB/s", "copy",
              "wait>act", "act>stg", "wait>end", "L w>end", "G in L", "ent>ld0", "ent>ldN", "wait>ldN", "ld<w");
  for (const Config& c : configs) {
    if (!only.empty() && c.name.find(only) == std::string::npos) continue;
    const int sb = c.sblocks ? c.sblocks : sms;
    const int64_t g_bytes = pair_bytes / (int64_t(kStage) * sb) * int64_t(kStage) * sb;  // whole stages a block
    if (c.lblocks > 32 && c.excl_kb) throw std::runtime_error("an exclusive latency grid must stay small");
    // The flag form waits inside resident blocks, so every G block and every L block must fit at once: G's grid
    // beside L's exclusive blocks (no G block can take an L block's SM).
    if (c.flags && (!c.lblocks || !c.excl_kb || sb + c.lblocks > sms))
      throw std::runtime_error("the flag form needs lanes: exclusive L blocks beside a smaller G grid");
    const auto enqueue = [&] {
      if (c.flags) {  // flags zeroed, then L on `stream` and G on `side`, joined at the end
        DI_CUDA_CHECK(cudaMemsetAsync(flags, 0, 2 * sizeof(unsigned), stream));
        DI_CUDA_CHECK(cudaEventRecord(fork, stream));
        DI_CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));
      }
      for (int p = 0; p < pairs; ++p) {
        const Handoff h{c.flags ? flags : nullptr, p};
        if (c.lblocks) {
          LatencyArgs la{out, sb * 128, act, counter, c.rounds, lst, c.sync, h, sb};
          LaunchSpec spec{dim3(c.lblocks), dim3(kLatencyThreads), size_t(c.excl_kb) << 10, stream};
          spec.pdl = !c.flags;
          DI_CUDA_CHECK(launch(spec, latency_kernel, la));
        }
        if (!c.l_only) {
          StreamArgs ga{w + int64_t(p) * pair_bytes, g_bytes, stages, act, out, gst, c.trigger_late, c.prefetch, h};
          LaunchSpec spec{dim3(sb), dim3(kStreamThreads), size_t(stream_smem), c.flags ? side : stream};
          spec.pdl = !c.flags;
          DI_CUDA_CHECK(launch(spec, stream_kernel, ga));
        }
      }
      if (c.flags) {
        DI_CUDA_CHECK(cudaEventRecord(join, side));
        DI_CUDA_CHECK(cudaStreamWaitEvent(stream, join, 0));
      }
    };
    const double us = deepinfer::bench::graph_us_per_call(stream, 1, 20, 5, enqueue) / pairs;
    DI_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<unsigned long long> g(size_t(sb) * kGStamps), l(size_t(std::max(c.lblocks, 1)) * kLStamps);
    DI_CUDA_CHECK(cudaMemcpy(g.data(), gst, g.size() * 8, cudaMemcpyDeviceToHost));
    DI_CUDA_CHECK(cudaMemcpy(l.data(), lst, l.size() * 8, cudaMemcpyDeviceToHost));
    // The last pair's stamps: G's are that pair's stream, L's its latency kernel (which ran before it).
    auto col = [](const std::vector<unsigned long long>& v, int n, int k, int blocks) {
      std::vector<double> out;
      for (int b = 0; b < blocks; ++b) out.push_back(double(v[size_t(b) * n + k]));
      return out;
    };
    auto us_between = [](const std::vector<double>& to, const std::vector<double>& from) {
      std::vector<double> d;
      for (size_t i = 0; i < to.size(); ++i) d.push_back((to[i] - from[i]) * 1e-3);
      return median_of(d);
    };
    double wa = 0, we = 0, ls = 0, entry_before_l_end = 0, first_after_act = 0;
    double entry_to_land0 = 0, entry_to_land_all = 0, wait_to_land_all = 0, landed_before = 0;
    if (!c.l_only) {
      const auto g_entry = col(g, kGStamps, 0, sb), g_wait = col(g, kGStamps, 1, sb), g_act = col(g, kGStamps, 2, sb),
                 g_first = col(g, kGStamps, 3, sb), g_end = col(g, kGStamps, 4, sb);
      const auto g_land0 = col(g, kGStamps, 5, sb), g_land_all = col(g, kGStamps, 6, sb);
      for (int b = 0; b < sb; ++b) landed_before += g_land0[b] != 0.0 && g_land0[b] <= g_wait[b];
      landed_before /= sb;
      entry_to_land0 = us_between(g_land0, g_entry);
      entry_to_land_all = us_between(g_land_all, g_entry);
      wait_to_land_all = us_between(g_land_all, g_wait);
      wa = us_between(g_act, g_wait);
      first_after_act = us_between(g_first, g_act);
      we = (*std::max_element(g_end.begin(), g_end.end()) - *std::min_element(g_wait.begin(), g_wait.end())) * 1e-3;
      if (c.lblocks) {
        const auto l_end = col(l, kLStamps, 2, c.lblocks);
        entry_before_l_end = (median_of(l_end) - median_of(g_entry)) * 1e-3;
      }
    }
    if (c.lblocks) ls = us_between(col(l, kLStamps, 2, c.lblocks), col(l, kLStamps, 1, c.lblocks));
    const double gbs = c.l_only ? 0.0 : double(g_bytes) / (us * 1e3);
    std::printf("%-34s %8.2f %6.0f %6.1f%% %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %5.2f\n", c.name.c_str(),
                us, gbs, 100.0 * gbs / copy_gbs, wa, first_after_act, we, ls, entry_before_l_end, entry_to_land0,
                entry_to_land_all, wait_to_land_all, landed_before);
    rows.push_back({{"config", c.name},
                    {"stream_blocks", c.l_only ? 0 : sb},
                    {"latency_blocks", c.lblocks},
                    {"latency_smem_kb", c.excl_kb},
                    {"stream_bytes", c.l_only ? 0 : g_bytes},
                    {"us_per_pair", us},
                    {"stream_gbs", gbs},
                    {"fraction_of_copy", gbs / copy_gbs},
                    {"g_wait_to_act_us_median", wa},
                    {"g_act_to_first_stage_us_median", first_after_act},
                    {"g_first_wait_to_last_end_us", we},
                    {"g_entry_before_l_end_us_median", entry_before_l_end},
                    {"g_entry_to_first_stage_landed_us_median", entry_to_land0},
                    {"g_entry_to_last_stage_landed_us_median", entry_to_land_all},
                    {"g_wait_to_last_stage_landed_us_median", wait_to_land_all},
                    {"g_first_stage_landed_before_wait_fraction", landed_before},
                    {"l_wait_to_end_us_median", ls}});
  }
  rows.push_back({{"copy_reference_gbs", copy_gbs}, {"pairs", pairs}, {"stages", stages}});
  DI_CUDA_CHECK(cudaEventDestroy(fork));
  DI_CUDA_CHECK(cudaEventDestroy(join));
  DI_CUDA_CHECK(cudaStreamDestroy(side));
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
  DI_CUDA_CHECK(cudaFree(flags));
  for (void* p : {static_cast<void*>(w), static_cast<void*>(act), static_cast<void*>(out), static_cast<void*>(counter),
                  static_cast<void*>(gst), static_cast<void*>(lst), static_cast<void*>(sink)})
    DI_CUDA_CHECK(cudaFree(p));
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  return deepinfer::bench::run_latency_bench(
      argc, argv, "lane_probe",
      "P = 16 pairs (latency kernel L, weight stream G) in one CUDA graph, every launch with PDL; us per pair = graph "
      "time / P (median of 5 timings of 20 replays); G's rate = its bytes / us per pair against a full-grid read of "
      "the same 256 MB in the same run; stamps (globaltimer) of the last replay's last pair, medians over blocks",
      run,
      [&](int i) {
        if (std::string(argv[i]) == "--only" && i + 1 < argc) {
          only = argv[i + 1];
          return i + 1;
        }
        return -1;
      },
      "[--only SUBSTRING] ");
}
