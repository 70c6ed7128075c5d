// The data-parallel engine (src/runtime/data_parallel.h, docs/data_parallel.md) on the CPU: two ranks give every
// request the one-rank engine's tokens and logprobs (bitwise), admission balances by cached tokens, every rank takes
// part in every step with the group's rows per rank, and a cancellation or a failure on one rank ends only that
// request.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "common/mixed_requests.h"
#include "deepinfer/engine.h"
#include "model/model.h"
#include "runtime/data_parallel.h"
#include "fake_model_parts.h"

namespace deepinfer {
namespace {

using fake::FakeState;

using testing::mixed_requests;
using testing::random_prompt;

const std::string kModel = std::string(DEEPINFER_SOURCE_DIR) + "/tests/golden/fixtures/v4_tiny";

// ---------------------------------------------------------------------------------------------------------
// A fake model whose steps are recorded: what each lockstep step told it (the group's rows per rank) and how many
// rows it then fed itself. Its greedy continuation is a fixed function of the last token.

struct StepRecord {
  int group_rows = 0;
  int rows = 0;
};

struct Recorder {
  std::vector<StepRecord> steps;  // written by the rank's thread only, read after the engine is gone
};

// Holds every forward until opened (admission tests: no token is produced while requests are submitted).
struct Gate {
  std::mutex mutex;
  std::condition_variable cv;
  bool open = true;
  void wait() {
    std::unique_lock<std::mutex> lk(mutex);
    cv.wait(lk, [&] { return open; });
  }
  void set(bool o) {
    {
      std::lock_guard<std::mutex> lk(mutex);
      open = o;
    }
    cv.notify_all();
  }
};

constexpr int kFakeVocab = 64;
constexpr int32_t kPoison = 13;  // a prompt holding it fails in the forward

int32_t fake_next(int32_t token) { return 20 + (token * 5 + 3) % (kFakeVocab - 20); }

class RecordingModel : public Model {
 public:
  RecordingModel(std::shared_ptr<Recorder> recorder, std::shared_ptr<Gate> gate)
      : recorder_(std::move(recorder)), gate_(std::move(gate)) {
    config_.vocab_size = kFakeVocab;
    config_.eos_token_id = 1;
  }
  const ModelConfig& config() const override { return config_; }
  std::unique_ptr<SequenceState> new_sequence() const override { return std::make_unique<FakeState>(); }
  Tensor forward(SequenceState& state, std::span<const int32_t> tokens) const override {
    if (gate_) gate_->wait();
    // Every forward belongs to a lockstep step that set_group_rows opened.
    EXPECT_FALSE(recorder_->steps.empty());
    if (!recorder_->steps.empty()) recorder_->steps.back().rows += int(tokens.size());
    for (int32_t t : tokens)
      if (t == kPoison) throw Error("poisoned token");
    static_cast<FakeState&>(state).length_ += int64_t(tokens.size());
    Tensor logits({int64_t(tokens.size()), kFakeVocab}, 0.0f);
    for (size_t r = 0; r < tokens.size(); ++r) logits.row(int64_t(r))[fake_next(tokens[r])] = 1.0f;
    return logits;
  }
  void set_group_rows(int rows_per_rank) const override { recorder_->steps.push_back({rows_per_rank, 0}); }

 private:
  ModelConfig config_;
  std::shared_ptr<Recorder> recorder_;
  std::shared_ptr<Gate> gate_;
};

EngineOptions fake_options(int ranks) {
  EngineOptions o;
  o.data_parallel = ranks;
  o.state_memory_bytes = 1ull << 30;  // what Engine::create would fill in
  o.max_batch_tokens = 16;
  o.prefill_chunk = 8;
  return o;
}

struct FakeGroup {
  std::vector<std::shared_ptr<Recorder>> recorders;
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  std::unique_ptr<Engine> engine;
  explicit FakeGroup(const EngineOptions& o) {
    for (int r = 0; r < o.data_parallel; ++r) recorders.push_back(std::make_shared<Recorder>());
    engine = runtime::make_data_parallel_engine(
        o, [&](int rank) { return std::make_unique<RecordingModel>(recorders[size_t(rank)], gate); });
  }
};

std::vector<int32_t> fake_greedy(const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> out;
  int32_t t = prompt.back();
  for (int i = 0; i < n; ++i) out.push_back(t = fake_next(t));
  return out;
}

Request fake_request(std::vector<int32_t> prompt, int max_tokens) {
  Request r{std::move(prompt), "", SamplingParams::greedy(max_tokens)};
  r.params.ignore_eos = true;
  return r;
}

// Prompt tokens below the fake's outputs and the poison.
std::vector<int32_t> clean_prompt(std::mt19937& rng, int len) { return random_prompt(rng, len, kPoison); }

// The statistics once every rank has counted the last step: a rank that joins a step can count it just after
// another rank's last event of that step reached the caller.
EngineStats settled_stats(const Engine& engine) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    EngineStats st = engine.stats();
    bool settled = true;
    for (const auto& r : st.ranks) settled = settled && r.steps == st.steps;
    if (settled || std::chrono::steady_clock::now() > deadline) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

int rank_of(const RequestStream& s, int ranks) { return int(s.handle().slot % uint32_t(ranks)); }

// ---------------------------------------------------------------------------------------------------------
// (a) Two ranks, the one-rank engine's outputs.

// ~40 mixed requests (greedy and seeded sampling, penalties, stops, logprobs, a few invalid ones) on two ranks and on
// one: the same tokens, finish reasons and (batch-invariant mode) logprobs bit for bit; the second run is the
// default mode with asynchronous scheduling (the CPU model is batch-independent: the same tokens too).
TEST(DataParallel, TwoRanksGiveTheOneRankOutputs) {
  const auto mixed = mixed_requests(40, 17, 512);
  std::vector<Request> reqs;
  for (const auto& m : mixed) reqs.push_back(m.request);
  for (bool batch_invariant : {true, false}) {
    SCOPED_TRACE(batch_invariant ? "batch-invariant" : "default mode, asynchronous scheduling");
    EngineOptions o;
    o.model = kModel;
    o.batch_invariant = batch_invariant;
    o.max_batch_tokens = 64;
    o.prefill_chunk = 16;
    o.max_num_seqs = 16;
    const std::vector<RequestOutput> one = Engine::create(o)->generate(reqs);
    o.data_parallel = 2;
    auto dp = Engine::create(o);
    const std::vector<RequestOutput> two = dp->generate(reqs);
    const EngineStats st = settled_stats(*dp);
    ASSERT_EQ(one.size(), two.size());
    int accepted = 0, sampled = 0;
    for (size_t i = 0; i < one.size(); ++i) {
      SCOPED_TRACE("request " + std::to_string(i));
      EXPECT_EQ(two[i].request_id, one[i].request_id);
      EXPECT_EQ(two[i].token_ids, one[i].token_ids);
      EXPECT_EQ(two[i].finish_reason, one[i].finish_reason);
      ASSERT_EQ(two[i].logprobs.size(), one[i].logprobs.size());
      for (size_t k = 0; k < one[i].logprobs.size(); ++k)  // bitwise
        EXPECT_EQ(std::memcmp(&two[i].logprobs[k].logprob, &one[i].logprobs[k].logprob, sizeof(float)), 0);
      accepted += one[i].finish_reason != FinishReason::Rejected;
      sampled += reqs[i].params.temperature > 0 && one[i].finish_reason != FinishReason::Rejected;
    }
    EXPECT_GT(sampled, 10);
    ASSERT_EQ(st.ranks.size(), 2u);
    EXPECT_EQ(st.ranks[0].requests + st.ranks[1].requests, uint64_t(accepted));
    EXPECT_GT(st.ranks[0].requests, 0u);
    EXPECT_GT(st.ranks[1].requests, 0u);
    EXPECT_EQ(st.ranks[0].steps, st.ranks[1].steps);
    EXPECT_EQ(st.steps, st.ranks[0].steps);
    EXPECT_EQ(st.ranks[0].prefill_tokens + st.ranks[1].prefill_tokens, st.prefill_tokens);
    std::printf("[dp2 %s] %d requests: rank requests %llu / %llu, prefill tokens %llu / %llu, decode tokens %llu / "
                "%llu, %llu lockstep steps (joined empty %llu / %llu)\n",
                batch_invariant ? "batch-invariant" : "default", accepted, (unsigned long long)st.ranks[0].requests,
                (unsigned long long)st.ranks[1].requests, (unsigned long long)st.ranks[0].prefill_tokens,
                (unsigned long long)st.ranks[1].prefill_tokens, (unsigned long long)st.ranks[0].decode_tokens,
                (unsigned long long)st.ranks[1].decode_tokens, (unsigned long long)st.steps,
                (unsigned long long)st.ranks[0].empty_steps, (unsigned long long)st.ranks[1].empty_steps);
  }
}

// ---------------------------------------------------------------------------------------------------------
// (b) Admission.

TEST(DataParallel, AdmissionPolicy) {
  using runtime::admission_rank;
  using runtime::RankLoad;
  std::vector<RankLoad> loads = {{0, 0}, {0, 0}, {0, 0}};
  EXPECT_EQ(admission_rank(loads), 0);  // ties: the lowest rank
  loads = {{100, 1}, {40, 3}, {40, 3}};
  EXPECT_EQ(admission_rank(loads), 1);  // least cached tokens first, whatever the request counts
  loads = {{40, 3}, {40, 2}, {41, 0}};
  EXPECT_EQ(admission_rank(loads), 1);  // equal tokens: the fewest requests
  loads = {{7, 1}};
  EXPECT_EQ(admission_rank(loads), 0);
}

// With the models held (no token is produced while submitting), equal requests alternate between the ranks, and a
// short request goes where the cached tokens are fewest, not where the requests are.
TEST(DataParallel, AdmissionBalancesCachedTokens) {
  for (int ranks : {2, 3}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    FakeGroup g(fake_options(ranks));
    g.gate->set(false);
    std::mt19937 rng(5);
    std::vector<RequestStream> streams;
    std::vector<int> per_rank(size_t(ranks), 0);
    for (int i = 0; i < 41; ++i) {
      streams.push_back(g.engine->submit(fake_request(clean_prompt(rng, 12), 4)));
      ++per_rank[size_t(rank_of(streams.back(), ranks))];
    }
    const int even = 41 / ranks;
    for (int r = 0; r < ranks; ++r) {
      EXPECT_GE(per_rank[size_t(r)], even) << "rank " << r;
      EXPECT_LE(per_rank[size_t(r)], even + 1) << "rank " << r;
    }
    g.gate->set(true);
    for (auto& s : streams) EXPECT_EQ(s.collect().finish_reason, FinishReason::Length);
    const EngineStats st = g.engine->stats();
    for (int r = 0; r < ranks; ++r) EXPECT_EQ(st.ranks[size_t(r)].requests, uint64_t(per_rank[size_t(r)]));
  }

  // Long prompts: rank 0 takes a 200-token prompt; the short ones then all go to rank 1 (fewer tokens there, though
  // more requests) until it holds more tokens than rank 0.
  FakeGroup g(fake_options(2));
  g.gate->set(false);
  std::vector<RequestStream> streams;
  std::mt19937 rng(9);
  auto submit = [&](int len) {
    streams.push_back(g.engine->submit(fake_request(clean_prompt(rng, len), 2)));
    return rank_of(streams.back(), 2);
  };
  // Cached tokens (requests) of rank 0 | rank 1 after each submission in the comments.
  EXPECT_EQ(submit(200), 0);                                                     // 200 (1) | 0 (0)
  for (int i = 0; i < 4; ++i) EXPECT_EQ(submit(40), 1) << "short request " << i;  // 200 (1) | 160 (4)
  EXPECT_EQ(submit(40), 1);                                                      // 200 (1) | 200 (5)
  EXPECT_EQ(submit(40), 0);  // equal tokens, fewer requests: 240 (2) | 200 (5)
  EXPECT_EQ(submit(10), 1);                                                      // 240 (2) | 210 (6)
  EXPECT_EQ(submit(300), 1);                                                     // 240 (2) | 510 (7)
  EXPECT_EQ(submit(10), 0);
  g.gate->set(true);
  for (auto& s : streams) EXPECT_EQ(s.collect().finish_reason, FinishReason::Length);
}

// ---------------------------------------------------------------------------------------------------------
// (c) Lockstep.

// Every rank's model sees the same sequence of steps with the same group rows, equal to the most rows any rank fed
// in that step, including steps where a rank had no rows of its own (one long request alone, then an uneven mix).
TEST(DataParallel, EveryRankJoinsEveryStepWithTheGroupRows) {
  for (bool async : {false, true}) {
    SCOPED_TRACE(async ? "asynchronous scheduling" : "synchronous scheduling");
    EngineOptions o = fake_options(2);
    o.async_scheduling = async;
    FakeGroup g(o);
    // Alone: rank 1 joins every step without rows.
    RequestOutput alone = g.engine->submit(fake_request({3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 12)).collect();
    EXPECT_EQ(alone.token_ids, fake_greedy({12}, 12));
    // Uneven: prompts of 1 ... 30 tokens, outputs of 1 ... 20.
    std::mt19937 rng(2);
    std::vector<Request> reqs;
    for (int i = 0; i < 9; ++i) reqs.push_back(fake_request(clean_prompt(rng, 1 + int(rng() % 30)), 1 + int(rng() % 20)));
    for (const RequestOutput& out : g.engine->generate(reqs))
      EXPECT_EQ(out.token_ids, fake_greedy({out.prompt_token_ids.back()}, int(out.token_ids.size())));
    const EngineStats st = settled_stats(*g.engine);
    g.engine.reset();  // the rank threads are gone: the records are complete

    const std::vector<StepRecord>& a = g.recorders[0]->steps;
    const std::vector<StepRecord>& b = g.recorders[1]->steps;
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GT(a.size(), 12u);
    int one_empty = 0;
    for (size_t s = 0; s < a.size(); ++s) {
      SCOPED_TRACE("step " + std::to_string(s));
      EXPECT_EQ(a[s].group_rows, b[s].group_rows);
      EXPECT_EQ(std::max(a[s].rows, b[s].rows), a[s].group_rows);
      EXPECT_GT(a[s].group_rows, 0);
      one_empty += (a[s].rows == 0) != (b[s].rows == 0);
    }
    EXPECT_GE(one_empty, 12);  // at least the lone request's steps
    ASSERT_EQ(st.ranks.size(), 2u);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(st.ranks[r].steps, a.size());
      const auto& rec = g.recorders[r]->steps;
      EXPECT_EQ(st.ranks[r].empty_steps, uint64_t(std::count_if(rec.begin(), rec.end(), [](const StepRecord& x) {
                                           return x.rows == 0;
                                         })));
    }
    std::printf("[lockstep %s] %zu steps, %d with one rank empty; rank 1 joined %llu steps without rows\n",
                async ? "async" : "sync", a.size(), one_empty, (unsigned long long)st.ranks[1].empty_steps);
  }
}

// ---------------------------------------------------------------------------------------------------------
// (d) Cancellation and errors.

// On two ranks: a request whose forward fails and a request cancelled mid-stream end alone; the others (on both
// ranks, including the failing request's rank) finish with their full greedy outputs. Synchronous scheduling: there
// the CPU executor fails one sequence's forward alone; an asynchronous step (one enqueue_sampled call) fails all of
// its rank's chunks together, as on one rank.
TEST(DataParallel, CancellationAndErrorsEndOnlyThatRequest) {
  EngineOptions o = fake_options(2);
  o.async_scheduling = false;
  FakeGroup g(o);
  std::vector<Request> reqs;
  for (int i = 0; i < 10; ++i) reqs.push_back(fake_request({int32_t(2 + i), int32_t(3 + i), 4}, 24));
  reqs[4].prompt_token_ids = {5, kPoison, 6};
  reqs[7].params.max_tokens = 1 << 20;  // ends only by the cancellation
  const size_t poisoned = 4, cancelled = 7;
  std::vector<RequestStream> streams;
  for (const Request& r : reqs) streams.push_back(g.engine->submit(r));
  Event e;
  ASSERT_TRUE(streams[cancelled].next(e));
  ASSERT_FALSE(e.terminal());
  EXPECT_TRUE(g.engine->cancel(streams[cancelled].handle()));
  std::vector<int> finished_on(2, 0);
  for (size_t i = 0; i < streams.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    RequestOutput out = streams[i].collect();
    if (i == poisoned) {
      EXPECT_EQ(out.finish_reason, FinishReason::Error);
      EXPECT_NE(out.message.find("poisoned token"), std::string::npos) << out.message;
      EXPECT_TRUE(out.token_ids.empty());
    } else if (i == cancelled) {
      EXPECT_EQ(out.finish_reason, FinishReason::Cancelled);
      EXPECT_LT(e.token_ids.size() + out.token_ids.size(), size_t(1 << 20));
    } else {
      EXPECT_EQ(out.finish_reason, FinishReason::Length);
      EXPECT_EQ(out.token_ids, fake_greedy(reqs[i].prompt_token_ids, 24));
      ++finished_on[size_t(rank_of(streams[i], 2))];
    }
  }
  EXPECT_GT(finished_on[size_t(rank_of(streams[poisoned], 2))], 0);
  EXPECT_GT(finished_on[size_t(rank_of(streams[cancelled], 2))], 0);
  EXPECT_FALSE(g.engine->cancel(streams[cancelled].handle()));  // stale now
  // The group still serves after both.
  EXPECT_EQ(g.engine->submit(fake_request({9, 9}, 3)).collect().token_ids, fake_greedy({9}, 3));
}

// Submissions from several threads at once: unique ids, every request on exactly one rank, all outputs right.
TEST(DataParallel, ConcurrentSubmissions) {
  FakeGroup g(fake_options(2));
  constexpr int kThreads = 4, kEach = 25;
  std::vector<std::vector<RequestOutput>> outs(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      std::vector<Request> reqs;
      for (int i = 0; i < kEach; ++i) reqs.push_back(fake_request(clean_prompt(rng, 1 + int(rng() % 20)), 1 + i % 7));
      outs[size_t(t)] = g.engine->generate(reqs);
    });
  for (auto& th : threads) th.join();
  std::vector<uint64_t> ids;
  for (const auto& per_thread : outs)
    for (const RequestOutput& o : per_thread) {
      ids.push_back(o.request_id);
      EXPECT_EQ(o.finish_reason, FinishReason::Length);
      EXPECT_EQ(o.token_ids, fake_greedy(o.prompt_token_ids, int(o.token_ids.size())));
    }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end());
  EXPECT_EQ(ids.front(), 1u);
  EXPECT_EQ(ids.back(), uint64_t(kThreads * kEach));
  const EngineStats st = settled_stats(*g.engine);
  EXPECT_EQ(st.ranks[0].requests + st.ranks[1].requests, uint64_t(kThreads * kEach));
}

// Shutdown with every rank busy, with one rank idle (it joins the other's steps), and with both idle: every loop
// leaves (no rank is left waiting in the barrier) and every request ends once, cancelled.
TEST(DataParallel, ShutdownEndsEveryRequestOnce) {
  for (int running : {6, 1, 0}) {
    SCOPED_TRACE(std::to_string(running) + " requests running");
    std::vector<RequestStream> streams;
    {
      FakeGroup g(fake_options(2));
      for (int i = 0; i < running; ++i) streams.push_back(g.engine->submit(fake_request({int32_t(2 + i), 3}, 1 << 20)));
      for (auto& s : streams) {
        Event e;
        ASSERT_TRUE(s.next(e));
      }
    }  // the engine goes away with requests running
    for (auto& s : streams) {
      RequestOutput out = s.collect();
      EXPECT_EQ(out.finish_reason, FinishReason::Cancelled);
      s.cancel();  // harmless after the engine is gone
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Options.

TEST(DataParallel, OptionsAreValidated) {
  auto error_of = [](EngineOptions o) -> std::string {
    try {
      Engine::create(o);
    } catch (const Error& e) {
      return e.what();
    }
    return {};
  };
  EngineOptions o;
  o.model = kModel;
  o.data_parallel = 0;
  EXPECT_NE(error_of(o).find("EngineOptions.data_parallel: 0 ranks; must be >= 1"), std::string::npos) << error_of(o);
  o.data_parallel = 2;
  o.threaded = false;
  EXPECT_NE(error_of(o).find("threaded = false"), std::string::npos) << error_of(o);
  o.threaded = true;
  o.device = "cuda";
  EXPECT_NE(error_of(o).find("not supported yet"), std::string::npos) << error_of(o);
  // One rank is the one-rank engine: no per-rank statistics.
  o.device = "cpu";
  o.data_parallel = 1;
  auto engine = Engine::create(o);
  engine->submit({{3, 4}, "", SamplingParams::greedy(2)}).collect();
  EXPECT_TRUE(engine->stats().ranks.empty());
}

}  // namespace
}  // namespace deepinfer
