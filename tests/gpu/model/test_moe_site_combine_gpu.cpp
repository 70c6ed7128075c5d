// The MoE's combine left to the next mHC site (cuda::moe_site_combine, DEEPINFER_MOE_SITE_COMBINE; layers/moe/
// moe_combine.h): the V4 and V4.1 GPU steps with it on give the same logits bit for bit as with it off, eagerly and
// from the CUDA graphs of the step shapes (the site sums the parts with combine_kernel's expression, or combines them
// into y first where its spread / cluster kernel does not take the call). V4 defers to the next attention site
// (hc_expand_site_pre), V4.1 to the next site entry, the head's included (leave_site / take_expand; flush_expand
// combines first where Engram, the bounded-replay moves or the context-parallel gather come between). The fixtures'
// hidden (512) is below both kernels' widths, so here the deferral and those fallbacks run; the kernels' read of the
// parts is checked by GpuHcSiteSpread.CombinePartsMatchCombinedYBitwise (tests/gpu/test_hc_site_spread.cpp),
// GpuHcLaggedSite.CombinePartsMatchCombinedYBitwise (tests/gpu/test_hc_lagged_site.cpp) and the full-width models'
// A/B (run 138 for V4).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_test_model.h"
#include "gpu_test_util.h"
#include "layers/moe/moe_gpu.h"
#include "model/v4/gpu/v4_gpu_model.h"

namespace deepinfer::gputest {
namespace {

using gpu_steps::bitwise_mismatches;
using gpu_steps::Models;
using SiteCombineRestore = SwitchScope<bool, cuda::moe_site_combine, cuda::set_moe_site_combine>;

// One model's scored sequence with the site combine off (eager, then from graphs) and on (eager, graphs).
void expect_site_combine_bitwise(const std::string& name, const std::string& dir,
                                 const gpu_steps::GpuModelFactory& make, uint64_t seed) {
  SiteCombineRestore restore;
  auto feed = [&](bool on, const gpu_steps::ScoredSequence* given, gpu_steps::ScoredSequence* made) {
    cuda::set_moe_site_combine(on);
    Models m = gpu_steps::load_cpu_and_gpu(dir, make);
    if (made) *made = gpu_steps::scored_sequence(m.config, seed);
    const gpu_steps::ScoredSequence& seq = given ? *given : *made;
    std::vector<std::vector<float>> out;
    out.push_back(gpu_steps::feed_scored(*m.gpu, seq, 0, false));
    out.push_back(gpu_steps::feed_scored(*m.gpu, seq, 1, true));
    return out;
  };
  gpu_steps::ScoredSequence seq;
  const auto off = feed(false, nullptr, &seq);
  const auto on = feed(true, &seq, nullptr);
  ASSERT_EQ(on[0].size(), off[0].size());
  report_exact(name + " moe site combine off: graphs vs eager", bitwise_mismatches(off[0], off[1]), off[0].size());
  report_exact(name + " moe site combine on vs off, eager", bitwise_mismatches(on[0], off[0]), off[0].size());
  report_exact(name + " moe site combine on graphs vs off eager", bitwise_mismatches(on[1], off[0]), off[0].size());
}

TEST(GpuMoeSiteCombine, V4StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  expect_site_combine_bitwise("v4_gpu_forward", gpu_test_model_dir(), gpu_steps::make_v4_test_gpu, 95);
}

TEST(GpuMoeSiteCombine, V41StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  expect_site_combine_bitwise("v41_gpu_forward", gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu, 96);
}

}  // namespace
}  // namespace deepinfer::gputest
