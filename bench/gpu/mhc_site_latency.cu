// mhc_site_latency: where the ~9.5 us of one batch-1 mHC site go (bench/gpu/NOTES.md "mHC site latency").
//
// Why: at batch-1 decode each layer runs two mHC sites (model-spec §3 "mHC site"), each one launch of
// hc_site_spread_kernel (layers/mhc/mhc.cu; NOTES "mHC site tail spread over the blocks") of ~9.5 us (run 71's graph
// timeline) for 32-40 KB of streams: ncu (session 7) saw 0.8 % issue busy, a latency chain. This measures its steps:
//  (a) the kernel's time per launch: a CUDA graph of kLaunches back-to-back hc_expand_site_pre (or hc_site_pre)
//      calls of one token, PDL on (the model's setting) and off, replayed; medians of kTimings timings. Rows for
//      the spread kernel (variant "spread", the model's: fn before pdl_wait, 16-byte staging, the comb steps in
//      their own warp, the Sinkhorn steps in rows; session 12's finish v2, the only form since session 13, runs
//      78-79) and the one-block tail (variant "single", DEEPINFER_HC_SITE_TAIL=single) for reference.
//  (b) the chain's steps inside the blocks: cuda::hc_site_spread_phases (mhc_site_tail.h) runs the same kernel
//      with step marks (%globaltimer and clock64 of the marking warp: HcSiteMark) eagerly, kCalls times; per call the
//      steps' times on one clock (ns after the first block's entry) and the in-block cycle counts between marks of
//      one SM, then medians over the calls. The hand-offs between blocks (arrival counter; pre from the last block's
//      finish warp to the tail blocks; the tail blocks' sums of squares to each other) are the differences between
//      a publisher's and a poller's %globaltimer marks.
// Inputs: one token of V4-Flash (hidden 4096) and V4.1 (5120) shapes drawn as tests/gpu/mhc_site_inputs.h draws them
// (streams of magnitude e^U(-3, 3), fn ~ N(0, 4 / sqrt(4 hidden)), base ~ N(0, 1), scales in (0.5, 2), norm weight
// ~ N(1, 0.3)), FP8 codes of 128-blocks, 20 Sinkhorn iterations, hc_eps 1e-6, norm_eps 1e-6; everything in L2 after
// the first call.
//
// Usage: mhc_site_latency [--out results.json]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "cuda/check.h"
#include "cuda/kernels.h"
#include "cuda/launch.h"
#include "cuda/step_kernels.h"
#include "layers/mhc/mhc_site_tail.h"
#include "latency_bench.h"

namespace {

using json = nlohmann::json;
using deepinfer::bench::median;
namespace cu = deepinfer::cuda;

constexpr int kHc = 4, kRows = (2 + kHc) * kHc, kIters = 20, kQuantBlock = 128;
constexpr float kHcEps = 1e-6f, kNormEps = 1e-6f;
constexpr int kLaunches = 32, kReplays = 20, kTimings = 7, kCalls = 21;

template <class T>
T* device_copy(const std::vector<T>& h) {
  T* d = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&d, sizeof(T) * std::max<size_t>(h.size(), 1)));
  DI_CUDA_CHECK(cudaMemcpy(d, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice));
  return d;
}

std::vector<uint16_t> bf16_of(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = deepinfer::float_to_bf16(v[i]);
  return out;
}

// One token's site on the device (mhc_site_inputs.h's distribution) and its outputs.
struct Site {
  int64_t hidden;
  std::vector<uint16_t> X0;
  std::vector<float> prev0;
  uint16_t *X = nullptr, *y = nullptr, *w = nullptr, *u = nullptr;
  float *fn = nullptr, *base = nullptr, *scale = nullptr, *mix = nullptr, *us = nullptr;
  uint8_t* uq = nullptr;
  void* ws = nullptr;

  explicit Site(int64_t hidden_) : hidden(hidden_) {
    std::mt19937 rng(77 + unsigned(hidden));
    auto uniform = [&](float a, float b) { return std::uniform_real_distribution<float>(a, b)(rng); };
    auto normals = [&](size_t n, float m, float s) {
      std::normal_distribution<float> d(m, s);
      std::vector<float> v(n);
      for (float& x : v) x = d(rng);
      return v;
    };
    const int64_t width = kHc * hidden;
    const float mag = std::exp(uniform(-3.0f, 3.0f));
    X0 = bf16_of(normals(size_t(width), 0.0f, mag));
    const std::vector<float> fn_h = normals(size_t(kRows * width), 0.0f, 4.0f / std::sqrt(float(width)));
    const std::vector<float> base_h = normals(kRows, 0.0f, 1.0f);
    const std::vector<float> scale_h = {uniform(0.5f, 2.0f), uniform(0.5f, 2.0f), uniform(0.5f, 2.0f)};
    const std::vector<uint16_t> w_h = bf16_of(normals(size_t(hidden), 1.0f, 0.3f));
    const std::vector<uint16_t> y_h = bf16_of(normals(size_t(hidden), 0.0f, 0.5f));
    prev0.resize(kRows);  // a plausible previous mix row: pre / post in (0, 2), positive comb weights
    for (float& v : prev0) v = uniform(0.05f, 1.95f);
    X = device_copy(X0);
    y = device_copy(y_h);
    w = device_copy(w_h);
    fn = device_copy(fn_h);
    base = device_copy(base_h);
    scale = device_copy(scale_h);
    mix = device_copy(prev0);
    DI_CUDA_CHECK(cudaMalloc(&u, size_t(hidden) * 2));
    DI_CUDA_CHECK(cudaMalloc(&uq, size_t(hidden)));
    DI_CUDA_CHECK(cudaMalloc(&us, size_t(hidden / kQuantBlock) * 4));
    const size_t ws_bytes = cu::hc_site_mix_workspace_bytes(1, kHc, hidden);
    DI_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    DI_CUDA_CHECK(cudaMemset(ws, 0, ws_bytes));  // the arrival counter starts at zero (kernels.h)
  }
  ~Site() {
    for (void* p : {(void*)X, (void*)y, (void*)w, (void*)u, (void*)fn, (void*)base, (void*)scale, (void*)mix,
                    (void*)us, (void*)uq, ws})
      cudaFree(p);
  }
  cu::HcSite site() const { return {fn, base, scale}; }
  cu::bf16* Xb() const { return reinterpret_cast<cu::bf16*>(X); }
  // Back to the drawn streams and previous row (the expand form rewrites both every call).
  void reset() {
    DI_CUDA_CHECK(cudaMemcpy(X, X0.data(), X0.size() * 2, cudaMemcpyHostToDevice));
    DI_CUDA_CHECK(cudaMemcpy(mix, prev0.data(), prev0.size() * 4, cudaMemcpyHostToDevice));
  }
  void enqueue(bool expand, cudaStream_t stream) {
    const auto* wb = reinterpret_cast<const cu::bf16*>(w);
    auto* ub = reinterpret_cast<cu::bf16*>(u);
    if (expand)
      cu::hc_expand_site_pre(Xb(), reinterpret_cast<const cu::bf16*>(y), 1, kHc, hidden, site(), kNormEps, kHcEps,
                             kIters, wb, mix, ub, uq, us, kQuantBlock, ws, stream);
    else
      cu::hc_site_pre(Xb(), 1, kHc, hidden, site(), kNormEps, kHcEps, kIters, wb, mix, ub, uq, us, kQuantBlock, ws,
                      stream);
  }
};

// (a) us per launch of a graph of kLaunches site calls.
double graph_us_per_launch(Site& s, bool expand, cudaStream_t stream) {
  s.reset();
  return deepinfer::bench::graph_us_per_call(stream, kLaunches, kReplays, kTimings,
                                             [&] { s.enqueue(expand, stream); });
}

// (b) The steps of one call from its stamps. Timeline: ns after the first block's entry (one clock for all SMs;
// its granularity is printed). Cycles: clock64 differences inside one block (one SM).
struct Steps {
  std::vector<std::pair<std::string, double>> ns, cycles;
};

Steps steps_of(const cu::HcSitePhases& p) {
  using namespace deepinfer::cuda;
  auto ns = [&](int b, int m) { return double(p.ns[size_t(b) * kHcSiteMarks + m]); };
  auto cyc = [&](int b, int m) { return double(p.cycles[size_t(b) * kHcSiteMarks + m]); };
  int last = -1;
  for (int b = 0; b < p.blocks; ++b)
    if (p.ns[size_t(b) * kHcSiteMarks + kMarkStaged] != 0) last = b;
  DI_CHECK(last >= 0, "mhc_site_latency: no block staged the partials");
  double t0 = 1e300;
  for (int b = 0; b < p.blocks; ++b) t0 = std::min(t0, ns(b, kMarkEntry));
  auto max_over = [&](int m, bool tail_only) {
    double v = 0;
    for (int b = 0; b < (tail_only ? p.tail_blocks : p.blocks); ++b) v = std::max(v, ns(b, m) - t0);
    return v;
  };
  auto median_over = [&](const std::function<double(int)>& f, bool tail_only) {
    std::vector<double> v;
    for (int b = 0; b < (tail_only ? p.tail_blocks : p.blocks); ++b) v.push_back(f(b));
    return median(v);
  };
  Steps s;
  // When each step is done, ns after the first entry (the latest block where several do it).
  s.ns.push_back({"entry_last", max_over(kMarkEntry, false)});
  s.ns.push_back({"waited_last", max_over(kMarkWaited, false)});
  s.ns.push_back({"partials_last", max_over(kMarkPartials, false)});
  s.ns.push_back({"arrived_last_block", ns(last, kMarkArrived) - t0});
  s.ns.push_back({"staged", ns(last, kMarkStaged) - t0});
  s.ns.push_back({"pre_published", ns(last, kMarkPre) - t0});
  s.ns.push_back({"comb_stored", ns(last, kMarkComb) - t0});
  s.ns.push_back({"pre_polled_tail_max", max_over(kMarkPrePolled, true)});
  s.ns.push_back({"collapsed_tail_max", max_over(kMarkCollapsed, true)});
  s.ns.push_back({"sums_stored_tail_max", max_over(kMarkSumsStored, true)});
  s.ns.push_back({"sums_polled_tail_max", max_over(kMarkSumsPolled, true)});
  s.ns.push_back({"tail_end_max", max_over(kMarkEnd, true)});
  s.ns.push_back({"kernel_end", std::max(ns(last, kMarkComb) - t0, max_over(kMarkEnd, true))});
  // > 0: the comb warp's (Sinkhorn) branch ends last, < 0: the tail blocks' branch.
  s.ns.push_back({"comb_minus_tail_end", ns(last, kMarkComb) - t0 - max_over(kMarkEnd, true)});
  // The hand-offs (publisher's mark -> poller's mark, ns).
  double partials_max = 0;
  for (int b = 0; b < p.blocks; ++b)
    if (b != last) partials_max = std::max(partials_max, ns(b, kMarkPartials));
  s.ns.push_back({"handoff_arrival", ns(last, kMarkArrived) - std::max(partials_max, ns(last, kMarkPartials))});
  s.ns.push_back({"handoff_pre_median",
                  median_over([&](int b) { return ns(b, kMarkPrePolled) - ns(last, kMarkPre); }, true)});
  double sums_stored = 0;
  for (int b = 0; b < p.tail_blocks; ++b) sums_stored = std::max(sums_stored, ns(b, kMarkSumsStored));
  s.ns.push_back(
      {"handoff_sums_median", median_over([&](int b) { return ns(b, kMarkSumsPolled) - sums_stored; }, true)});
  // In-block cycles: medians over the blocks (every block, or the tail blocks) of the clock64 span between two marks.
  auto span = [&](int from, int to, bool tail_only) {
    return median_over([&](int b) { return cyc(b, to) - cyc(b, from); }, tail_only);
  };
  s.cycles.push_back({"wait_median", span(kMarkEntry, kMarkWaited, false)});
  s.cycles.push_back({"partials_median", span(kMarkWaited, kMarkPartials, false)});
  s.cycles.push_back({"arrive_median", span(kMarkPartials, kMarkArrived, false)});
  s.cycles.push_back({"last_arrive", cyc(last, kMarkArrived) - cyc(last, kMarkPartials)});
  s.cycles.push_back({"last_stage", cyc(last, kMarkStaged) - cyc(last, kMarkArrived)});
  s.cycles.push_back({"finish_sums_pre", cyc(last, kMarkPre) - cyc(last, kMarkStaged)});
  // The comb warp's end - the finish warp's pre (the two run side by side from the staging on, so read
  // staged_to_comb for the comb steps' own time).
  s.cycles.push_back({"finish_sinkhorn", cyc(last, kMarkComb) - cyc(last, kMarkPre)});
  s.cycles.push_back({"staged_to_comb", cyc(last, kMarkComb) - cyc(last, kMarkStaged)});
  s.cycles.push_back({"tail_pre_wait_median", span(kMarkArrived, kMarkPrePolled, true)});
  s.cycles.push_back({"tail_collapse_median", span(kMarkPrePolled, kMarkCollapsed, true)});
  s.cycles.push_back({"tail_squares_median", span(kMarkCollapsed, kMarkSumsStored, true)});
  s.cycles.push_back({"tail_sums_wait_median", span(kMarkSumsStored, kMarkSumsPolled, true)});
  s.cycles.push_back({"tail_norm_quant_median", span(kMarkSumsPolled, kMarkEnd, true)});
  return s;
}

// The smallest positive difference between two %globaltimer stamps of one call: the timer's granularity.
double timer_granularity(const cu::HcSitePhases& p) {
  std::vector<uint64_t> v;
  for (uint64_t t : p.ns)
    if (t) v.push_back(t);
  std::sort(v.begin(), v.end());
  double g = 1e300;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[i - 1]) g = std::min(g, double(v[i] - v[i - 1]));
  return g;
}

json phases(Site& s, bool expand, cudaStream_t stream) {
  std::vector<Steps> calls;
  double granularity = 1e300;
  s.reset();
  for (int c = 0; c < kCalls; ++c) {
    const cu::HcSitePhases p = cu::hc_site_spread_phases(
        s.Xb(), expand ? reinterpret_cast<const cu::bf16*>(s.y) : nullptr, s.hidden, s.site(), kNormEps, kHcEps,
        kIters, reinterpret_cast<const cu::bf16*>(s.w), s.mix, reinterpret_cast<cu::bf16*>(s.u), s.uq, s.us,
        kQuantBlock, s.ws, stream);
    if (c == 0) continue;  // warms L2 and the SMs' code
    calls.push_back(steps_of(p));
    granularity = std::min(granularity, timer_granularity(p));
  }
  json out = {{"globaltimer_granularity_ns", granularity}};
  // Each named step's median over the calls, into out[key] and printed five to a line.
  auto medians = [&](const char* key, auto Steps::*list) {
    for (size_t i = 0; i < (calls[0].*list).size(); ++i) {
      std::vector<double> v;
      for (const Steps& c : calls) v.push_back((c.*list)[i].second);
      const double m = median(v);
      out[key][(calls[0].*list)[i].first] = m;
      std::printf(" %s %.0f%s", (calls[0].*list)[i].first.c_str(), m, i % 5 == 4 ? "\n     " : "");
    }
  };
  std::printf("    timeline (ns after the first entry; globaltimer granularity %.0f ns):\n     ", granularity);
  medians("ns", &Steps::ns);
  std::printf("\n    cycles (clock64 inside one block):\n     ");
  medians("cycles", &Steps::cycles);
  std::printf("\n");
  return out;
}

json measure(const char* model, int64_t hidden, cudaStream_t stream) {
  // Also caches the SM count outside the graph captures below.
  DI_CHECK(cu::hc_site_tail_spread_applies(1, kHc, hidden, kQuantBlock),
           "mhc_site_latency: the spread kernel does not take hidden " + std::to_string(hidden) + " on this device");
  Site s(hidden);
  json rows = json::array();
  for (bool expand : {true, false}) {
    const char* form = expand ? "hc_expand_site_pre" : "hc_site_pre";
    for (const char* variant : {"spread", "single"}) {
      const bool single = !std::strcmp(variant, "single");
      cu::set_hc_site_tail_spread(!single);
      json r = {{"model", model}, {"hidden", hidden}, {"form", form}, {"variant", variant}};
      for (bool pdl : {true, false}) {
        cu::set_pdl(pdl);
        const double us = graph_us_per_launch(s, expand, stream);
        r[pdl ? "graph_us_per_launch_pdl" : "graph_us_per_launch_nopdl"] = us;
      }
      cu::set_pdl(true);
      std::printf("  %-4s %-18s %-6s graph of %d: %.2f us/launch (PDL), %.2f us/launch (no PDL)\n",
                  model, form, variant, kLaunches, double(r["graph_us_per_launch_pdl"]),
                  double(r["graph_us_per_launch_nopdl"]));
      if (!single) r["phases"] = phases(s, expand, stream);
      rows.push_back(r);
    }
  }
  cu::set_hc_site_tail_spread(true);
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  return deepinfer::bench::run_latency_bench(
      argc, argv, "mhc_site_latency",
      "one token's mHC site (hc_site_spread_kernel and the one-block tail): us per launch from CUDA graphs of "
      "back-to-back site calls (PDL on and off), and per-block %globaltimer / clock64 marks of the chain's steps",
      [](const cudaDeviceProp&) {
        std::printf("  one token's mHC site, medians of %d calls / %d timings\n", kCalls - 1, kTimings);
        cudaStream_t stream = nullptr;
        DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        json rows = json::array();
        for (const json& r : measure("v4", 4096, stream)) rows.push_back(r);
        for (const json& r : measure("v41", 5120, stream)) rows.push_back(r);
        DI_CUDA_CHECK(cudaStreamDestroy(stream));
        return rows;
      });
}
