// EPLB rebalancing in the data-parallel engine (EngineOptions::eplb_rebalance_steps; docs/parallel.md "The engine's
// rebalancing"). A fake model that places its experts (Model::expert_placement) routes every token to Zipf-skewed
// experts whose hot set drifts with the position, logs the counts it hands the engine with their lockstep step, and
// logs every Model::rebalance_experts call with the step it came before. The expected rebalances are simulated here
// from those logs alone: the group's window summed from every rank's tables, the planner's placement of it
// (parallel::eplb_placement, aligned to the current one), and the gain rule with this file's own moe_lb. With thread
// ranks (data_parallel 2, 3) and with ranks as processes (ProcessGroup over loopback, 2 and 3 ranks): every rank
// moves to the same placement before the same lockstep step, at the cadence, as the simulation says; none when off or
// below the gain threshold; and the outputs do not change.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "deepinfer/engine.h"
#include "model/model.h"
#include "parallel/bootstrap.h"
#include "parallel/eplb.h"
#include "runtime/data_parallel.h"
#include "runtime/expert_loads.h"
#include "runtime/process_group.h"
#include "fake_model_parts.h"

namespace deepinfer {
namespace {


constexpr int kVocab = 64;
constexpr int kExperts = 48;
constexpr int kTopK = 4;
constexpr int kLayers = 3;

using Counts = fake::ExpertCounts;

// What the fake model reported (fake::ExpertLoadLog) and the placements it was moved to.
struct Log : fake::ExpertLoadLog {
  struct Move {
    uint64_t before_step;  // the lockstep step it came before (set_group_rows calls so far + 1)
    parallel::ExpertPlacement to;
  };
  std::vector<Move> moves;
};

// Zipf(1.2)-routed tokens whose hot experts start at 0 (all on rank 0 of the contiguous split) and move by 7 experts
// every 8 positions, so the best placement drifts and later windows may rebalance again. The outputs are a function
// of the token only: the placement never changes them.
class PlacedZipfModel : public fake::ZipfRoutingModel {
 public:
  PlacedZipfModel(std::shared_ptr<Log> log, int ranks)
      : ZipfRoutingModel({.vocab = kVocab, .experts = kExperts, .top_k = kTopK, .layers = kLayers, .exponent = 1.2},
                         log),
        log_(std::move(log)),
        placement_(parallel::contiguous_placement(kLayers, kExperts, ranks)) {}
  std::optional<parallel::ExpertPlacement> expert_placement() const override { return placement_; }
  size_t rebalance_experts(const parallel::ExpertPlacement& to) const override {
    if (to.ranks != placement_.ranks || to.experts != placement_.experts ||
        to.slots_per_rank != placement_.slots_per_rank || to.layers() != placement_.layers())
      throw Error("fake model: a placement of another shape");
    log_->moves.push_back({group_steps() + 1, to});
    placement_ = to;
    return 0;
  }

 protected:
  int64_t expert_shift(int64_t pos, int layer) const override { return (pos / 8) * 7 + layer * 5; }

 private:
  std::shared_ptr<Log> log_;
  mutable parallel::ExpertPlacement placement_;
};

EngineOptions rebalance_options(int ranks, int every, int window, double min_gain) {
  EngineOptions o;
  o.state_memory_bytes = 1ull << 30;
  o.max_batch_tokens = 16;
  o.prefill_chunk = 8;
  o.data_parallel = ranks;
  o.expert_parallel = ranks;
  o.eplb_window_steps = window;
  o.eplb_redundant_experts = 0;
  o.eplb_rebalance_steps = every;
  o.eplb_rebalance_min_gain = min_gain;
  return o;
}

std::vector<Request> requests(int n) {
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> prompt;
    for (int t = 0; t < 12 + i % 5; ++t) prompt.push_back(2 + (i * 11 + t * 3) % 18);
    Request r{prompt, "", SamplingParams::greedy(12 + i % 4)};
    r.params.ignore_eos = true;
    out.push_back(std::move(r));
  }
  return out;
}

// This file's moe_lb: sum over layers of the slowest rank's expected load / sum of the ranks' mean, an expert's load
// split evenly over its copies.
double moe_lb_of(const std::vector<std::vector<double>>& load, const parallel::ExpertPlacement& p) {
  double slowest = 0, mean = 0;
  for (int l = 0; l < p.layers(); ++l) {
    const std::vector<int32_t>& row = p.phy2log[size_t(l)];
    std::vector<int> copies(size_t(p.experts), 0);
    for (int32_t e : row) ++copies[size_t(e)];
    std::vector<double> rank(size_t(p.ranks), 0.0);
    for (size_t s = 0; s < row.size(); ++s)
      rank[s / size_t(p.slots_per_rank)] += load[size_t(l)][size_t(row[s])] / copies[size_t(row[s])];
    double total = 0;
    for (double x : rank) total += x;
    slowest += *std::max_element(rank.begin(), rank.end());
    mean += total / p.ranks;
  }
  return mean > 0 ? slowest / mean : 1.0;
}

struct Expected {
  std::vector<Log::Move> moves;
  uint64_t slots_moved = 0;
  parallel::ExpertPlacement final_placement;
  std::vector<std::vector<double>> final_window;
  uint64_t steps = 0;
};

// The rebalances the group should have made, from the ranks' logs: the window before step t (t = k * every + 1) is
// the sum of every rank's tables of steps t - window .. t - 1; the planner's placement of it, aligned to the current
// one; moved when it differs and lowers this file's moe_lb by at least min_gain (relative).
Expected simulate(const std::vector<std::shared_ptr<Log>>& logs, int ranks, int every, int window, double min_gain) {
  std::map<uint64_t, std::vector<std::vector<double>>> step_load;
  Expected x;
  for (const auto& log : logs)
    for (size_t i = 0; i < log->takes.size(); ++i) {
      auto& load = step_load[log->take_steps[i]];
      if (load.empty()) load.assign(kLayers, std::vector<double>(kExperts, 0.0));
      for (int l = 0; l < kLayers; ++l)
        for (int e = 0; e < kExperts; ++e) load[size_t(l)][size_t(e)] += double(log->takes[i][size_t(l)][size_t(e)]);
      x.steps = std::max(x.steps, log->take_steps[i]);
    }
  auto window_through = [&](uint64_t last) {
    std::vector<std::vector<double>> load(kLayers, std::vector<double>(kExperts, 0.0));
    for (uint64_t s = last >= uint64_t(window) ? last - uint64_t(window) + 1 : 1; s <= last; ++s)
      if (auto it = step_load.find(s); it != step_load.end())
        for (int l = 0; l < kLayers; ++l)
          for (int e = 0; e < kExperts; ++e) load[size_t(l)][size_t(e)] += it->second[size_t(l)][size_t(e)];
    return load;
  };
  parallel::ExpertPlacement current = parallel::contiguous_placement(kLayers, kExperts, ranks);
  for (uint64_t t = 2; t <= x.steps; ++t) {
    if ((t - 1) % uint64_t(every) != 0) continue;
    const std::vector<std::vector<double>> load = window_through(t - 1);
    double pairs = 0;
    for (const auto& layer : load)
      for (double v : layer) pairs += v;
    if (pairs == 0) continue;
    const parallel::ExpertPlacement next = parallel::eplb_placement(load, ranks, 0, &current);
    if (next.phy2log == current.phy2log) continue;
    const double before = moe_lb_of(load, current), after = moe_lb_of(load, next);
    if (before - after < min_gain * before) continue;
    for (int l = 0; l < kLayers; ++l)
      for (size_t s = 0; s < next.phy2log[size_t(l)].size(); ++s)
        x.slots_moved += next.phy2log[size_t(l)][s] != current.phy2log[size_t(l)][s];
    x.moves.push_back({t, next});
    current = next;
  }
  x.final_placement = current;
  x.final_window = window_through(x.steps);
  return x;
}

// Every rank's log of moves equals the simulation's (same steps, same placements).
void expect_moves(const std::vector<std::shared_ptr<Log>>& logs, const Expected& x) {
  for (size_t r = 0; r < logs.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const std::vector<Log::Move>& got = logs[r]->moves;
    ASSERT_EQ(got.size(), x.moves.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].before_step, x.moves[i].before_step) << "move " << i;
      EXPECT_TRUE(got[i].to.phy2log == x.moves[i].to.phy2log) << "move " << i;
    }
  }
}

uint64_t window_pairs(const std::vector<std::vector<double>>& load) {
  double pairs = 0;
  for (const auto& layer : load)
    for (double v : layer) pairs += v;
  return uint64_t(pairs);
}

struct GroupRun {
  std::vector<RequestOutput> outputs;
  EngineStats stats;
  std::vector<std::shared_ptr<Log>> logs;
};

// A thread group: waits until every rank has recorded the last lockstep step (a rank records a step's counts just
// after the step's events, so the caller may have every output before), then ends the group.
GroupRun run_threads(const EngineOptions& o, int n_requests) {
  GroupRun run;
  for (int r = 0; r < o.data_parallel; ++r) run.logs.push_back(std::make_shared<Log>());
  {
    runtime::DataParallelGroup group(
        o, [&](int r) { return std::make_unique<PlacedZipfModel>(run.logs[size_t(r)], o.data_parallel); });
    std::vector<RequestStream> streams;
    for (Request& r : requests(n_requests)) streams.push_back(group.submit(std::move(r)));
    for (RequestStream& s : streams) run.outputs.push_back(s.collect());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (group.expert_loads()->records() < group.stats().steps * uint64_t(o.data_parallel) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    run.stats = group.stats();
    EXPECT_EQ(group.expert_loads()->records(), run.stats.steps * uint64_t(o.data_parallel));
  }  // the ranks' threads are gone: the logs are complete
  return run;
}

int free_port() {
  parallel::BootstrapServer probe(0, 2, 1);
  return probe.port();
}

// Ranks as processes (each its own Engine over a loopback ProcessGroup, on threads of this test). Rank 0 submits;
// the others serve. Also returns every process's statistics (each keeps its own copy of the group's window).
GroupRun run_processes(EngineOptions o, int n_requests, std::vector<EngineStats>* per_process) {
  o.process_group = true;
  GroupRun run;
  const int world = o.data_parallel;
  for (int r = 0; r < world; ++r) run.logs.push_back(std::make_shared<Log>());
  const int port = free_port();
  std::vector<std::future<std::shared_ptr<runtime::ProcessGroup>>> pending;
  for (int r = 0; r < world; ++r)
    pending.push_back(std::async(std::launch::async, [=] {
      parallel::BootstrapConfig c;
      c.master_port = port;
      c.rank = r;
      c.world_size = world;
      c.timeout_s = 20;
      return std::make_shared<runtime::ProcessGroup>(c, 20);
    }));
  std::vector<std::shared_ptr<runtime::ProcessGroup>> groups;
  for (auto& p : pending) groups.push_back(p.get());
  std::vector<std::unique_ptr<Engine>> engines;
  engines.resize(size_t(world));
  for (int r = world - 1; r >= 0; --r)
    engines[size_t(r)] = runtime::make_process_group_engine(
        o, groups[size_t(r)], std::make_unique<PlacedZipfModel>(run.logs[size_t(r)], world));
  std::vector<std::future<void>> served;
  for (int r = 1; r < world; ++r) served.push_back(std::async(std::launch::async, [&, r] { engines[size_t(r)]->serve(); }));
  run.outputs = engines[0]->generate(requests(n_requests));
  engines[0]->serve();  // ends the group (the stopping exchange carries the last step's counts)
  for (auto& f : served) {
    EXPECT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    f.get();
  }
  // Every rank's model logged its last table before the stopping exchange, which has completed on every rank: the
  // logs are complete. Each loop records that exchange's sum just after it: wait for the window to hold every pair
  // of its steps (every_steps and window come from the options).
  const Expected x = simulate(run.logs, world, o.eplb_rebalance_steps, o.eplb_window_steps, o.eplb_rebalance_min_gain);
  for (int r = 0; r < world; ++r) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    EngineStats st;
    do {
      st = engines[size_t(r)]->stats();
      if (st.eplb_window_pairs == window_pairs(x.final_window)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } while (std::chrono::steady_clock::now() < deadline);
    per_process->push_back(st);
  }
  run.stats = (*per_process)[0];
  engines.clear();
  return run;
}

void expect_same_outputs(const std::vector<RequestOutput>& a, const std::vector<RequestOutput>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].request_id, b[i].request_id) << i;
    EXPECT_EQ(a[i].token_ids, b[i].token_ids) << i;
    EXPECT_EQ(a[i].finish_reason, b[i].finish_reason) << i;
  }
}

TEST(EplbRebalance, ThreadRanksMoveTogetherAtTheCadenceToThePlannersPlacement) {
  for (int ranks : {2, 3})
    for (auto [every, window] : {std::pair{4, 6}, std::pair{3, 2}}) {
      SCOPED_TRACE(std::to_string(ranks) + " ranks, every " + std::to_string(every) + " steps, window " +
                   std::to_string(window));
      const EngineOptions o = rebalance_options(ranks, every, window, 0.02);
      const GroupRun run = run_threads(o, 12);
      for (const RequestOutput& out : run.outputs) ASSERT_GT(out.token_ids.size(), 0u) << out.message;
      const Expected x = simulate(run.logs, ranks, every, window, 0.02);
      EXPECT_EQ(x.steps, run.stats.steps);
      ASSERT_GE(x.moves.size(), 1u) << "the skewed load must rebalance at least once";
      EXPECT_EQ(x.moves.front().before_step, uint64_t(every) + 1);
      expect_moves(run.logs, x);
      EXPECT_EQ(run.stats.eplb_rebalances, x.moves.size());
      EXPECT_EQ(run.stats.eplb_slots_moved, x.slots_moved);
      EXPECT_EQ(run.stats.eplb_window_pairs, window_pairs(x.final_window));
      const double placed = moe_lb_of(x.final_window, x.final_placement);
      EXPECT_NEAR(run.stats.moe_lb_placed, placed, 1e-12 * placed);

      // The same run without rebalancing: the same outputs, and no move.
      const GroupRun off = run_threads(rebalance_options(ranks, 0, window, 0.02), 12);
      expect_same_outputs(run.outputs, off.outputs);
      for (const auto& log : off.logs) EXPECT_TRUE(log->moves.empty());
      EXPECT_EQ(off.stats.eplb_rebalances, 0u);
      std::printf("[eplb rebalance dp%d every %d window %d] %llu steps, %zu rebalances before steps", ranks, every,
                  window, (unsigned long long)run.stats.steps, x.moves.size());
      for (const Log::Move& m : x.moves) std::printf(" %llu", (unsigned long long)m.before_step);
      std::printf("; %llu slots moved; moe_lb placed %.4f, contiguous %.4f\n",
                  (unsigned long long)run.stats.eplb_slots_moved, run.stats.moe_lb_placed,
                  run.stats.moe_lb_contiguous);
    }
}

TEST(EplbRebalance, NoMoveBelowTheGainThreshold) {
  const EngineOptions o = rebalance_options(2, 3, 6, 0.95);  // no placement can lower moe_lb by 95 %
  const GroupRun run = run_threads(o, 8);
  const Expected x = simulate(run.logs, 2, 3, 6, 0.95);
  EXPECT_TRUE(x.moves.empty());
  expect_moves(run.logs, x);
  EXPECT_EQ(run.stats.eplb_rebalances, 0u);
  // Still the contiguous placement: moe_lb_placed is the contiguous one.
  EXPECT_NEAR(run.stats.moe_lb_placed, run.stats.moe_lb_contiguous, 1e-12);
}

TEST(EplbRebalance, ProcessRanksShareTheWindowAndMoveTogether) {
  for (int world : {2, 3}) {
    SCOPED_TRACE(std::to_string(world) + " processes");
    const int every = 4, window = 6;
    const EngineOptions o = rebalance_options(world, every, window, 0.02);
    std::vector<EngineStats> per_process;
    const GroupRun run = run_processes(o, 12, &per_process);
    const Expected x = simulate(run.logs, world, every, window, 0.02);
    ASSERT_GE(x.moves.size(), 1u);
    EXPECT_EQ(x.moves.front().before_step, uint64_t(every) + 1);
    expect_moves(run.logs, x);
    // Every process's window is the group's (the sum of every rank's counts), so each reports the same statistics.
    for (size_t r = 0; r < per_process.size(); ++r) {
      SCOPED_TRACE("process " + std::to_string(r));
      EXPECT_EQ(per_process[r].eplb_window_pairs, window_pairs(x.final_window));
      EXPECT_EQ(per_process[r].eplb_rebalances, x.moves.size());
      EXPECT_EQ(per_process[r].eplb_slots_moved, x.slots_moved);
      const double placed = moe_lb_of(x.final_window, x.final_placement);
      EXPECT_NEAR(per_process[r].moe_lb_placed, placed, 1e-12 * placed);
    }
    // The outputs are the thread group's.
    const GroupRun threads = run_threads(o, 12);
    expect_same_outputs(run.outputs, threads.outputs);
    std::printf("[eplb rebalance %d processes] %llu steps, %zu rebalances, window %llu pairs at every process\n",
                world, (unsigned long long)x.steps, x.moves.size(),
                (unsigned long long)per_process[0].eplb_window_pairs);
  }
}

TEST(EplbRebalance, BadOptionsAreRejected) {
  auto log = std::make_shared<Log>();
  auto make = [&](const EngineOptions& o) {
    return runtime::make_data_parallel_engine(o, [&](int) { return std::make_unique<PlacedZipfModel>(log, 2); });
  };
  EngineOptions o = rebalance_options(2, 4, 8, 0.02);
  EXPECT_NO_THROW(make(o));
  o.eplb_rebalance_steps = -1;
  EXPECT_THROW(make(o), Error);
  o = rebalance_options(2, 4, 8, 1.5);
  EXPECT_THROW(make(o), Error);
  o = rebalance_options(2, 4, 0, 0.02);  // no window
  EXPECT_THROW(make(o), Error);
  o = rebalance_options(2, 4, 8, 0.02);
  o.expert_parallel = 4;  // not the group's ranks
  EXPECT_THROW(make(o), Error);
  o = rebalance_options(2, 4, 8, 0.02);
  o.eplb_redundant_experts = 2;  // the model's placement has none
  try {
    make(o);
    ADD_FAILURE() << "a redundancy other than the model's placement was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("redundant slots"), std::string::npos) << e.what();
  }
  // A model that holds every expert (the CPU reference) cannot rebalance.
  o = rebalance_options(2, 4, 8, 0.02);
  o.model = std::string(DEEPINFER_SOURCE_DIR) + "/tests/golden/fixtures/v4_tiny";
  o.expert_parallel = 2;
  try {
    Engine::create(o);
    ADD_FAILURE() << "the CPU reference was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds every expert"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace deepinfer
