// The data-parallel process group's transport (src/runtime/process_group.h) between threads over loopback sockets:
// the lockstep all-gather, the failure of a peer that closes or hangs, Lockstep over it (the agreement and the
// epoch-based wake-up across "processes"), and the wire formats of requests and events.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <cstring>

#include "deepinfer/engine.h"
#include "deepinfer/errors.h"
#include "model/model.h"
#include "parallel/bootstrap.h"
#include "runtime/data_parallel.h"
#include "runtime/process_group.h"

namespace deepinfer::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// A port nobody listens on right now (rank 0's listener takes it again with SO_REUSEADDR).
int free_port() {
  parallel::BootstrapServer probe(0, 2, 1);
  return probe.port();
}

parallel::BootstrapConfig member(int port, int rank, int world) {
  parallel::BootstrapConfig c;
  c.master_port = port;
  c.rank = rank;
  c.world_size = world;
  c.timeout_s = 20;
  return c;
}

// Connects `world` ProcessGroups on threads (rank 0 listens, the others connect) and starts their readers.
std::vector<std::shared_ptr<ProcessGroup>> connect_group(int world, double exchange_timeout_s,
                                                         ProcessGroup::Handler handler = nullptr) {
  const int port = free_port();
  std::vector<std::future<std::shared_ptr<ProcessGroup>>> pending;
  for (int r = 0; r < world; ++r)
    pending.push_back(std::async(std::launch::async, [=] {
      return std::make_shared<ProcessGroup>(member(port, r, world), exchange_timeout_s);
    }));
  std::vector<std::shared_ptr<ProcessGroup>> groups;
  for (auto& p : pending) groups.push_back(p.get());
  for (auto& g : groups) g->start(handler, nullptr);
  return groups;
}

LockstepRecord record_of(int rank, int step) {
  LockstepRecord r;
  r.rows = rank * 1000 + step;
  r.in_flight = (rank + step) % 3 == 0;
  r.epoch = (uint64_t(1) << 40) + uint64_t(step * 7 + rank);  // above 32 bits: the wire keeps all 64
  r.stop = false;
  return r;
}

// Every rank gets every rank's record of every step, in rank order, whoever arrives first.
TEST(ProcessGroup, AllGatherOverLoopbackGivesEveryRankEveryRecord) {
  const int world = 4, steps = 50;
  auto groups = connect_group(world, 20);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        for (int s = 0; s < steps; ++s) {
          if ((s + r) % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // vary the arrival order
          const std::vector<LockstepRecord> got = groups[size_t(r)]->all_gather(r, record_of(r, s));
          if (int(got.size()) != world) throw Error("size " + std::to_string(got.size()));
          for (int q = 0; q < world; ++q) {
            const LockstepRecord want = record_of(q, s);
            const LockstepRecord& g = got[size_t(q)];
            if (g.rows != want.rows || g.in_flight != want.in_flight || g.epoch != want.epoch || g.stop)
              throw Error("step " + std::to_string(s) + ": rank " + std::to_string(q) + "'s record differs");
          }
        }
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
}

// Lockstep over the process group: the same agreement on every rank (Lockstep::agree of the gathered records), and
// an idle rank 1 woken by rank 0's new work (the Wake that rank 0's notify_work publishes).
TEST(ProcessGroup, LockstepAgreesAndWakesAcrossTheGroup) {
  std::shared_ptr<Lockstep> follower;
  std::promise<void> follower_ready;
  auto ready = follower_ready.get_future().share();
  auto groups = connect_group(2, 20, [&](int, ProcessGroup::Message type, const std::string& payload) {
    ready.wait();
    ASSERT_EQ(type, ProcessGroup::Message::Wake);
    uint64_t epoch = 0;
    for (char c : payload) epoch = (epoch << 8) | uint8_t(c);
    follower->observe_epoch(epoch);
  });
  auto leader = std::make_shared<Lockstep>(2, groups[0]);
  follower = std::make_shared<Lockstep>(2, groups[1], /*follower=*/true);
  follower_ready.set_value();
  leader->set_epoch_publisher([&](uint64_t epoch) {
    std::string payload(8, '\0');
    for (int i = 0; i < 8; ++i) payload[size_t(i)] = char(epoch >> (56 - 8 * i));
    groups[0]->broadcast(ProcessGroup::Message::Wake, payload);
  });

  // A busy step: rank 1 has 3 rows, rank 0 none but a step in flight.
  auto a1 = std::async(std::launch::async, [&] { return follower->exchange(1, 3, false, follower->epoch()); });
  const Lockstep::Agreement a0 = leader->exchange(0, 0, true, leader->epoch());
  const Lockstep::Agreement b = a1.get();
  EXPECT_EQ(a0.rows_per_rank, 3);
  EXPECT_TRUE(a0.busy);
  EXPECT_FALSE(a0.stop);
  EXPECT_EQ(b.rows_per_rank, a0.rows_per_rank);
  EXPECT_EQ(b.busy, a0.busy);
  EXPECT_EQ(b.work_epoch, a0.work_epoch);

  // An idle step, then rank 1 waits for work; rank 0's notify_work must wake it (no polling: it blocks until then).
  auto idle1 = std::async(std::launch::async, [&] {
    const Lockstep::Agreement a = follower->exchange(1, 0, false, follower->epoch());
    follower->wait_for_work(a.work_epoch);
    return a;
  });
  const Lockstep::Agreement idle0 = leader->exchange(0, 0, false, leader->epoch());
  EXPECT_FALSE(idle0.busy);
  EXPECT_EQ(idle1.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout) << "woke without work";
  leader->notify_work();
  ASSERT_EQ(idle1.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "the Wake did not reach rank 1";
  EXPECT_FALSE(idle1.get().busy);

  // Rank 0's stop reaches rank 1 at the next exchange, and both see a clean stop.
  auto stop1 = std::async(std::launch::async, [&] { return follower->exchange(1, 0, false, follower->epoch()); });
  leader->request_stop();
  const Lockstep::Agreement s0 = leader->exchange(0, 0, false, leader->epoch());
  const Lockstep::Agreement s1 = stop1.get();
  EXPECT_TRUE(s0.stop);
  EXPECT_TRUE(s1.stop);
  EXPECT_EQ(s0.failure, "");
  EXPECT_EQ(s1.failure, "");
  EXPECT_EQ(follower->wait_stopped(), "");
}

// A peer whose connection closes (its process died) fails rank 0's all-gather at once, naming the rank; and every
// later exchange of a Lockstep over it stops with that failure.
TEST(ProcessGroup, AClosedPeerFailsTheExchangeAtOnce) {
  auto groups = connect_group(3, /*exchange_timeout_s=*/60);
  Lockstep leader(3, groups[0]);
  auto rank2 = std::async(std::launch::async, [&] { return groups[2]->all_gather(2, record_of(2, 0)); });
  groups[1]->close();  // rank 1 "dies": its connection closes
  const auto t0 = Clock::now();
  const Lockstep::Agreement a = leader.exchange(0, 1, false, 0);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);  // not the 60 s timeout
  EXPECT_TRUE(a.stop);
  EXPECT_NE(a.failure.find("rank 1 is gone"), std::string::npos) << a.failure;
  EXPECT_EQ(leader.failure(), a.failure);
  EXPECT_TRUE(leader.exchange(0, 0, false, 0).stop);
  // Rank 2 waits for rank 0's answer; rank 0 going away ends that wait with a failure too.
  groups[0]->close();
  try {
    rank2.get();
    ADD_FAILURE() << "rank 2's all-gather returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 is gone"), std::string::npos) << e.what();
  }
}

// A peer that stays connected but never answers (a hung process) fails the exchange after the timeout.
TEST(ProcessGroup, AHungPeerFailsTheExchangeAfterTheTimeout) {
  auto groups = connect_group(2, /*exchange_timeout_s=*/0.5);
  const auto t0 = Clock::now();
  try {
    groups[0]->all_gather(0, record_of(0, 0));
    ADD_FAILURE() << "the all-gather returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no lockstep answer from rank 1"), std::string::npos) << e.what();
  }
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(waited, 0.4);
  EXPECT_LT(waited, 10.0);
}

// Two process-group ranks (each its own Engine, as in two processes, here on threads of one process with loopback
// connections) on the tiny V4 fixture: rank 0's outputs equal the one-rank engine's (ids, tokens, finish reasons,
// logprobs bitwise), both ranks run requests, and a request running on rank 1 is cancelled through its stream at
// rank 0 and through Engine::cancel.
TEST(ProcessGroup, TwoRankEnginesGiveTheOneRankOutputsAndCancel) {
  const std::string model_dir = std::string(DEEPINFER_SOURCE_DIR) + "/tests/golden/fixtures/v4_tiny";
  EngineOptions o;
  o.model = model_dir;
  o.max_batch_tokens = 64;
  o.prefill_chunk = 16;
  o.max_num_seqs = 16;
  o.state_memory_bytes = 1ull << 30;  // what Engine::create fills in
  std::vector<Request> reqs;
  for (int i = 0; i < 12; ++i) {
    Request r;
    r.prompt_token_ids = {int32_t(i), int32_t(10 + i), 20, int32_t(3 * i + 1)};
    r.prompt_token_ids.resize(size_t(2 + i % 3));
    r.params = SamplingParams::greedy(5 + i % 6);
    if (i % 3 == 1) {
      r.params.temperature = 0.9f;
      r.params.seed = uint64_t(100 + i);
      r.params.logprobs = 2;
    } else if (i % 3 == 2) {
      r.params.temperature = 1.0f;  // the engine's generator of the request id
    }
    reqs.push_back(r);
  }
  const std::vector<RequestOutput> one = Engine::create(o)->generate(reqs);

  o.data_parallel = 2;
  o.process_group = true;
  const int port = free_port();
  std::vector<std::future<std::shared_ptr<ProcessGroup>>> pending;
  for (int r = 0; r < 2; ++r)
    pending.push_back(std::async(std::launch::async, [=] {
      return std::make_shared<ProcessGroup>(member(port, r, 2), 20);
    }));
  std::vector<std::shared_ptr<ProcessGroup>> groups;
  for (auto& p : pending) groups.push_back(p.get());
  std::unique_ptr<Engine> rank1 = make_process_group_engine(o, groups[1], load_model(model_dir));
  std::unique_ptr<Engine> rank0 = make_process_group_engine(o, groups[0], load_model(model_dir));
  EXPECT_EQ(rank0->group_rank(), 0);
  EXPECT_EQ(rank1->group_rank(), 1);
  auto served = std::async(std::launch::async, [&] { rank1->serve(); });

  const std::vector<RequestOutput> two = rank0->generate(reqs);
  ASSERT_EQ(two.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(two[i].request_id, one[i].request_id);
    EXPECT_EQ(two[i].prompt_token_ids, one[i].prompt_token_ids);
    EXPECT_EQ(two[i].token_ids, one[i].token_ids);
    EXPECT_EQ(two[i].finish_reason, one[i].finish_reason);
    ASSERT_EQ(two[i].logprobs.size(), one[i].logprobs.size());
    for (size_t k = 0; k < one[i].logprobs.size(); ++k)
      EXPECT_EQ(std::memcmp(&two[i].logprobs[k].logprob, &one[i].logprobs[k].logprob, sizeof(float)), 0);
  }
  const EngineStats st = rank0->stats();
  ASSERT_EQ(st.ranks.size(), 2u);
  EXPECT_GT(st.ranks[0].requests, 0u);
  EXPECT_GT(st.ranks[1].requests, 0u);

  // Two long requests: the first goes to rank 0 (a tie goes to the lower rank), the second to rank 1.
  Request long_request;
  long_request.prompt_token_ids = {1, 2, 3};
  long_request.params = SamplingParams::greedy(900);
  long_request.params.ignore_eos = true;
  RequestStream a = rank0->submit(long_request);
  RequestStream b = rank0->submit(long_request);
  EXPECT_EQ(b.handle().slot % 2, 1u);
  Event first;
  ASSERT_TRUE(b.next(first));  // rank 1 runs it and its events reach rank 0
  b.cancel();
  EXPECT_EQ(b.collect().finish_reason, FinishReason::Cancelled);
  EXPECT_TRUE(rank0->cancel(a.handle()));
  EXPECT_EQ(a.collect().finish_reason, FinishReason::Cancelled);
  EXPECT_FALSE(rank0->cancel(b.handle()));  // ended: stale

  rank0->serve();  // ends the group: rank 1's serve() returns, without a failure
  ASSERT_EQ(served.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  served.get();
}

TEST(ProcessGroup, RequestsAndEventsSurviveTheWire) {
  Request r;
  r.prompt_token_ids = {1, 2, 3};
  r.prompt = "";
  r.params.temperature = 0.7f;
  r.params.top_p = 0.93f;
  r.params.top_k = 11;
  r.params.min_p = 0.015f;
  r.params.repetition_penalty = 1.1f;
  r.params.presence_penalty = -0.3f;
  r.params.frequency_penalty = 0.25f;
  r.params.max_tokens = 77;
  r.params.stop_token_ids = {5, 9};
  r.params.stop = {"ab", "\n\n"};
  r.params.ignore_eos = true;
  r.params.logprobs = 3;
  r.params.seed = uint64_t(0xfedcba9876543210ull);
  r.params.structured.regex = "[a-z]+";
  uint64_t id = 0;
  const Request d = decode_request(encode_request(42, r), id);
  EXPECT_EQ(id, 42u);
  EXPECT_EQ(d.prompt_token_ids, r.prompt_token_ids);
  EXPECT_EQ(d.params.temperature, r.params.temperature);
  EXPECT_EQ(d.params.top_p, r.params.top_p);
  EXPECT_EQ(d.params.top_k, r.params.top_k);
  EXPECT_EQ(d.params.min_p, r.params.min_p);
  EXPECT_EQ(d.params.repetition_penalty, r.params.repetition_penalty);
  EXPECT_EQ(d.params.presence_penalty, r.params.presence_penalty);
  EXPECT_EQ(d.params.frequency_penalty, r.params.frequency_penalty);
  EXPECT_EQ(d.params.max_tokens, r.params.max_tokens);
  EXPECT_EQ(d.params.stop_token_ids, r.params.stop_token_ids);
  EXPECT_EQ(d.params.stop, r.params.stop);
  EXPECT_EQ(d.params.ignore_eos, r.params.ignore_eos);
  EXPECT_EQ(d.params.logprobs, r.params.logprobs);
  EXPECT_EQ(d.params.seed, r.params.seed);
  EXPECT_EQ(d.params.structured.regex, r.params.structured.regex);
  Request unseeded;
  unseeded.prompt = "héllo";
  EXPECT_FALSE(decode_request(encode_request(1, unseeded), id).params.seed.has_value());
  EXPECT_EQ(decode_request(encode_request(1, unseeded), id).prompt, "héllo");

  Event e;
  e.kind = Event::Kind::Token;
  e.request_id = 9;
  e.token_ids = {4, 5};
  e.text_delta = "x y";
  TokenLogprob lp;
  lp.token_id = 4;
  lp.logprob = -1.2345678e-3f;
  lp.top = {{4, -1.2345678e-3f}, {8, -7.0625f}};
  e.logprobs = {lp, lp};
  const Event back = decode_event(encode_event(e));
  EXPECT_EQ(back.kind, e.kind);
  EXPECT_EQ(back.request_id, e.request_id);
  EXPECT_EQ(back.token_ids, e.token_ids);
  EXPECT_EQ(back.text_delta, e.text_delta);
  ASSERT_EQ(back.logprobs.size(), 2u);
  EXPECT_EQ(back.logprobs[1].logprob, lp.logprob);  // bitwise: the float survives the text
  ASSERT_EQ(back.logprobs[1].top.size(), 2u);
  EXPECT_EQ(back.logprobs[1].top[1].token_id, 8);
  EXPECT_EQ(back.logprobs[1].top[1].logprob, -7.0625f);
  Event fin;
  fin.kind = Event::Kind::Finish;
  fin.reason = FinishReason::Stopped;
  fin.message = "m";
  const Event fin_back = decode_event(encode_event(fin));
  EXPECT_TRUE(fin_back.terminal());
  EXPECT_EQ(fin_back.reason, FinishReason::Stopped);
  EXPECT_EQ(fin_back.message, "m");
}

}  // namespace
}  // namespace deepinfer::runtime
