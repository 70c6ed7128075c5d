// The GPU tests' checkpoints: random V4 / V4.1 checkpoints with the production attention shape
// (tools/fixtures/make_gpu_model.py --family v4 | v41), generated once per machine into the temp directory
// (byte-identical everywhere) or named by DEEPINFER_GPU_TEST_MODEL / DEEPINFER_GPU_TEST_MODEL_V41; the
// whole-forward and greedy comparisons with the CPU that the V4 and V4.1 GPU forward tests share; and (namespace
// gpu_steps) what those tests do with a GPU model through its common interface gpu::GpuStepModel: loading it next to
// the CPU model, running steps of rows, the mixed-chunk feed, greedy decoding.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "model/checkpoint.h"
#include "model/gpu/step_model.h"
#include "model/v4/gpu/v4_gpu_model.h"
#include "model/v41/gpu/v41_gpu_model.h"
#include "model/model.h"

namespace deepinfer::gputest {

inline std::string generated_test_model_dir(const char* env, const char* temp_name, const char* family) {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv(env)) return d;
  const fs::path dir = fs::temp_directory_path() / temp_name;
  if (!fs::exists(dir / "config.json")) {
    // Prebuilt binaries run from another checkout (tools/gpu/run_prebuilt.sh): it names its source tree.
    const char* src = std::getenv("DEEPINFER_SOURCE_OVERRIDE");
    const std::string root = src ? src : DEEPINFER_SOURCE_DIR;
    const std::string cmd = "python3 " + root + "/tools/fixtures/make_gpu_model.py --family " + family + " --out " +
                            dir.string();
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  return dir.string();
}

inline std::string gpu_test_model_dir() {
  return generated_test_model_dir("DEEPINFER_GPU_TEST_MODEL", "deepinfer_v4_gpu_model", "v4");
}

inline std::string gpu_test_model_v41_dir() {
  return generated_test_model_dir("DEEPINFER_GPU_TEST_MODEL_V41", "deepinfer_v41_gpu_model", "v41");
}

// The GPU forward's logits against the CPU forward with official numerics (`cpu`), with the bound measured in the
// same run: the CPU forward of `model_dir` with only its bf16 cast points off differs from `cpu` by its own
// sensitivity (on these random models an ulp at a cast point can move a logit far), and the GPU may differ by at
// most 1.5x that on average, 1.5x + 0.1 at the worst position, and agree on the argmax within a tenth of the
// positions of the CPU's own agreement. gpu_logits[s] holds prompt s's rows, [T, V] each.
inline void expect_logits_follow_cpu(const char* name, const Model& cpu, const std::string& model_dir,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     const std::vector<std::vector<float>>& gpu_logits, int64_t V) {
  ModelOptions fp32_casts;
  fp32_casts.show_progress = false;
  fp32_casts.numerics.bf16_activations = false;
  std::unique_ptr<Model> cpu_b = load_model(model_dir, fp32_casts);
  auto argmax = [V](const float* row) { return std::max_element(row, row + V) - row; };
  double gpu_sum = 0, ref_sum = 0, gpu_worst = 0, ref_worst = 0;
  int gpu_argmax = 0, ref_argmax = 0, total = 0;
  for (size_t s = 0; s < prompts.size(); ++s) {
    auto state = cpu.new_sequence();
    Tensor ref = cpu.forward(*state, prompts[s]);
    auto state_b = cpu_b->new_sequence();
    Tensor alt = cpu_b->forward(*state_b, prompts[s]);
    for (int64_t t = 0; t < int64_t(prompts[s].size()); ++t) {
      std::vector<float> out(gpu_logits[s].begin() + t * V, gpu_logits[s].begin() + (t + 1) * V);
      std::vector<float> want(ref.row(t), ref.row(t) + V), other(alt.row(t), alt.row(t) + V);
      const double eg = rel_l2(out, want), er = rel_l2(other, want);
      gpu_sum += eg;
      ref_sum += er;
      gpu_worst = std::max(gpu_worst, eg);
      ref_worst = std::max(ref_worst, er);
      gpu_argmax += argmax(out.data()) == argmax(want.data());
      ref_argmax += argmax(other.data()) == argmax(want.data());
      ++total;
    }
    std::printf("  sequence %zu: GPU vs CPU mean rel_l2 so far %.3e\n", s, gpu_sum / total);
  }
  const double gpu_mean = gpu_sum / total, ref_mean = ref_sum / total;
  std::printf("GPU_CHECK %s mean rel_l2=%.3e bound=%.3e (1.5 x the CPU's own bf16 sensitivity %.3e); worst %.3e "
              "(CPU %.3e); argmax equal %d/%d (CPU %d/%d)\n",
              name, gpu_mean, 1.5 * ref_mean, ref_mean, gpu_worst, ref_worst, gpu_argmax, total, ref_argmax, total);
  EXPECT_LE(gpu_mean, 1.5 * ref_mean);
  EXPECT_LE(gpu_worst, 1.5 * ref_worst + 0.1);
  EXPECT_GE(gpu_argmax, ref_argmax - total / 10);
}

// Greedy decoding on the GPU (`gpu_ids`, fed its own choices from `prompt`) against the CPU forward with official
// numerics (`cpu`, fed its own). Up to the first difference both sides saw the same tokens; there the two choices'
// CPU logits must be within the CPU's own numerics noise. The noise is measured at that step: the CPU forward of
// `model_dir` with its bf16 cast points off, fed the same tokens, moves the step's logits by RMS sigma; the GPU may
// move them by 1.5 x that on average (expect_logits_follow_cpu), so the difference of two logits moves by RMS
// 1.5 sqrt(2) sigma, and a divergence counts as a near-tie when the CPU's gap between the two choices is within
// three of those. (A fixed gap bound cannot serve every random model: their logits' sensitivity differs by 10x.)
inline void expect_greedy_follows_cpu(const char* name, const Model& cpu, const std::string& model_dir,
                                      const std::vector<int32_t>& prompt, const std::vector<int32_t>& gpu_ids,
                                      int64_t V) {
  ModelOptions fp32_casts;
  fp32_casts.show_progress = false;
  fp32_casts.numerics.bf16_activations = false;
  std::unique_ptr<Model> cpu_b = load_model(model_dir, fp32_casts);
  auto state = cpu.new_sequence();
  auto state_b = cpu_b->new_sequence();
  Tensor ref = cpu.forward(*state, prompt);
  Tensor alt = cpu_b->forward(*state_b, prompt);
  const int steps = int(gpu_ids.size());
  int64_t row = ref.dim(0) - 1;
  for (int s = 0; s < steps; ++s) {
    const float* want = ref.row(row);
    const float* other = alt.row(row);
    const int32_t cpu_id = int32_t(std::max_element(want, want + V) - want);
    if (cpu_id != gpu_ids[size_t(s)]) {
      double sq = 0;
      for (int64_t i = 0; i < V; ++i) sq += double(want[i] - other[i]) * (want[i] - other[i]);
      const double sigma = std::sqrt(sq / double(V));
      const double gap = double(want[cpu_id]) - double(want[gpu_ids[size_t(s)]]);
      const double bound = 3.0 * 1.5 * std::sqrt(2.0) * sigma;
      std::printf("GPU_CHECK %s identical_prefix=%d/%d; at step %d cpu %d gpu %d: CPU logit gap %.4g, bound %.4g "
                  "(3 x 1.5 sqrt(2) x the CPU's own noise RMS %.4g at this step)\n",
                  name, s, steps, s, cpu_id, gpu_ids[size_t(s)], gap, bound, sigma);
      EXPECT_LE(gap, bound) << "greedy diverged where the CPU's choice was not a near-tie within its own noise";
      return;
    }
    if (s + 1 == steps) break;
    ref = cpu.forward(*state, std::vector<int32_t>{cpu_id});
    alt = cpu_b->forward(*state_b, std::vector<int32_t>{cpu_id});
    row = 0;
  }
  std::printf("GPU_CHECK %s identical_prefix=%d/%d\n", name, steps, steps);
}

// Nested, so that a test file that includes this header and defines its own random_tokens / argmax / run_step
// in an anonymous namespace still compiles (its calls would otherwise be ambiguous).
namespace gpu_steps {

inline std::vector<int32_t> random_tokens(uint64_t seed, int n, int64_t vocab) {
  std::mt19937_64 gen(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = int32_t(3 + gen() % uint64_t(vocab - 3));
  return t;
}

inline int argmax(const float* row, int64_t n) { return int(std::max_element(row, row + n) - row); }

// The forward tests' GPU model size: 4 slots of 256 positions, at most 64 rows a step.
inline StepCapacity test_capacity() {
  StepCapacity cap;
  cap.slots = 4;
  cap.max_context = 256;
  cap.max_rows = 64;
  return cap;
}

// The CPU model of a checkpoint (official numerics) and a GPU model of the same checkpoint.
struct Models {
  ModelConfig config;
  std::unique_ptr<Model> cpu;
  std::unique_ptr<gpu::GpuStepModel> gpu;
};

// Makes the GPU model from the CPU model's config and the opened checkpoint.
using GpuModelFactory = std::function<std::unique_ptr<gpu::GpuStepModel>(const ModelConfig&, const Checkpoint&)>;

inline Models load_cpu_and_gpu(const std::string& dir, const GpuModelFactory& make_gpu) {
  Models m;
  ModelOptions opt;
  opt.show_progress = false;  // numerics: the official defaults (all on)
  m.cpu = load_model(dir, opt);
  m.config = m.cpu->config();
  Checkpoint ck = Checkpoint::open(dir);
  m.gpu = make_gpu(m.config, ck);
  return m;
}

// The test checkpoints' GPU models at test_capacity() (weights uploaded without the bf16 copies).
inline std::unique_ptr<gpu::GpuStepModel> make_v4_test_gpu(const ModelConfig& config, const Checkpoint& ck) {
  return std::make_unique<gpu::V4GpuModel>(config, gpu::upload_v4_gpu_weights(config, ck, false), test_capacity());
}
inline std::unique_ptr<gpu::GpuStepModel> make_v41_test_gpu(const ModelConfig& config, const Checkpoint& ck) {
  return std::make_unique<gpu::V41GpuModel>(config, gpu::upload_v41_gpu_weights(config, ck, false), test_capacity());
}

// Copies `rows` rows of logits from the device (the step's output) once the model's stream has run them.
inline std::vector<float> logits_to_host(gpu::GpuStepModel& g, const float* logits, size_t rows) {
  std::vector<float> host(rows * size_t(g.config().vocab_size));
  DI_CUDA_CHECK(cudaMemcpyAsync(host.data(), logits, host.size() * sizeof(float), cudaMemcpyDeviceToHost, g.stream()));
  DI_CUDA_CHECK(cudaStreamSynchronize(g.stream()));
  return host;
}

// Runs the listed rows (eagerly) and appends each row's logits to out[slot].
inline void run_step(gpu::GpuStepModel& g, const std::vector<StepRow>& rows, std::vector<std::vector<float>>& out) {
  const int64_t V = g.config().vocab_size;
  const std::vector<float> host = logits_to_host(g, g.step(rows), rows.size());
  for (size_t r = 0; r < rows.size(); ++r)
    out[size_t(rows[r].slot)].insert(out[size_t(rows[r].slot)].end(), host.begin() + r * V, host.begin() + (r + 1) * V);
}

// Feeds the first T tokens of prompts[0..2] into slots 0..2, all sharing steps: slot 0 in chunks of 48, slot 1 one
// token per step, slot 2 in chunks of 1, 7, 16, 33, 39 and then one per step (T = 96: at most 48 + 1 + 7 = 56 rows
// a step).
// Returns each slot's logits, [T, V].
inline std::vector<std::vector<float>> feed_mixed_chunks(gpu::GpuStepModel& g,
                                                         const std::vector<std::vector<int32_t>>& prompts, int T) {
  std::vector<std::vector<float>> logits(3);
  const std::vector<int> chunks2 = {1, 7, 16, 33, 39};
  int next[3] = {0, 0, 0};
  size_t c2 = 0;
  while (next[0] < T || next[1] < T || next[2] < T) {
    std::vector<StepRow> rows;
    auto take = [&](int slot, int count) {
      for (int i = 0; i < count && next[slot] < T; ++i, ++next[slot])
        rows.push_back({slot, prompts[size_t(slot)][size_t(next[slot])], next[slot]});
    };
    take(0, 48);
    take(1, 1);
    if (c2 < chunks2.size()) take(2, chunks2[c2++]);
    else take(2, 1);
    run_step(g, rows, logits);
  }
  return logits;
}

// Greedy decoding in slot 0: the prompt in steps of the model's max_rows rows (one chunk up to that length), then
// one row per step fed the previous choice (a token known on the host); returns the `steps` chosen tokens.
inline std::vector<int32_t> greedy_ids(gpu::GpuStepModel& g, const std::vector<int32_t>& prompt, int steps) {
  const int64_t V = g.config().vocab_size;
  std::vector<std::vector<float>> out(1);
  const size_t chunk = size_t(g.capacity().max_rows);
  for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
    std::vector<StepRow> rows;
    for (size_t t = begin; t < std::min(prompt.size(), begin + chunk); ++t) rows.push_back({0, prompt[t], int32_t(t)});
    run_step(g, rows, out);
  }
  std::vector<int32_t> ids{int32_t(argmax(out[0].data() + (prompt.size() - 1) * V, V))};
  for (int i = 1; i < steps; ++i) {
    out[0].clear();
    run_step(g, {{0, ids.back(), int32_t(prompt.size()) + i - 1}}, out);
    ids.push_back(int32_t(argmax(out[0].data(), V)));
  }
  return ids;
}

// Three random prompts of 96 tokens (seeds seed, seed + 1, seed + 2) fed into slots 0..2 by feed_mixed_chunks; the
// GPU's logits against the CPU's (expect_logits_follow_cpu).
inline void expect_mixed_chunks_follow_cpu(const char* name, Models& m, const std::string& model_dir, uint64_t seed) {
  const int T = 96;
  const int64_t V = m.config.vocab_size;
  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < 3; ++s) prompts.push_back(random_tokens(seed + s, T, V));
  const std::vector<std::vector<float>> gpu_logits = feed_mixed_chunks(*m.gpu, prompts, T);
  expect_logits_follow_cpu(name, *m.cpu, model_dir, prompts, gpu_logits, V);
}

// Feeds `prompt` into `slot` from position 0: its first `chunk` tokens as one step, then one token per step, eagerly
// or from the CUDA graphs of the step shapes; returns every row's logits in order.
inline std::vector<float> feed_chunk_then_decode(gpu::GpuStepModel& g, const std::vector<int32_t>& prompt, int slot,
                                                 int chunk, bool graphs) {
  std::vector<float> all;
  auto run = [&](const std::vector<StepRow>& rows) {
    const float* logits = graphs ? g.step_graph(rows) : g.step(rows);
    const std::vector<float> host = logits_to_host(g, logits, rows.size());
    all.insert(all.end(), host.begin(), host.end());
  };
  std::vector<StepRow> first;
  for (int t = 0; t < chunk; ++t) first.push_back({slot, prompt[size_t(t)], t});
  run(first);  // a prefill chunk
  for (int t = chunk; t < int(prompt.size()); ++t) run({{slot, prompt[size_t(t)], t}});  // then decode steps
  return all;
}

// The compression ratio of the model's indexer layers with the fewest entries: an indexer (V4 CSA, indexer_gpu.h; V4.1
// Full and Reindex, csa2_indexer_gpu.h) sees the entries e < (pos + 1) / ratio of its layer at position pos, and with
// no more of them than index_topk takes them all: V4 skips its score blocks and select outright, V4.1's top-k keeps
// every scored entry. 0 when the model has no indexer layer.
inline int largest_index_ratio(const ModelConfig& c) {
  int ratio = 0;
  for (const LayerPlan& l : c.layers)
    if (l.attention == AttentionKind::CSA || l.role == Csa2Role::Full || l.role == Csa2Role::Reindex)
      ratio = std::max(ratio, l.compress_ratio);
  return ratio;
}

// The indexer entries every indexer layer shows the row at `pos` at least.
inline int fewest_index_entries(const ModelConfig& c, int pos) { return (pos + 1) / largest_index_ratio(c); }

// The first position whose row every indexer layer shows more than index_topk entries: the rows from there on rank
// (67 on the V4 test checkpoint, 33 on V4.1's; -1 without an indexer layer).
inline int first_ranking_position(const ModelConfig& c) { return (c.index_topk + 1) * largest_index_ratio(c) - 1; }

// The rows at positions first .. last against the config: an indexer layer exists and the row at `first` (the
// fewest entries of them) sees more than index_topk, so every one of them ranks. Fails loudly if a change of the
// checkpoint or of a test's feed leaves them with nothing to rank; prints the counts.
inline void expect_rows_rank(const std::string& name, const ModelConfig& c, int first, int last) {
  ASSERT_GT(largest_index_ratio(c), 0) << name << ": the model has no indexer layer";
  const int fewest = fewest_index_entries(c, first);
  std::printf("GPU_CHECK %s rows %d .. %d see at least %d .. %d indexer entries (index_topk %d)\n", name.c_str(),
              first, last, fewest, fewest_index_entries(c, last), c.index_topk);
  EXPECT_GT(fewest, c.index_topk) << name << ": every one of these rows' indexers must rank more entries than "
                                             "index_topk";
}

// A step test's scored sequence: its last row shows every indexer layer kScoredTopkMultiple x index_topk entries, and
// every one of its decode rows more than index_topk (40 tokens, the tests' length until session 19, gave V4's CSA
// layers at most 10 entries: their score blocks and select never ran). The first half goes in two prefill chunks: 24
// rows (the MoE's unfused routing), then up to test_capacity().max_rows rows to the middle, whose later rows select in
// the split kernels (more than 8 rows); the second half one decode row a step (the fused routing, the decode indexer
// kernels). On the test checkpoints (index_topk 16):
//   V4  (CSA ratio 4): 3 x 16 x 4 = 192 tokens; chunks [0, 24) and [24, 88) (rows 67 .. 87 select from 17 .. 22
//       entries), decode rows 88 .. 191 see 22 .. 48 entries (one or two 32-entry score blocks at the auto shape).
//   V4.1 (Full ratio 2 at layer 1, ratio 1 at layers 3 and 5): 3 x 16 x 2 = 96 tokens; chunks [0, 24) and [24, 48)
//       (the ratio-2 layer selects from row 33), decode rows 48 .. 95 see 24 .. 48 entries at ratio 2 and 49 .. 96 at
//       ratio 1 (two 64-entry score blocks past row 63). The Reindex layer (5) ranks only inside its candidate blocks,
//       4 blocks of 4 = index_topk entries on this checkpoint, so its top-k keeps every eligible entry at any length.
constexpr int kScoredTopkMultiple = 3;
constexpr int kScoredFirstChunk = 24;

struct ScoredSequence {
  std::vector<int32_t> prompt;
  int decode_from = 0;  // prefill chunks [0, kScoredFirstChunk), [kScoredFirstChunk, decode_from); then a row a step
  int last_topk_multiple = kScoredTopkMultiple;  // its last row shows every indexer layer this x index_topk entries
};

inline ScoredSequence scored_sequence(const ModelConfig& c, uint64_t seed) {
  const int T = kScoredTopkMultiple * c.index_topk * largest_index_ratio(c);
  ScoredSequence s;
  s.prompt = random_tokens(seed, T, c.vocab_size);
  s.decode_from = kScoredFirstChunk + std::min(test_capacity().max_rows, T / 2 - kScoredFirstChunk);
  return s;
}

// The scored sequence's shape at the shortest length whose decode rows rank: chunks [0, kScoredFirstChunk) and
// [kScoredFirstChunk, first_ranking_position), then `decode_rows` rows one a step, from the first ranking position
// (V4 test checkpoint: chunks of 24 and 43 rows, decode rows from 67 see 17 entries and more against index_topk 16;
// V4.1: chunks of 24 and 9 rows, decode rows from 33). For the tests whose CPU reference cannot afford
// scored_sequence's length (the CPU forward takes ~60 ms a token on the V4 test checkpoint, ~105 on V4.1's: run 113's
// V4GpuForward / V41GpuForward.PrefillDecodeAndChunksMatchTheCpuForward), and for feeds of a test's own shape that
// take its lengths (decode_from, prompt.size()).
inline ScoredSequence ranking_sequence(const ModelConfig& c, uint64_t seed, int decode_rows) {
  ScoredSequence s;
  s.decode_from = std::max(kScoredFirstChunk + 1, first_ranking_position(c));
  s.prompt = random_tokens(seed, s.decode_from + decode_rows, c.vocab_size);
  s.last_topk_multiple = 1;
  return s;
}

// The sequence's arithmetic against the config: fails loudly if a change of the checkpoint, the capacity or the
// length leaves the decode rows' indexers with nothing to rank.
inline void expect_indexers_rank(const std::string& name, const ModelConfig& c, const ScoredSequence& s) {
  const int T = int(s.prompt.size());
  ASSERT_LE(T, test_capacity().max_context) << name;
  ASSERT_GT(s.decode_from, kScoredFirstChunk) << name;
  ASSERT_LE(s.decode_from - kScoredFirstChunk, test_capacity().max_rows) << name;
  ASSERT_LT(s.decode_from, T) << name;
  std::printf("GPU_CHECK %s sequence: %d tokens, chunks of %d and %d rows\n", name.c_str(), T, kScoredFirstChunk,
              s.decode_from - kScoredFirstChunk);
  ASSERT_NO_FATAL_FAILURE(expect_rows_rank(name + " decode", c, s.decode_from, T - 1));
  EXPECT_GE(fewest_index_entries(c, T - 1), s.last_topk_multiple * c.index_topk) << name;
}

// Feeds s.prompt into `slot` from position 0 in its two prefill chunks, then one row a step, eagerly or from the
// CUDA graphs of the step shapes (gpu_steps::feed_chunk_then_decode with a second chunk); every row's logits in order.
inline std::vector<float> feed_scored(gpu::GpuStepModel& g, const ScoredSequence& s, int slot, bool graphs) {
  std::vector<float> all;
  auto run = [&](int begin, int end) {
    std::vector<StepRow> rows;
    for (int t = begin; t < end; ++t) rows.push_back({slot, s.prompt[size_t(t)], t});
    const float* logits = graphs ? g.step_graph(rows) : g.step(rows);
    const std::vector<float> host = logits_to_host(g, logits, rows.size());
    all.insert(all.end(), host.begin(), host.end());
  };
  run(0, kScoredFirstChunk);
  run(kScoredFirstChunk, s.decode_from);
  for (int t = s.decode_from; t < int(s.prompt.size()); ++t) run(t, t + 1);
  return all;
}

// 16 greedy steps after a random prompt (seed) on the GPU (greedy_ids) against the CPU's greedy decoding
// (expect_greedy_follows_cpu). The prompt has 40 tokens, or as many as make every row the comparison reads rank (the
// prompt's last row, then the decode rows): 68 on the V4 test checkpoint (rows 67 .. 82 see 17 .. 20 entries against
// index_topk 16; the GPU takes the prompt in steps of 64 and 4 rows), 40 on V4.1's (rows 39 .. 54: 20 .. 27). Not
// the scored sequence's 192 tokens: the CPU forwards the prompt twice, at ~60 ms a token (ranking_sequence).
inline void expect_greedy_decode_follows_cpu(const char* name, Models& m, const std::string& model_dir,
                                             uint64_t seed) {
  const int64_t V = m.config.vocab_size;
  const int steps = 16, P = std::max(40, first_ranking_position(m.config) + 1);
  ASSERT_NO_FATAL_FAILURE(
      expect_rows_rank(std::string(name) + " prompt's last and decode", m.config, P - 1, P + steps - 2));
  const std::vector<int32_t> ids = random_tokens(seed, P, V);
  const std::vector<int32_t> gpu_ids = greedy_ids(*m.gpu, ids, steps);
  expect_greedy_follows_cpu(name, *m.cpu, model_dir, ids, gpu_ids, V);
}

// Elements of x whose bits differ from y's (x.size() elements compared).
inline size_t bitwise_mismatches(const std::vector<float>& x, const std::vector<float>& y) {
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) bad += std::memcmp(&x[i], &y[i], sizeof(float)) != 0;
  return bad;
}

}  // namespace gpu_steps

}  // namespace deepinfer::gputest
