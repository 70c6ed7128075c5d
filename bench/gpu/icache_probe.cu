// icache_probe: what it costs one warp to run code its SM has never run (bench/gpu/NOTES.md "Instruction fetch of
// the serial tails").
//
// Why: at batch 1 the decode step's slowest latency kernels (the fused MoE routing, the indexer's select, the mHC
// site) end in one block that runs a long stretch of code once per layer; their phase stamps put ~10 us in the
// routing of one row, for a few thousand instructions and one L2 round trip of data. The hypothesis is that the
// instructions themselves are the latency: the last block lands on an SM whose instruction caches never held that
// code, and (in the decode step) the code's lines were evicted from L2 by the weights streamed since.
//
// Method: one warp runs a straight line of kInstr independent FFMAs (8 chains: issue-bound at one instruction per
// cycle once fetched) twice in a rolled loop, stamping clock64 and %globaltimer before, between and after the two
// passes: pass 1 fetches the code, pass 2 runs it from the SM's caches. The warp is placed on a chosen SM (%smid;
// the grid covers every SM, one block there claims the probe), so each measurement can pick an SM that never ran
// this kernel, with the code's lines either in L2 (another SM ran it just before) or not (an L2-sized buffer written
// in between), or the SM of an earlier probe (its caches warm). Sizes 16 / 64 / 128 KB of SASS (16 B an
// instruction), and code that jumps over never-run blocks (JumpOver: 256 / 1024 instructions run out of 16 / 64 KB).
//
// Usage: icache_probe --out results.json
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "latency_bench.h"
#include "cuda/check.h"
#include "cuda/device_util.cuh"

namespace {

using json = nlohmann::json;
using deepinfer::bench::median;

constexpr int kBlockThreads = 64;
constexpr int kBlocksPerSm = 4;

struct ProbeStamps {
  unsigned long long clock[3];  // before pass 1, between, after pass 2
  unsigned long long ns[3];     // %globaltimer at the same points
  unsigned smid;
};

// The probed code: kInstr FFMAs over 8 independent chains in a straight line; asm volatile keeps every one and
// their order.
template <int kInstr>
struct StraightLine {
  static constexpr int kExecuted = kInstr, kCodeInstr = kInstr;
  static constexpr const char* kName = "straight";
  __device__ __forceinline__ static void run(float (&a)[8], float b, float c, bool) {
#pragma unroll
    for (int i = 0; i < kInstr; ++i) asm volatile("fma.rn.f32 %0, %0, %1, %2;" : "+f"(a[i % 8]) : "f"(b), "f"(c));
  }
};

// Code with jumps, as a routine with out-of-line slow paths has: kBlocks times 16 FFMAs run, then a branch over 48
// that never run (`skip` is false at run time; the compiler cannot know, and 48 instructions are too many to
// predicate). Every 1 KB of code the warp runs 256 B and jumps over 768 B.
template <int kBlocks>
struct JumpOver {
  static constexpr int kExecuted = 16 * kBlocks, kCodeInstr = 64 * kBlocks;
  static constexpr const char* kName = "jumps";
  __device__ __forceinline__ static void run(float (&a)[8], float b, float c, bool skip) {
#pragma unroll
    for (int k = 0; k < kBlocks; ++k) {
#pragma unroll
      for (int i = 0; i < 16; ++i) asm volatile("fma.rn.f32 %0, %0, %1, %2;" : "+f"(a[i % 8]) : "f"(b), "f"(c));
      unsigned opaque;  // re-read per block: the compiler can neither hoist the test nor unswitch the loop
      asm volatile("mov.u32 %0, %1;" : "=r"(opaque) : "r"(unsigned(skip)));
      if (opaque) {
#pragma unroll
        for (int i = 0; i < 48; ++i) asm volatile("fma.rn.f32 %0, %0, %1, %2;" : "+f"(a[i % 8]) : "f"(c), "f"(b));
      }
    }
  }
};

template <class Code>
__global__ void __launch_bounds__(kBlockThreads) probe_kernel(unsigned target_sm, unsigned* claimed,
                                                              ProbeStamps* out, float* sink, int skip) {
  __shared__ bool s_go;
  unsigned smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  if (smid != target_sm) return;
  if (threadIdx.x == 0) s_go = atomicCAS(claimed, 0u, 1u) == 0u;
  __syncthreads();
  if (!s_go || threadIdx.x >= 32) return;
  float a[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) a[i] = float(threadIdx.x + i);
  const float b = 0.999f, c = float(blockIdx.x) * 1e-7f;
  unsigned long long clk[3], ns[3];
#pragma unroll 1
  for (int pass = 0; pass < 2; ++pass) {
    clk[pass] = clock64();
    ns[pass] = deepinfer::cuda::dev::globaltimer_ns();
    Code::run(a, b, c, skip != 0);
  }
  clk[2] = clock64();
  ns[2] = deepinfer::cuda::dev::globaltimer_ns();
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s += a[i];
  if (threadIdx.x == 0) {
    for (int i = 0; i < 3; ++i) {
      out->clock[i] = clk[i];
      out->ns[i] = ns[i];
    }
    out->smid = smid;
    *sink = s;  // keeps the chains live
  }
}

struct Probe {
  double pass1_cycles, pass2_cycles, pass1_ns, pass2_ns;
  bool ok;
};

template <class Code>
Probe run_probe(unsigned sm, int sms, unsigned* claimed, ProbeStamps* stamps, float* sink) {
  DI_CUDA_CHECK(cudaMemset(claimed, 0, sizeof(unsigned)));
  DI_CUDA_CHECK(cudaMemset(stamps, 0, sizeof(ProbeStamps)));
  probe_kernel<Code><<<sms * kBlocksPerSm, kBlockThreads>>>(sm, claimed, stamps, sink, 0);
  DI_CUDA_CHECK(cudaGetLastError());
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  ProbeStamps h{};
  DI_CUDA_CHECK(cudaMemcpy(&h, stamps, sizeof h, cudaMemcpyDeviceToHost));
  Probe p{};
  p.ok = h.smid == sm && h.clock[2] > 0;
  p.pass1_cycles = double(h.clock[1] - h.clock[0]);
  p.pass2_cycles = double(h.clock[2] - h.clock[1]);
  p.pass1_ns = double(h.ns[1] - h.ns[0]);
  p.pass2_ns = double(h.ns[2] - h.ns[1]);
  return p;
}

// One code size: per condition, `reps` probes on SMs that (except "sm_warm") never ran this instantiation.
template <class Code>
void measure_size(int sms, unsigned& next_sm, unsigned* claimed, ProbeStamps* stamps, float* sink, void* flush,
                  size_t flush_bytes, json& rows) {
  constexpr int kReps = 5;
  const double kb = Code::kCodeInstr * 16.0 / 1024.0;
  auto fresh_sm = [&] { return next_sm++ % unsigned(sms); };
  // The code's lines into L2: one run on an SM kept out of the measurements.
  run_probe<Code>(fresh_sm(), sms, claimed, stamps, sink);
  struct Cond {
    const char* name;
    const char* what;
    std::vector<Probe> probes;
  } conds[3] = {{"l2_warm", "SM never ran it; code in L2 (another SM ran it just before)", {}},
                {"l2_cold", "SM never ran it; an L2-sized buffer written just before (code from DRAM)", {}},
                {"sm_warm", "the SM of the previous l2_warm probe, code in L2", {}}};
  unsigned last_warm_sm = 0;
  for (int r = 0; r < kReps; ++r) {
    last_warm_sm = fresh_sm();
    conds[0].probes.push_back(run_probe<Code>(last_warm_sm, sms, claimed, stamps, sink));
    DI_CUDA_CHECK(cudaMemset(flush, r + 1, flush_bytes));
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    conds[1].probes.push_back(run_probe<Code>(fresh_sm(), sms, claimed, stamps, sink));
    conds[2].probes.push_back(run_probe<Code>(last_warm_sm, sms, claimed, stamps, sink));
  }
  for (const Cond& c : conds) {
    std::vector<double> p1c, p2c, p1n, p2n;
    int missed = 0;
    for (const Probe& p : c.probes) {
      if (!p.ok) {
        ++missed;
        continue;
      }
      p1c.push_back(p.pass1_cycles);
      p2c.push_back(p.pass2_cycles);
      p1n.push_back(p.pass1_ns);
      p2n.push_back(p.pass2_ns);
    }
    const double extra_cycles = median(p1c) - median(p2c), extra_ns = median(p1n) - median(p2n);
    std::printf("  %-8s %6.0f KB  %-8s  pass 1 %8.0f cycles %7.2f us | pass 2 %8.0f cycles %7.2f us | fetch %6.2f us "
                "= %5.1f cycles per 128 B line run%s\n",
                Code::kName, kb, c.name, median(p1c), median(p1n) * 1e-3, median(p2c), median(p2n) * 1e-3,
                extra_ns * 1e-3, extra_cycles / (Code::kExecuted / 8.0), missed ? " (probes missed their SM)" : "");
    rows.push_back({{"code", Code::kName},
                    {"code_kb", kb},
                    {"instructions_run", Code::kExecuted},
                    {"condition", c.name},
                    {"what", c.what},
                    {"pass1_cycles", median(p1c)},
                    {"pass2_cycles", median(p2c)},
                    {"pass1_us", median(p1n) * 1e-3},
                    {"pass2_us", median(p2n) * 1e-3},
                    {"fetch_us", extra_ns * 1e-3},
                    {"fetch_cycles_per_line_run", extra_cycles / (Code::kExecuted / 8.0)},
                    {"probes", int(c.probes.size()) - missed},
                    {"missed", missed}});
  }
}

}  // namespace

int main(int argc, char** argv) {
  return deepinfer::bench::run_latency_bench(
      argc, argv, "icache_probe",
      "one warp runs a code body (kInstr independent FFMAs in 8 chains, or blocks of them with jumps over never-run "
      "blocks) twice in a rolled loop on a chosen SM; clock64 / %globaltimer before, between, after; medians of 5 "
      "probes per condition",
      [](const cudaDeviceProp& prop) {
        const int sms = prop.multiProcessorCount;
        unsigned* claimed = nullptr;
        ProbeStamps* stamps = nullptr;
        float* sink = nullptr;
        void* flush = nullptr;
        const size_t flush_bytes = size_t(4) * size_t(prop.l2CacheSize);
        DI_CUDA_CHECK(cudaMalloc(&claimed, sizeof(unsigned)));
        DI_CUDA_CHECK(cudaMalloc(&stamps, sizeof(ProbeStamps)));
        DI_CUDA_CHECK(cudaMalloc(&sink, sizeof(float)));
        DI_CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
        json rows = json::array();
        unsigned next_sm = 0;
        std::printf("  one warp runs the code twice (pass 1 fetches the code, pass 2 runs it cached)\n");
        measure_size<StraightLine<1024>>(sms, next_sm, claimed, stamps, sink, flush, flush_bytes, rows);
        measure_size<StraightLine<4096>>(sms, next_sm, claimed, stamps, sink, flush, flush_bytes, rows);
        measure_size<StraightLine<8192>>(sms, next_sm, claimed, stamps, sink, flush, flush_bytes, rows);
        measure_size<JumpOver<16>>(sms, next_sm, claimed, stamps, sink, flush, flush_bytes, rows);
        measure_size<JumpOver<64>>(sms, next_sm, claimed, stamps, sink, flush, flush_bytes, rows);
        cudaFree(flush);
        cudaFree(sink);
        cudaFree(stamps);
        cudaFree(claimed);
        return rows;
      });
}
