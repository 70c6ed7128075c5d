// EPLB statistics live in the engine (EngineOptions::expert_parallel / eplb_window_steps / eplb_redundant_experts,
// EngineStats::moe_lb_*; docs/parallel.md "EPLB"): a fake model routes every token to Zipf(1)-distributed experts and
// logs the counts it hands the engine; the expected moe_lb is computed here from those raw counts (sum over layers
// of the slowest rank / sum of the mean), never with src/parallel/eplb. The CPU reference models count top_k pairs
// per token and layer. A data-parallel group keeps one window for all its ranks, the sum of what each rank's model
// counted in each lockstep step.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "deepinfer/engine.h"
#include "model/model.h"
#include "runtime/data_parallel.h"
#include "runtime/engine_core.h"
#include "runtime/expert_loads.h"
#include "fake_model_parts.h"

namespace deepinfer {
namespace {


const std::string kFixtures = std::string(DEEPINFER_SOURCE_DIR) + "/tests/golden/fixtures/";

// The v4_tiny engine runs' options (EPLB statistics over 2 expert-parallel ranks with 2 redundant slots, small
// steps so that prefill takes several) and their `n` greedy requests of 10 prompt tokens and 6 output tokens each.
EngineOptions v4_tiny_eplb_options(int window_steps) {
  EngineOptions o;
  o.model = kFixtures + "v4_tiny";
  o.expert_parallel = 2;
  o.eplb_window_steps = window_steps;
  o.eplb_redundant_experts = 2;
  o.max_batch_tokens = 16;
  o.prefill_chunk = 8;
  return o;
}
std::vector<Request> v4_tiny_eplb_requests(int n) {
  std::vector<Request> reqs;
  for (int i = 0; i < n; ++i) {
    Request r{{int32_t(5 + i), 17, 99, 3, 250, int32_t(41 + i), 7, 8, 300, 12}, "", SamplingParams::greedy(6)};
    r.params.ignore_eos = true;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

constexpr int kVocab = 64;
constexpr int kExperts = 256;
constexpr int kTopK = 8;
constexpr int kLayers = 3;

using Counts = fake::ExpertCounts;
using Log = fake::ExpertLoadLog;  // what the fake model was asked and what it reported

// Routes each token at each of kLayers layers to kTopK experts drawn from Zipf(1) over kExperts (rank i with weight
// 1 / (i + 1)); at layer 0 the hot experts are 0, 1, 2, ... (all on the first rank of a contiguous split), at the
// other layers a rotation of them. Greedy continuation: a fixed function of the last token.
class ZipfModel : public fake::ZipfRoutingModel {
 public:
  explicit ZipfModel(std::shared_ptr<Log> log)
      : ZipfRoutingModel({.vocab = kVocab, .experts = kExperts, .top_k = kTopK, .layers = kLayers, .exponent = 1.0},
                         std::move(log)) {}

 protected:
  int64_t expert_shift(int64_t, int layer) const override { return layer * 45; }
};

EngineOptions fake_options(int expert_parallel, int window, int redundant) {
  EngineOptions o;
  o.threaded = false;  // every step (and its statistics) completes before generate() returns
  o.state_memory_bytes = 1ull << 30;
  o.max_batch_tokens = 16;
  o.prefill_chunk = 8;
  o.expert_parallel = expert_parallel;
  o.eplb_window_steps = window;
  o.eplb_redundant_experts = redundant;
  return o;
}

std::unique_ptr<Engine> fake_engine(const EngineOptions& o, std::shared_ptr<Log> log) {
  auto core = std::make_shared<EngineCore>(o, std::make_unique<ZipfModel>(std::move(log)), nullptr);
  core->set_self(core);
  return std::make_unique<Engine>(std::move(core));
}

std::vector<Request> fake_requests(int n, int prompt_len, int max_tokens) {
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> prompt;
    for (int t = 0; t < prompt_len; ++t) prompt.push_back(2 + (i * 11 + t * 3) % 18);
    Request r{prompt, "", SamplingParams::greedy(max_tokens)};
    r.params.ignore_eos = true;
    out.push_back(std::move(r));
  }
  return out;
}

// sum over layers of the slowest rank / sum of the ranks' mean, expert e on rank e / (experts / ranks).
double contiguous_moe_lb(const std::vector<std::vector<double>>& load, int ranks) {
  double slowest = 0, mean = 0;
  for (const std::vector<double>& layer : load) {
    const size_t per_rank = layer.size() / size_t(ranks);
    double top = 0, total = 0;
    for (int r = 0; r < ranks; ++r) {
      double x = 0;
      for (size_t e = size_t(r) * per_rank; e < size_t(r + 1) * per_rank; ++e) x += layer[e];
      top = std::max(top, x);
      total += x;
    }
    slowest += top;
    mean += total / ranks;
  }
  return slowest / mean;
}

TEST(EplbStats, ContiguousMoeLbIsTheFormulaOverTheWindow) {
  const int ranks = 8, window = 5, redundant = 32;
  auto log = std::make_shared<Log>();
  auto engine = fake_engine(fake_options(ranks, window, redundant), log);
  const std::vector<RequestOutput> outs = engine->generate(fake_requests(6, 12, 10));
  for (const RequestOutput& o : outs) ASSERT_EQ(o.token_ids.size(), 10u) << o.message;
  const EngineStats st = engine->stats();

  EXPECT_EQ(log->set_calls, 1);
  // One drain per step; the window holds the last `window` steps' tables.
  ASSERT_EQ(log->takes.size(), st.steps);
  ASSERT_GT(st.steps, uint64_t(window));
  std::vector<std::vector<double>> load(kLayers, std::vector<double>(kExperts, 0.0));
  double pairs = 0;
  for (size_t s = log->takes.size() - window; s < log->takes.size(); ++s)
    for (int l = 0; l < kLayers; ++l)
      for (int e = 0; e < kExperts; ++e) {
        load[size_t(l)][size_t(e)] += double(log->takes[s][size_t(l)][size_t(e)]);
        pairs += double(log->takes[s][size_t(l)][size_t(e)]);
      }
  // Each step's tables hold kTopK pairs per token and layer: the steps' tokens are 16 per full step.
  double all_pairs = 0;
  for (const Counts& c : log->takes)
    for (const auto& layer : c) all_pairs += double(std::accumulate(layer.begin(), layer.end(), int64_t(0)));
  EXPECT_EQ(all_pairs, double(st.prefill_tokens + st.decode_tokens) * kTopK * kLayers);

  EXPECT_EQ(st.eplb_window_steps, uint64_t(window));
  EXPECT_EQ(double(st.eplb_window_pairs), pairs);
  const double expected = contiguous_moe_lb(load, ranks);
  EXPECT_GT(expected, 1.5);  // Zipf(1) with the hot experts together is far from balanced
  EXPECT_NEAR(st.moe_lb_contiguous, expected, 1e-12 * expected);
  EXPECT_GE(st.moe_lb_eplb, 1.0);
  EXPECT_LE(st.moe_lb_eplb, st.moe_lb_contiguous);
  std::printf("[eplb] %llu steps, window %llu steps / %llu pairs: moe_lb contiguous %.4f, EPLB (+%d) %.4f\n",
              (unsigned long long)st.steps, (unsigned long long)st.eplb_window_steps,
              (unsigned long long)st.eplb_window_pairs, st.moe_lb_contiguous, redundant, st.moe_lb_eplb);
}

TEST(EplbStats, EplbWithRedundantSlotsBalancesZipf) {
  // 256 experts / 8 ranks, 32 redundant slots, the whole run in the window.
  auto log = std::make_shared<Log>();
  auto engine = fake_engine(fake_options(8, 1000, 32), log);
  engine->generate(fake_requests(8, 40, 24));
  const EngineStats st = engine->stats();
  EXPECT_EQ(st.eplb_window_steps, st.steps);
  EXPECT_EQ(st.eplb_window_pairs, (st.prefill_tokens + st.decode_tokens) * kTopK * kLayers);
  std::vector<std::vector<double>> load(kLayers, std::vector<double>(kExperts, 0.0));
  for (const Counts& c : log->takes)
    for (int l = 0; l < kLayers; ++l)
      for (int e = 0; e < kExperts; ++e) load[size_t(l)][size_t(e)] += double(c[size_t(l)][size_t(e)]);
  EXPECT_NEAR(st.moe_lb_contiguous, contiguous_moe_lb(load, 8), 1e-12 * st.moe_lb_contiguous);
  EXPECT_GT(st.moe_lb_contiguous, 1.5);
  EXPECT_GE(st.moe_lb_eplb, 1.0);
  EXPECT_LE(st.moe_lb_eplb, st.moe_lb_contiguous);
  EXPECT_LT(st.moe_lb_eplb, 1.05);
  std::printf("[eplb] %llu pairs: moe_lb contiguous %.4f, EPLB (+32) %.4f\n",
              (unsigned long long)st.eplb_window_pairs, st.moe_lb_contiguous, st.moe_lb_eplb);
}

TEST(EplbStats, OneRankOrWindowZeroCountsNothing) {
  for (auto [ranks, window] : {std::pair{1, 128}, std::pair{8, 0}}) {
    auto log = std::make_shared<Log>();
    auto engine = fake_engine(fake_options(ranks, window, 0), log);
    engine->generate(fake_requests(2, 6, 4));
    const EngineStats st = engine->stats();
    EXPECT_GT(st.steps, 0u);
    EXPECT_EQ(log->set_calls, 0) << ranks << " ranks, window " << window;
    EXPECT_EQ(log->take_calls, 0);
    EXPECT_EQ(st.moe_lb_contiguous, 1.0);
    EXPECT_EQ(st.moe_lb_eplb, 1.0);
    EXPECT_EQ(st.eplb_window_steps, 0u);
    EXPECT_EQ(st.eplb_window_pairs, 0u);
  }
}

TEST(EplbStats, BadOptionsAreRejected) {
  auto log = std::make_shared<Log>();
  EXPECT_THROW(fake_engine(fake_options(0, 128, 0), log), Error);
  EXPECT_THROW(fake_engine(fake_options(8, -1, 0), log), Error);
  EXPECT_THROW(fake_engine(fake_options(8, 128, -8), log), Error);
  EXPECT_THROW(fake_engine(fake_options(8, 128, 3), log), Error);   // 259 slots over 8 ranks
  EXPECT_THROW(fake_engine(fake_options(3, 128, 0), log), Error);   // 256 experts over 3 ranks
  EXPECT_NO_THROW(fake_engine(fake_options(8, 128, 8), log));
  // A data-parallel group rejects them too.
  EngineOptions o = fake_options(3, 128, 0);
  o.threaded = true;
  o.data_parallel = 2;
  EXPECT_THROW(runtime::make_data_parallel_engine(o, [&](int) { return std::make_unique<ZipfModel>(log); }), Error);
}

// A data-parallel group keeps one window for all its ranks (the placement it judges is the group's): its load must
// be, for every layer and expert, the sum of the tables every rank's model handed over for the window's lockstep
// steps (each model logs its tables with the step they belong to), and its moe_lb the formula of that sum. With a
// window of the whole run and one of 4 steps, on 2 and 3 ranks.
TEST(EplbStats, DataParallelGroupSumsItsRanksCounts) {
  for (int ranks : {2, 3})
    for (int window : {1000, 4}) {
      SCOPED_TRACE(std::to_string(ranks) + " ranks, window " + std::to_string(window));
      EngineOptions o = fake_options(8, window, 32);
      o.threaded = true;
      o.data_parallel = ranks;
      std::vector<std::shared_ptr<Log>> logs;
      for (int r = 0; r < ranks; ++r) logs.push_back(std::make_shared<Log>());
      EngineStats st;
      std::vector<std::vector<double>> group_load;
      {
        runtime::DataParallelGroup group(o, [&](int r) { return std::make_unique<ZipfModel>(logs[size_t(r)]); });
        ASSERT_NE(group.expert_loads(), nullptr);
        std::vector<RequestStream> streams;
        for (Request& r : fake_requests(9, 12, 10)) streams.push_back(group.submit(std::move(r)));
        for (RequestStream& s : streams) ASSERT_EQ(s.collect().token_ids.size(), 10u);
        // Every rank records once per lockstep step (with rows of its own or without), after the step's events:
        // wait for the last step's records.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (group.expert_loads()->records() < group.stats().steps * uint64_t(ranks) &&
               std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        st = group.stats();
        EXPECT_EQ(group.expert_loads()->records(), st.steps * uint64_t(ranks));
        group_load = group.expert_loads()->load();
      }  // the ranks' threads are gone: the logs are complete

      // The window's steps: the last `window` lockstep steps that any rank logged a table for.
      std::set<uint64_t> steps;
      for (const auto& log : logs) {
        EXPECT_EQ(log->set_calls, 1);
        ASSERT_EQ(log->take_steps.size(), log->takes.size());
        steps.insert(log->take_steps.begin(), log->take_steps.end());
      }
      ASSERT_EQ(steps.size(), st.steps);
      EXPECT_EQ(*steps.begin(), 1u);
      EXPECT_EQ(*steps.rbegin(), st.steps);
      const uint64_t first = st.steps > uint64_t(window) ? st.steps - uint64_t(window) + 1 : 1;
      std::vector<std::vector<double>> expected(kLayers, std::vector<double>(kExperts, 0.0));
      std::vector<double> rank_pairs(size_t(ranks), 0.0);
      double pairs = 0, all_pairs = 0;
      for (int r = 0; r < ranks; ++r) {
        const Log& log = *logs[size_t(r)];
        for (size_t t = 0; t < log.takes.size(); ++t)
          for (int l = 0; l < kLayers; ++l)
            for (int e = 0; e < kExperts; ++e) {
              const double x = double(log.takes[t][size_t(l)][size_t(e)]);
              all_pairs += x;
              if (log.take_steps[t] < first) continue;
              expected[size_t(l)][size_t(e)] += x;
              rank_pairs[size_t(r)] += x;
              pairs += x;
            }
      }
      // Every pair of every token counted once: kTopK per token and layer.
      EXPECT_EQ(all_pairs, double(st.prefill_tokens + st.decode_tokens) * kTopK * kLayers);
      ASSERT_EQ(group_load.size(), size_t(kLayers));
      int differing = 0;
      for (int l = 0; l < kLayers; ++l)
        for (int e = 0; e < kExperts; ++e)
          differing += group_load[size_t(l)][size_t(e)] != expected[size_t(l)][size_t(e)];
      EXPECT_EQ(differing, 0) << "of " << kLayers * kExperts << " (layer, expert) loads";
      // The sum is not one rank's: with the whole run in the window every rank contributed.
      if (window >= int(st.steps)) {
        for (int r = 0; r < ranks; ++r) EXPECT_GT(rank_pairs[size_t(r)], 0.0) << "rank " << r;
      }
      EXPECT_EQ(st.eplb_window_steps, std::min<uint64_t>(st.steps, uint64_t(window)));
      EXPECT_EQ(double(st.eplb_window_pairs), pairs);
      const double lb = contiguous_moe_lb(expected, 8);
      EXPECT_NEAR(st.moe_lb_contiguous, lb, 1e-12 * lb);
      EXPECT_GE(st.moe_lb_eplb, 1.0);
      EXPECT_LE(st.moe_lb_eplb, st.moe_lb_contiguous);
      std::printf("[eplb dp%d window %d] %llu lockstep steps, window %llu steps / %llu pairs (ranks:", ranks, window,
                  (unsigned long long)st.steps, (unsigned long long)st.eplb_window_steps,
                  (unsigned long long)st.eplb_window_pairs);
      for (double x : rank_pairs) std::printf(" %.0f", x);
      std::printf("): moe_lb contiguous %.4f, EPLB (+32) %.4f\n", st.moe_lb_contiguous, st.moe_lb_eplb);
    }
}

// The CPU reference models: every MoE layer (V4's hash-routed first layer included) counts top_k pairs per token.
TEST(EplbStats, CpuModelsCountTopKPairsPerTokenAndLayer) {
  for (const char* name : {"v4_tiny", "v41_tiny"}) {
    ModelOptions mo;
    mo.show_progress = false;
    std::unique_ptr<Model> model = load_model(kFixtures + name, mo);
    const ModelConfig& c = model->config();
    EXPECT_FALSE(model->take_expert_loads().has_value()) << name << ": counting is off by default";
    model->set_expert_load_counting(true);
    auto seq = model->new_sequence();
    const std::vector<int32_t> prompt{5, 17, 99, 3, 250, 41, 7, 8, 300, 12, 64};
    model->forward(*seq, prompt);
    for (int32_t t : {33, 44, 55}) model->forward(*seq, std::vector<int32_t>{t});
    std::optional<Counts> counts = model->take_expert_loads();
    ASSERT_TRUE(counts.has_value()) << name;
    ASSERT_EQ(counts->size(), c.layers.size()) << name;
    for (size_t l = 0; l < counts->size(); ++l) {
      ASSERT_EQ(int((*counts)[l].size()), c.n_routed_experts);
      EXPECT_EQ(std::accumulate((*counts)[l].begin(), (*counts)[l].end(), int64_t(0)), 14 * c.n_experts_per_tok)
          << name << " layer " << l;
    }
    // Drained: the next take starts from zero.
    counts = model->take_expert_loads();
    ASSERT_TRUE(counts.has_value());
    for (const auto& layer : *counts) EXPECT_EQ(std::accumulate(layer.begin(), layer.end(), int64_t(0)), 0);
  }
}

TEST(EplbStats, EngineOnV4TinyCountsEveryStepsTokens) {
  EngineOptions o = v4_tiny_eplb_options(100000);
  o.threaded = false;
  auto engine = Engine::create(o);
  engine->generate(v4_tiny_eplb_requests(3));
  const EngineStats st = engine->stats();
  const uint64_t layers = 4, top_k = 2;  // v4_tiny/config.json
  EXPECT_EQ(st.eplb_window_steps, st.steps);
  EXPECT_EQ(st.eplb_window_pairs, (st.prefill_tokens + st.decode_tokens) * top_k * layers);
  EXPECT_GE(st.moe_lb_contiguous, 1.0);
  EXPECT_GE(st.moe_lb_eplb, 1.0);
  std::printf("[eplb] v4_tiny, 2 ranks: %llu steps, %llu pairs, moe_lb contiguous %.4f, EPLB (+2) %.4f\n",
              (unsigned long long)st.steps, (unsigned long long)st.eplb_window_pairs, st.moe_lb_contiguous,
              st.moe_lb_eplb);
}

// The data-parallel engine on v4_tiny (two CPU ranks): Engine::stats reports the group's window, which holds every
// routed pair of both ranks' tokens (top_k per token and MoE layer). A rank may add its last step's counts just after
// the caller got the last event: the statistics are read until they settle (or the deadline).
TEST(EplbStats, DataParallelEngineOnV4TinyCountsEveryRanksTokens) {
  EngineOptions o = v4_tiny_eplb_options(1000);
  o.data_parallel = 2;
  auto engine = Engine::create(o);
  engine->generate(v4_tiny_eplb_requests(6));
  const uint64_t layers = 4, top_k = 2;  // v4_tiny/config.json
  EngineStats st;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    st = engine->stats();
    if (st.ranks.size() == 2 && st.ranks[0].steps == st.steps && st.ranks[1].steps == st.steps &&
        st.eplb_window_pairs == (st.prefill_tokens + st.decode_tokens) * top_k * layers)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } while (std::chrono::steady_clock::now() < deadline);
  ASSERT_EQ(st.ranks.size(), 2u);
  EXPECT_GT(st.ranks[0].requests, 0u);
  EXPECT_GT(st.ranks[1].requests, 0u);
  EXPECT_EQ(st.prefill_tokens + st.decode_tokens, 6u * (10 + 6) - 6u);  // the last token of each is never fed
  EXPECT_EQ(st.eplb_window_steps, st.steps);
  EXPECT_EQ(st.eplb_window_pairs, (st.prefill_tokens + st.decode_tokens) * top_k * layers);
  EXPECT_GE(st.moe_lb_contiguous, 1.0);
  EXPECT_GE(st.moe_lb_eplb, 1.0);
  std::printf("[eplb] v4_tiny, data-parallel 2, 2 EP ranks: %llu lockstep steps, %llu pairs, moe_lb contiguous %.4f, "
              "EPLB (+2) %.4f\n", (unsigned long long)st.steps, (unsigned long long)st.eplb_window_pairs,
              st.moe_lb_contiguous, st.moe_lb_eplb);
}

}  // namespace
}  // namespace deepinfer
