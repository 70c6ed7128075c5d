// V4.1's site entry in one launch (V41GpuModel::enter_site / leave_site, cuda::hc_lagged_site_pre; bench/gpu/NOTES.md
// "V4.1 site entry in one launch"): each sublayer's expand is deferred into the next site's entry (the head takes the
// last one) and runs on its own where something else touches the residual streams first (flush_expand). The chain of
// separate kernels it replaced is gone (session 14, run 86), so the model's reference is the CPU forward; the kernel
// itself is checked bit for bit against the chain's kernels in tests/gpu/test_hc_lagged_site.cpp (GpuHcLaggedSite.*).
// The deferred expand is host state of the step's enqueue, so a CUDA graph holds whatever its capture decided: both
// tests run the steps from graphs against the same steps run eagerly.
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
using gpu_steps::logits_to_host;
using gpu_steps::Models;
using gpu_steps::random_tokens;
using gpu_steps::test_capacity;

// A 32-row prefill chunk, then 32 decode steps (the fixture's window of 16 wraps), from the graphs of the step shapes:
// the logits follow the CPU forward within expect_logits_follow_cpu's bound and equal the eager run's bit for bit. On
// the V4.1 test checkpoint layer 0's attention entry has no expand to take, the Engram layers (1, 2) run the previous
// FFN's expand on its own before Engram, every other entry takes its predecessor's, the head the last FFN's; a
// missing flush, a wrong pairing or a dropped expand is a structural error far outside the bound.
TEST(GpuV41SiteEntry, GraphsFollowTheCpuAndEqualEager) {
  DI_SKIP_WITHOUT_GPU();
  const std::string dir = gpu_test_model_v41_dir();
  Models m = gpu_steps::load_cpu_and_gpu(dir, gpu_steps::make_v41_test_gpu);
  const int64_t V = m.config.vocab_size;
  const std::vector<int32_t> prompt = random_tokens(94, 64, V);
  const std::vector<float> eager = feed_chunk_then_decode(*m.gpu, prompt, 0, 32, false),
                           graphs = feed_chunk_then_decode(*m.gpu, prompt, 1, 32, true);
  report_exact("v41 site entry: graphs vs eager", bitwise_mismatches(eager, graphs), eager.size());
  expect_logits_follow_cpu("v41_site_entry_graphs", *m.cpu, dir, {prompt}, {graphs}, V);
}

// SWA bounded replay with a cut (model-spec §9): the kept rows' moves (compact_kept_rows) run the deferred expand of
// the candidate source's FFN first, and the decoder layers' entries then pair on the kept rows. Whether that flush is
// right is V41GpuForward.BoundedReplayMatchesTheCpuAndIsExactWhenNothingIsCut (the eager cut run against the CPU's
// bounded replay; a cut step always runs eagerly). Here the graphs after a cut: a 96-token prompt step cut to its last
// 32 rows, then 8 decode steps whose decoder windows start at the first kept row, from graphs, against the same steps
// all eager bit for bit (NaN rows included).
TEST(GpuV41SiteEntry, BoundedReplayCutThenGraphsEqualEager) {
  DI_SKIP_WITHOUT_GPU();
  const std::string dir = gpu_test_model_v41_dir();
  const ModelConfig config = load_model_config(dir + "/config.json");
  const int T = 96, decode = 8;
  std::vector<int32_t> tokens = random_tokens(2026, T, config.vocab_size);
  const std::vector<int32_t> next = random_tokens(2027, decode, config.vocab_size);
  tokens.insert(tokens.end(), next.begin(), next.end());
  StepCapacity cap = test_capacity();
  cap.max_rows = 128;
  PrefillReplayOptions replay;
  replay.mode = PrefillReplayOptions::Mode::DecoderTail;
  replay.keep_tokens = 32;
  const Checkpoint ck = Checkpoint::open(dir);
  gpu::V41GpuModel g(config, gpu::upload_v41_gpu_weights(config, ck, false), cap, replay);
  const std::vector<float> eager = feed_chunk_then_decode(g, tokens, 0, T, false);
  // Slot 1: the cut step eagerly, then the decode steps from graphs.
  std::vector<StepRow> rows;
  for (int t = 0; t < T; ++t) rows.push_back({1, tokens[size_t(t)], t});
  std::vector<float> graphs = logits_to_host(g, g.step(rows), rows.size());
  for (int t = T; t < T + decode; ++t) {
    rows = {{1, tokens[size_t(t)], t}};
    const std::vector<float> l = logits_to_host(g, g.step_graph(rows), 1);
    graphs.insert(graphs.end(), l.begin(), l.end());
  }
  report_exact("v41 site entry: bounded replay cut, decode from graphs vs eager (NaN rows included)",
               bitwise_mismatches(eager, graphs), eager.size());
}

}  // namespace
}  // namespace deepinfer::gputest
