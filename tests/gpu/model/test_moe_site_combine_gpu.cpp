// The MoE's combine left to the next mHC site (cuda::moe_site_combine, DEEPINFER_MOE_SITE_COMBINE; layers/moe/
// moe_combine.h): the V4 GPU step with it on gives the same logits bit for bit as with it off, eagerly and from the
// CUDA graphs of the step shapes (the site sums the parts with combine_kernel's expression, or combines them into y
// first where the spread kernel does not take the call). The fixture's hidden (512) is below the spread kernel's
// (whole 1024-column passes), so here the deferral and that fallback run; the spread kernel's read of the parts is
// checked by GpuHcSiteSpread.CombinePartsMatchCombinedYBitwise (tests/gpu/test_hc_site_spread.cpp) and the full-width
// model's A/B (run 138).
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

TEST(GpuMoeSiteCombine, V4StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  SiteCombineRestore restore;
  const std::string name = "v4_gpu_forward";
  auto feed = [&](bool on, const gpu_steps::ScoredSequence* given, gpu_steps::ScoredSequence* made) {
    cuda::set_moe_site_combine(on);
    Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
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

}  // namespace
}  // namespace deepinfer::gputest
