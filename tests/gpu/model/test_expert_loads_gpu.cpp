// EPLB statistics from the GPU models (issue 7, docs/parallel.md "EPLB"): GpuStepModel::set_expert_load_counting /
// take_expert_loads (model/gpu/step_model_base.h, layers/moe/expert_counts.cu) and the engine adapter's
// Model::set_expert_load_counting / take_expert_loads (model/v4/gpu/v4_gpu_forward.h), on the GPU test checkpoints;
// and the kernel alone against a host histogram (eager and graph-captured).
//
// Exact checks: off by default (nullopt, and the graphs captured with counting off are not the counting ones); the
// counts' shape is the CPU models' [config.layers][n_routed_experts]; every layer's counts sum to rows x top_k;
// a second take right after one is all zeros (restarted); graph replay counts what the eager steps count (their
// logits are bitwise equal, V4GpuForward.RunToRunBitwiseEagerAndGraphs, so their routing is); the logits of a
// counting step equal those of a step without counting bit for bit (the counter only reads the routing ids); and
// V4's hash-routed layers (routing = tid2eid[token]) count exactly what the CPU model counts.
// Statistical check: on the biased layers the GPU's routing follows hidden states that differ from the CPU's by the
// FP8 / bf16 numerics (gpu_test_model.h), so near-tie selections may differ. The pairs that move between experts
// (sum |cpu - gpu| / 2 over a layer's experts) are compared with the CPU's own sensitivity measured in the same run
// (the CPU with its bf16 cast points off against the CPU with official numerics), as the forward tests do for
// logits: at most 1.5 x that plus 1/40 of the pairs over all biased layers. A structural error (counts in the wrong
// layer's row, another rank's or padding rows, a missed layer) breaks the exact sums or moves far more pairs.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <optional>
#include <string>
#include <vector>

#include "cuda/device.h"
#include "gpu_test_model.h"
#include "gpu_test_util.h"
#include "layers/moe/expert_counts.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/model.h"
#include "model/v4/gpu/v4_gpu_forward.h"
#include "model/v4/gpu/v4_gpu_model.h"
#include "model/v41/gpu/v41_gpu_model.h"

namespace deepinfer::gputest {
namespace {

using namespace gpu_steps;
using Counts = std::vector<std::vector<int64_t>>;

Models load_v4() {
  return gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
}

Models load_v41() {
  return gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
}

// The counts' shape and every layer's sum (rows x top_k: every layer of V4 / V4.1 is a MoE layer).
void expect_shape_and_sums(const char* name, const ModelConfig& c, const Counts& counts, int64_t rows) {
  ASSERT_EQ(counts.size(), c.layers.size()) << name;
  int64_t bad_layers = 0;
  for (size_t l = 0; l < counts.size(); ++l) {
    ASSERT_EQ(counts[l].size(), size_t(c.n_routed_experts)) << name;
    int64_t sum = 0;
    for (int64_t v : counts[l]) {
      EXPECT_GE(v, 0) << name;
      sum += v;
    }
    if (sum != rows * c.n_experts_per_tok) {
      ++bad_layers;
      std::printf("  %s layer %zu: %lld pairs counted, %lld expected\n", name, l, (long long)sum,
                  (long long)(rows * c.n_experts_per_tok));
    }
  }
  report_exact(std::string(name) + " layers whose counts do not sum to rows x top_k", size_t(bad_layers),
               counts.size());
}

int64_t moved_pairs(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  int64_t d = 0;
  for (size_t e = 0; e < a.size(); ++e) d += std::llabs(a[e] - b[e]);
  return d / 2;
}

// The CPU model's counts for `seq` fed as the GPU was (gpu_steps::feed_scored: its two prefill chunks, then one token
// per step).
Counts cpu_counts(const Model& cpu, const ScoredSequence& seq) {
  const std::vector<int32_t>& prompt = seq.prompt;
  cpu.set_expert_load_counting(true);
  auto state = cpu.new_sequence();
  cpu.forward(*state, std::vector<int32_t>(prompt.begin(), prompt.begin() + kScoredFirstChunk));
  cpu.forward(*state, std::vector<int32_t>(prompt.begin() + kScoredFirstChunk, prompt.begin() + seq.decode_from));
  for (size_t t = size_t(seq.decode_from); t < prompt.size(); ++t)
    cpu.forward(*state, std::vector<int32_t>{prompt[t]});
  std::optional<Counts> c = cpu.take_expert_loads();
  cpu.set_expert_load_counting(false);
  EXPECT_TRUE(c.has_value());
  return c ? *c : Counts{};
}

// The rows: gpu_steps::ranking_sequence with 16 decode rows, every one of which ranks its indexer entries (V4: chunks
// of 24 and 43 rows, decode rows 67 .. 82, 83 tokens; V4.1: 24 and 9 rows, decode rows 33 .. 48, 49 tokens). 40 tokens
// in a 24-row chunk and 16 decode rows left V4's indexers nothing to rank. Not the scored sequence's 192 / 96 tokens:
// the two CPU models forward every token, at ~60 ms (V4) / ~105 ms (V4.1) a token.
void expect_counts_follow_cpu(const char* name, Models& m, const std::string& model_dir) {
  gpu::GpuStepModel& g = *m.gpu;
  const ModelConfig& c = m.config;
  const std::string n(name);
  const ScoredSequence seq = ranking_sequence(c, 4242, 16);
  ASSERT_NO_FATAL_FAILURE(expect_indexers_rank(n, c, seq));
  const int T = int(seq.prompt.size());

  // Off by default; graphs captured with counting off (slot 3) stay the graphs without the counter.
  EXPECT_FALSE(g.take_expert_loads().has_value()) << "counting must be off by default";
  const std::vector<float> off = feed_scored(g, seq, 3, true);
  EXPECT_FALSE(g.take_expert_loads().has_value());

  g.set_expert_load_counting(true);
  const std::vector<float> eager = feed_scored(g, seq, 0, false);
  std::optional<Counts> a = g.take_expert_loads();
  ASSERT_TRUE(a.has_value());
  expect_shape_and_sums((n + " eager").c_str(), c, *a, T);
  std::optional<Counts> zero = g.take_expert_loads();
  ASSERT_TRUE(zero.has_value());
  size_t nonzero = 0;
  for (const auto& row : *zero)
    for (int64_t v : row) nonzero += v != 0;
  report_exact(n + " counts right after a take (restarted)", nonzero, size_t(c.layers.size() * c.n_routed_experts));

  const std::vector<float> graphs = feed_scored(g, seq, 1, true);
  std::optional<Counts> b = g.take_expert_loads();
  ASSERT_TRUE(b.has_value());
  expect_shape_and_sums((n + " graphs").c_str(), c, *b, T);
  size_t differ = 0;
  for (size_t l = 0; l < a->size(); ++l)
    for (size_t e = 0; e < (*a)[l].size(); ++e) differ += (*a)[l][e] != (*b)[l][e];
  report_exact(n + " graph replay counts vs eager (layer, expert) entries", differ,
               size_t(c.layers.size() * c.n_routed_experts));
  report_exact(n + " logits with counting on (graphs) vs off (graphs)", bitwise_mismatches(graphs, off), off.size());
  report_exact(n + " logits with counting on, graphs vs eager", bitwise_mismatches(graphs, eager), eager.size());

  // Turned off: nullopt again, and its graphs (captured above) replay without counting.
  g.set_expert_load_counting(false);
  EXPECT_FALSE(g.take_expert_loads().has_value());

  // Against the CPU model's counts of the same rows.
  const Counts cpu = cpu_counts(*m.cpu, seq);
  ModelOptions fp32_casts;
  fp32_casts.show_progress = false;
  fp32_casts.numerics.bf16_activations = false;
  std::unique_ptr<Model> cpu_b = load_model(model_dir, fp32_casts);
  const Counts self = cpu_counts(*cpu_b, seq);
  ASSERT_EQ(cpu.size(), a->size());
  ASSERT_EQ(self.size(), a->size());
  int64_t hash_moved = 0, gpu_moved = 0, self_moved = 0, biased_pairs = 0;
  for (size_t l = 0; l < a->size(); ++l) {
    const int64_t dg = moved_pairs(cpu[l], (*a)[l]), ds = moved_pairs(cpu[l], self[l]);
    const bool hash = c.layers[l].hash_moe;
    std::printf("  %s layer %zu%s: pairs moved GPU vs CPU %lld, CPU bf16-off vs CPU %lld (of %lld)\n", name, l,
                hash ? " (hash)" : "", (long long)dg, (long long)ds, (long long)(T * c.n_experts_per_tok));
    if (hash) {
      hash_moved += dg;
    } else {
      gpu_moved += dg;
      self_moved += ds;
      biased_pairs += int64_t(T) * c.n_experts_per_tok;
    }
  }
  report_exact(n + " hash-routed layers' pairs moved vs the CPU", size_t(hash_moved), size_t(T * c.n_experts_per_tok));
  const double bound = 1.5 * double(self_moved) + double(biased_pairs) / 40.0;
  std::printf("GPU_CHECK %s biased layers' pairs moved vs the CPU %lld/%lld bound=%.1f (1.5 x the CPU's own bf16 "
              "sensitivity %lld + 1/40 of the pairs)\n",
              name, (long long)gpu_moved, (long long)biased_pairs, bound, (long long)self_moved);
  EXPECT_LE(double(gpu_moved), bound);
}

// The kernel alone against a host histogram: random ids (some outside [0, experts), which are skipped), pair counts
// from 0 (no launch) to a 2048-row prefill at top 6 and past one block's grid, 16 / 256 / 384 experts; added onto
// non-zero counts (it accumulates); and two replays of a captured launch add twice what one eager launch adds.
TEST(GpuExpertLoads, KernelCountsLikeTheHostEagerAndCaptured) {
  DI_SKIP_WITHOUT_GPU();
  std::mt19937_64 gen(99);
  size_t bad = 0, total = 0;
  cudaStream_t stream = nullptr;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int experts : {16, 256, 384}) {
    for (int64_t pairs : {int64_t(0), int64_t(1), int64_t(48), int64_t(2048 * 6), int64_t(300000)}) {
      std::vector<int32_t> ids(size_t(std::max<int64_t>(pairs, 1)));
      for (int32_t& e : ids) e = int32_t(gen() % uint64_t(experts + 3)) - 1;  // -1 and experts, experts + 1: skipped
      std::vector<unsigned long long> start(static_cast<size_t>(experts));
      for (auto& v : start) v = gen() % 1000;
      cuda::DeviceBuffer d_ids(ids.size() * 4), d_counts(start.size() * 8);
      d_ids.upload(ids.data(), ids.size() * 4);
      d_counts.upload(start.data(), start.size() * 8);
      std::vector<unsigned long long> add(static_cast<size_t>(experts), 0);
      for (int64_t i = 0; i < pairs; ++i)
        if (ids[size_t(i)] >= 0 && ids[size_t(i)] < experts) ++add[size_t(ids[size_t(i)])];
      // Eager once, then a captured launch replayed twice.
      cuda::count_routed_experts(d_ids.as<int32_t>(), pairs, experts, d_counts.as<unsigned long long>(), stream);
      DI_CUDA_CHECK(cudaStreamSynchronize(stream));
      std::vector<unsigned long long> got(start.size());
      d_counts.download(got.data(), got.size() * 8);
      for (size_t e = 0; e < got.size(); ++e) bad += got[e] != start[e] + add[e];
      if (pairs > 0) {
        cudaGraphExec_t exec = capture_exec(stream, [&] {
          cuda::count_routed_experts(d_ids.as<int32_t>(), pairs, experts, d_counts.as<unsigned long long>(), stream);
        });
        DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        DI_CUDA_CHECK(cudaStreamSynchronize(stream));
        DI_CUDA_CHECK(cudaGraphExecDestroy(exec));
        d_counts.download(got.data(), got.size() * 8);
        for (size_t e = 0; e < got.size(); ++e) bad += got[e] != start[e] + 3 * add[e];
        total += got.size();
      }
      total += got.size();
    }
  }
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
  report_exact("count_routed_experts vs the host histogram (eager, graph replays)", bad, total);
}

TEST(GpuExpertLoads, V4CountsMatchTheCpuAndGraphReplay) {
  DI_SKIP_WITHOUT_GPU();
  Models m = load_v4();
  expect_counts_follow_cpu("v4_gpu_expert_loads", m, gpu_test_model_dir());
}

TEST(GpuExpertLoads, V41CountsMatchTheCpuAndGraphReplay) {
  DI_SKIP_WITHOUT_GPU();
  Models m = load_v41();
  expect_counts_follow_cpu("v41_gpu_expert_loads", m, gpu_test_model_v41_dir());
}

// The engine's view: the adapter (V4GpuForward, what load_model gives the engine) reports nullopt until counting is
// on, then the pairs of the rows of its forward_batch calls (several chunks, several sequences in one step), as the
// GPU model counts them; V4's hash layer exactly as the CPU model.
TEST(GpuExpertLoads, EngineAdapterReportsTheStepsPairs) {
  DI_SKIP_WITHOUT_GPU();
  const std::string dir = gpu_test_model_dir();
  ModelOptions opt;
  opt.show_progress = false;
  std::unique_ptr<Model> cpu = load_model(dir, opt);
  const ModelConfig config = cpu->config();
  Checkpoint ck = Checkpoint::open(dir);
  gpu::V4GpuForward model(
      std::make_unique<gpu::V4GpuModel>(config, gpu::upload_v4_gpu_weights(config, ck, false), test_capacity()));
  const Model& engine_model = model;
  EXPECT_FALSE(engine_model.take_expert_loads().has_value());
  engine_model.set_expert_load_counting(true);

  const int64_t V = config.vocab_size;
  const std::vector<int32_t> p0 = random_tokens(31, 20, V), p1 = random_tokens(32, 9, V);
  auto s0 = engine_model.new_sequence(), s1 = engine_model.new_sequence();
  std::vector<std::vector<float>> last;
  std::vector<BatchChunk> chunks = {{s0.get(), p0, true, nullptr}, {s1.get(), p1, true, nullptr}};
  engine_model.forward_batch(chunks, last);
  std::optional<Counts> counts = engine_model.take_expert_loads();
  ASSERT_TRUE(counts.has_value());
  expect_shape_and_sums("v4_gpu_adapter_expert_loads", config, *counts, int64_t(p0.size() + p1.size()));

  // The hash layers against the CPU's counts of the same tokens.
  cpu->set_expert_load_counting(true);
  auto c0 = cpu->new_sequence(), c1 = cpu->new_sequence();
  cpu->forward(*c0, p0);
  cpu->forward(*c1, p1);
  std::optional<Counts> want = cpu->take_expert_loads();
  ASSERT_TRUE(want.has_value());
  int64_t hash_moved = 0;
  for (size_t l = 0; l < config.layers.size(); ++l)
    if (config.layers[l].hash_moe) hash_moved += moved_pairs((*want)[l], (*counts)[l]);
  report_exact("v4_gpu_adapter_expert_loads hash-routed layers' pairs moved vs the CPU", size_t(hash_moved),
               (p0.size() + p1.size()) * size_t(config.n_experts_per_tok));

  engine_model.set_expert_load_counting(false);
  EXPECT_FALSE(engine_model.take_expert_loads().has_value());
}

}  // namespace
}  // namespace deepinfer::gputest
