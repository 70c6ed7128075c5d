// The MoE's combine left to the next mHC site (cuda::moe_site_combine, DEEPINFER_MOE_SITE_COMBINE; layers/moe/
// moe_combine.h): the V4 and V4.1 GPU steps with it on give the same logits bit for bit as with it off, eagerly and
// from the CUDA graphs of the step shapes (V4's site sums the parts with combine_kernel's expression, or combines them
// into y first where the spread kernel does not take the call; V4.1's entry sums them). The V4 fixture's hidden (512)
// is below the spread kernel's (whole 1024-column passes), so there the deferral and that fallback run; the kernels'
// reads of the parts are checked at full width by GpuHcSiteSpread.CombinePartsMatchCombinedYBitwise
// (tests/gpu/test_hc_site_spread.cpp) and the full-width models' A/Bs (runs 138, 153).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_test_model.h"
#include "gpu_test_util.h"
#include "layers/moe/moe_gpu.h"
#include "model/v4/gpu/v4_gpu_model.h"
#include "model/v41/gpu/v41_gpu_model.h"

namespace deepinfer::gputest {
namespace {

using gpu_steps::bitwise_mismatches;
using gpu_steps::Models;
using SiteCombineRestore = SwitchScope<bool, cuda::moe_site_combine, cuda::set_moe_site_combine>;

// A model's GPU step with the site combine on against off: logits bitwise, eagerly and from the step graphs.
template <class Load>
void expect_site_combine_bitwise(const std::string& name, Load load) {
  SiteCombineRestore restore;
  auto feed = [&](bool on, const gpu_steps::ScoredSequence* given, gpu_steps::ScoredSequence* made) {
    cuda::set_moe_site_combine(on);
    Models m = load();
    if (made) *made = gpu_steps::scored_sequence(m.config, 95);
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
  expect_site_combine_bitwise("v4_gpu_forward", [] {
    return gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  });
}

// V4.1 (gpu::v41_site_combine on, default off): the FFN's parts go to the next site's entry (hc_lagged_site_pre sums
// them where it reads y), to the head's entry after the last layer, or through flush_expand (moe_combine, then
// hc_expand) before Engram.
TEST(GpuMoeSiteCombine, V41StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  SwitchScope<bool, gpu::v41_site_combine, gpu::set_v41_site_combine> v41(true);
  expect_site_combine_bitwise("v41_gpu_forward", [] {
    return gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  });
}

}  // namespace
}  // namespace deepinfer::gputest
