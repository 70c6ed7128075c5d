// V4.1's fused site entry (DEEPINFER_V41_SITE_ENTRY=fused, V41GpuModel::enter_site / leave_site,
// cuda::hc_lagged_site_pre; bench/gpu/NOTES.md "V4.1 site entry in one launch") against the chain of separate kernels,
// on the V4.1 test checkpoint, bit for bit in the logits, in test_pdl_gpu.cpp's form: a 24-row prefill chunk then 16
// decode steps, chain eager (the reference), fused eager and from graphs (captured fused: no graph of this model exists
// before), slot 0 restarted fused from the graphs, and fused with the site mix on the main stream (the mix's fork moves
// after the entry in the fused form). The checkpoint's Engram layers (1, 2) run the deferred expand on its own before
// Engram, layer 0's entry has none, the head takes the last one. Then SWA bounded replay with a cut (the kept rows'
// moves run the deferred expand first): chain vs fused, eager (cut steps run eagerly).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "gpu_test_model.h"
#include "gpu_test_util.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/model.h"
#include "model/v41/gpu/v41_gpu_model.h"

namespace deepinfer::gputest {
namespace {

using gpu_steps::bitwise_mismatches;
using gpu_steps::feed_chunk_then_decode;
using gpu_steps::Models;
using gpu_steps::random_tokens;
using gpu_steps::test_capacity;

using SiteEntryRestore = SwitchScope<bool, gpu::v41_site_entry_fused, gpu::set_v41_site_entry_fused>;
using MixBranchRestore = SwitchScope<bool, gpu::v41_site_mix_branch, gpu::set_v41_site_mix_branch>;

TEST(GpuV41SiteEntry, StepBitwiseFusedAndChain) {
  DI_SKIP_WITHOUT_GPU();
  SiteEntryRestore entry_restore;
  MixBranchRestore branch_restore;
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), [](const ModelConfig& config, const Checkpoint& ck) {
    return std::make_unique<gpu::V41GpuModel>(config, gpu::upload_v41_gpu_weights(config, ck, false),
                                              test_capacity());
  });
  const std::vector<int32_t> prompt = random_tokens(94, 40, m.config.vocab_size);
  auto feed = [&](bool fused, bool branch, int slot, bool graphs) {
    gpu::set_v41_site_entry_fused(fused);
    gpu::set_v41_site_mix_branch(branch);
    return feed_chunk_then_decode(*m.gpu, prompt, slot, 24, graphs);
  };
  const std::vector<float> chain = feed(false, true, 0, false), fused = feed(true, true, 1, false),
                           fused_graph = feed(true, true, 2, true), again = feed(true, true, 0, true),
                           fused_main = feed(true, false, 3, false);
  report_exact("v41 site entry fused vs chain, eager", bitwise_mismatches(chain, fused), chain.size());
  report_exact("v41 site entry fused graphs vs chain eager", bitwise_mismatches(chain, fused_graph), chain.size());
  report_exact("v41 site entry fused graphs, slot 0 restarted, vs chain eager", bitwise_mismatches(chain, again),
               chain.size());
  report_exact("v41 site entry fused, mix on the main stream, vs chain eager", bitwise_mismatches(chain, fused_main),
               chain.size());
}

TEST(GpuV41SiteEntry, BoundedReplayCutBitwiseFusedAndChain) {
  DI_SKIP_WITHOUT_GPU();
  SiteEntryRestore entry_restore;
  const std::string dir = gpu_test_model_v41_dir();
  const ModelConfig config = load_model_config(dir + "/config.json");
  const int T = 96, decode = 8;
  const std::vector<int32_t> prompt = random_tokens(2026, T, config.vocab_size),
                             next = random_tokens(2027, decode, config.vocab_size);
  StepCapacity cap = test_capacity();
  cap.max_rows = 128;
  PrefillReplayOptions replay;
  replay.mode = PrefillReplayOptions::Mode::DecoderTail;
  replay.keep_tokens = 32;
  // The prompt as one step (cut to its last 32 rows after the candidate source), then one decode row per step.
  std::vector<int32_t> tokens = prompt;
  tokens.insert(tokens.end(), next.begin(), next.end());
  auto run = [&](bool fused) {
    gpu::set_v41_site_entry_fused(fused);
    Checkpoint ck = Checkpoint::open(dir);
    gpu::V41GpuModel g(config, gpu::upload_v41_gpu_weights(config, ck, false), cap, replay);
    return feed_chunk_then_decode(g, tokens, 0, T, false);
  };
  const std::vector<float> chain = run(false), fused = run(true);
  report_exact("v41 site entry fused vs chain, bounded replay cut (NaN rows included)",
               bitwise_mismatches(chain, fused), chain.size());
}

}  // namespace
}  // namespace deepinfer::gputest
