// Engine loop on the CPU backend with the bundled v4_tiny checkpoint: terminal-event invariants under a
// mixed load, bitwise batch invariance of greedy and seeded outputs, preemption by recompute, cancellation
// with slot generations, rejection messages, and stop strings against Tokenizer::decode.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <cstring>
#include <random>
#include <thread>

#include "common/byte_level_tokenizer.h"
#include "common/mixed_requests.h"
#include "deepinfer/engine.h"
#include "model/model.h"
#include "text/pretokenize.h"
#include "text/tokenizer_bpe.h"

namespace deepinfer {
namespace {

using testing::check_consistent;
using testing::Mixed;
using testing::mixed_requests;
using testing::random_prompt;

const std::string kModel = std::string(DEEPINFER_SOURCE_DIR) + "/tests/golden/fixtures/v4_tiny";

EngineOptions base_options() {
  EngineOptions o;
  o.model = kModel;
  return o;
}


// Greedy continuation by the plain forward contract (prefill, then one token at a time): the oracle for
// the engine's greedy path.
std::vector<int32_t> plain_greedy(const Model& model, const std::vector<int32_t>& prompt, int max_tokens) {
  auto seq = model.new_sequence();
  Tensor logits = model.forward(*seq, prompt);
  const int64_t vocab = model.config().vocab_size;
  const float* row = logits.row(int64_t(prompt.size()) - 1);
  std::vector<int32_t> out;
  for (int i = 0; i < max_tokens; ++i) {
    int32_t next = int32_t(std::max_element(row, row + vocab) - row);
    out.push_back(next);
    if (next == model.config().eos_token_id || i + 1 == max_tokens) break;
    logits = model.forward(*seq, std::span<const int32_t>(&next, 1));
    row = logits.row(0);
  }
  return out;
}

TEST(Engine, GreedyMatchesThePlainForwardLoop) {
  ModelOptions mo;
  mo.show_progress = false;
  auto model = load_model(kModel, mo);
  EngineOptions o = base_options();
  o.max_batch_tokens = 16;  // forces chunked prefill of the longer prompts
  o.prefill_chunk = 7;
  auto engine = Engine::create(o);
  std::mt19937 rng(1);
  std::vector<Request> reqs;
  for (int len : {1, 5, 23, 40}) reqs.push_back({random_prompt(rng, len, 512), "", SamplingParams::greedy(12)});
  auto outs = engine->generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(outs[i].token_ids, plain_greedy(*model, reqs[i].prompt_token_ids, 12)) << "request " << i;
    EXPECT_TRUE(outs[i].finish_reason == FinishReason::Length || outs[i].finish_reason == FinishReason::Finished);
  }
}

// The asynchronous scheduler (steps enqueued before the previous step's tokens are read, tokens filled in one
// step late) gives exactly the synchronous engine's outputs, finish reasons and event streams' tokens, for greedy
// and seeded temperature / top-k / top-p / min-p requests, through chunked prefill, preemption (small state
// budget), EOS, stop tokens, max_tokens and cancellation.
TEST(Engine, AsynchronousSchedulingMatchesSynchronous) {
  std::mt19937 rng(11);
  std::vector<Request> reqs;
  for (int i = 0; i < 40; ++i) {
    SamplingParams p = SamplingParams::greedy(1 + int(rng() % 20));
    if (i % 2 == 1) {  // a seeded draw: asynchronous too (Model::enqueue_sampled)
      p.temperature = 0.6f + float(rng() % 80) / 100.0f;
      if (i % 8 == 1) p.top_k = 1 + int(rng() % 40);
      if (i % 8 == 3) p.top_p = 0.4f + float(rng() % 55) / 100.0f;
      if (i % 8 == 5) p.min_p = 0.02f + float(rng() % 20) / 100.0f;
      p.seed = rng();
    }
    if (i % 3 == 0)
      for (int k = 0; k < 6; ++k) p.stop_token_ids.push_back(2 + int(rng() % 510));
    if (i % 7 == 0) p.ignore_eos = true;
    reqs.push_back({random_prompt(rng, 1 + int(rng() % 50), 512), "", p});
  }
  auto run = [&](bool async, EngineStats* stats) {
    EngineOptions o = base_options();
    o.async_scheduling = async;
    o.max_batch_tokens = 24;
    o.prefill_chunk = 9;
    o.state_memory_bytes = 120 * 1024;  // a few sequences at a time: preemption happens
    auto engine = Engine::create(o);
    auto outs = engine->generate(reqs);
    *stats = engine->stats();
    return outs;
  };
  EngineStats sync_stats, async_stats;
  const auto sync = run(false, &sync_stats);
  const auto async = run(true, &async_stats);
  ASSERT_EQ(sync.size(), async.size());
  for (size_t i = 0; i < sync.size(); ++i) {
    EXPECT_EQ(async[i].token_ids, sync[i].token_ids) << "request " << i;
    EXPECT_EQ(async[i].finish_reason, sync[i].finish_reason) << "request " << i;
  }
  EXPECT_EQ(sync_stats.async_steps, 0u);
  EXPECT_GT(async_stats.async_steps, 0u);
  // Step time accounting: the engine thread worked, a synchronous step waits on every forward, and the CPU model
  // has no device timeline.
  for (const EngineStats* st : {&sync_stats, &async_stats}) {
    EXPECT_GT(st->host_seconds, 0.0);
    EXPECT_EQ(st->device_busy_seconds, 0.0);
    EXPECT_EQ(st->device_idle_seconds, 0.0);
  }
  EXPECT_GT(sync_stats.model_wait_seconds, 0.0);
  EXPECT_GT(async_stats.preemptions + sync_stats.preemptions, 0u) << "the state budget should force preemption";
  std::printf("async steps %llu of %llu, preemptions %llu (sync %llu)\n", (unsigned long long)async_stats.async_steps,
              (unsigned long long)async_stats.steps, (unsigned long long)async_stats.preemptions,
              (unsigned long long)sync_stats.preemptions);
}

// In batch-invariant mode a seeded request keeps the synchronous path (a device sampler may differ from the host's
// on near-ties, and whether a step runs asynchronously depends on the other requests); greedy ones overlap.
TEST(Engine, BatchInvariantSamplingStaysSynchronous) {
  std::mt19937 rng(3);
  for (bool sampled : {false, true}) {
    EngineOptions o = base_options();
    o.batch_invariant = true;
    auto engine = Engine::create(o);
    std::vector<Request> reqs;
    for (int i = 0; i < 4; ++i) {
      SamplingParams p = SamplingParams::greedy(6);
      if (sampled) {
        p.temperature = 0.8f;
        p.seed = rng();
      }
      reqs.push_back({random_prompt(rng, 5 + i, 512), "", p});
    }
    engine->generate(reqs);
    if (sampled)
      EXPECT_EQ(engine->stats().async_steps, 0u);
    else
      EXPECT_GT(engine->stats().async_steps, 0u);
  }
}

// 200 mixed requests on the threaded engine with a tight token budget (chunked prefill), a small state
// budget (preemption) and cancellations from the API thread: every request ends with exactly one terminal
// event, consistent with its parameters; every request that was not cancelled matches its run alone
// (greedy and seeded sampling, token ids and logprobs bitwise). How often the threaded run preempts depends on
// when requests arrive and cancellations land (a few times a run, sometimes none on a loaded machine), so the
// preemption itself is asserted on the synchronous engine under the same budget, whose schedule is fixed.
TEST(Engine, TwoHundredMixedRequests) {
  auto reqs = mixed_requests(200, 7, 512);
  EngineOptions o = base_options();
  o.max_batch_tokens = 96;
  o.prefill_chunk = 32;
  o.max_num_seqs = 48;
  o.batch_invariant = true;
  auto probe = Engine::create(o);
  o.state_memory_bytes = probe->state_bytes_for(64) * 12;  // ~12 long sequences: preemption happens
  probe.reset();

  auto t0 = std::chrono::steady_clock::now();
  auto engine = Engine::create(o);
  const std::vector<std::vector<Event>> events = testing::run_mixed(*engine, reqs);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EngineStats st = engine->stats();
  std::printf("[mixed] 200 requests in %.2f s: %llu steps, %llu prefill + %llu decode tokens, %llu preemptions, "
              "max %llu sequences/step, peak state %llu bytes\n",
              seconds, (unsigned long long)st.steps, (unsigned long long)st.prefill_tokens,
              (unsigned long long)st.decode_tokens, (unsigned long long)st.preemptions,
              (unsigned long long)st.max_running, (unsigned long long)st.state_bytes_peak);
  EXPECT_GT(st.max_running, 8u);
  EXPECT_LE(st.state_bytes_peak, o.state_memory_bytes);
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    check_consistent(reqs[i], events[i], engine->eos_token_id());
  }

  // The same budget on the synchronous engine (every request queued before the first step, none cancelled):
  // preemption happens, and the preempted requests' outputs are compared below like the rest.
  EngineOptions sync_opts = o;
  sync_opts.threaded = false;
  std::vector<Request> sync_reqs;
  for (const Mixed& m : reqs) sync_reqs.push_back(m.request);
  auto sync_engine = Engine::create(sync_opts);
  const std::vector<RequestOutput> sync_outs = sync_engine->generate(sync_reqs);
  std::printf("[mixed] synchronous engine, same budget: %llu preemptions\n",
              (unsigned long long)sync_engine->stats().preemptions);
  EXPECT_GT(sync_engine->stats().preemptions, 0u) << "the state budget should force preemption";

  // Alone, one at a time, on a synchronous engine with a roomy budget: same tokens, same logprobs.
  EngineOptions alone_opts = base_options();
  alone_opts.threaded = false;
  auto alone = Engine::create(alone_opts);
  int compared = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].invalid) continue;
    RequestOutput solo = alone->submit(reqs[i].request).collect();
    EXPECT_EQ(sync_outs[i].token_ids, solo.token_ids) << "request " << i << " (synchronous, same budget)";
    EXPECT_EQ(sync_outs[i].finish_reason, solo.finish_reason) << "request " << i << " (synchronous, same budget)";
    ASSERT_EQ(sync_outs[i].logprobs.size(), solo.logprobs.size());
    for (size_t k = 0; k < solo.logprobs.size(); ++k)  // bitwise
      EXPECT_EQ(std::memcmp(&sync_outs[i].logprobs[k].logprob, &solo.logprobs[k].logprob, sizeof(float)), 0)
          << "request " << i << " token " << k << " (synchronous, same budget)";
    if (reqs[i].cancel) continue;
    std::vector<int32_t> batched;
    std::vector<float> batched_lp, solo_lp;
    for (const Event& e : events[i]) {
      batched.insert(batched.end(), e.token_ids.begin(), e.token_ids.end());
      for (auto& lp : e.logprobs) batched_lp.push_back(lp.logprob);
    }
    for (auto& lp : solo.logprobs) solo_lp.push_back(lp.logprob);
    EXPECT_EQ(batched, solo.token_ids) << "request " << i;
    ASSERT_EQ(batched_lp.size(), solo_lp.size());
    for (size_t k = 0; k < solo_lp.size(); ++k)  // bitwise
      EXPECT_EQ(std::memcmp(&batched_lp[k], &solo_lp[k], sizeof(float)), 0) << "request " << i << " token " << k;
    EXPECT_EQ(events[i].back().reason, solo.finish_reason) << "request " << i;
    ++compared;
  }
  EXPECT_GT(compared, 120);
}

TEST(Engine, RejectionsNameTheField) {
  EngineOptions o = base_options();
  o.threaded = false;
  auto engine = Engine::create(o);
  auto reject_message = [&](Request r) {
    RequestOutput out = engine->submit(std::move(r)).collect();
    EXPECT_EQ(out.finish_reason, FinishReason::Rejected);
    EXPECT_TRUE(out.token_ids.empty());
    return out.message;
  };
  Request r;
  EXPECT_NE(reject_message(r).find("prompt_token_ids"), std::string::npos);
  r.prompt_token_ids = {5, 600};
  EXPECT_NE(reject_message(r).find("prompt_token_ids[1]"), std::string::npos);
  r.prompt_token_ids = {5};
  r.params.temperature = -1;
  EXPECT_NE(reject_message(r).find("params.temperature"), std::string::npos);
  r.params = {};
  r.params.stop = {"x"};
  EXPECT_NE(reject_message(r).find("params.stop"), std::string::npos);  // no tokenizer
  r.params = {};
  r.params.max_tokens = 5000;
  EXPECT_NE(reject_message(r).find("params.max_tokens"), std::string::npos);  // beyond max length 1024
  r.params = {};
  r.prompt = "hello";
  EXPECT_NE(reject_message(r).find("prompt"), std::string::npos);  // both forms
  EXPECT_EQ(engine->stats().rejected, 6u);
}

TEST(Engine, MaxModelLenRejectsLongRequests) {
  EngineOptions o = base_options();
  o.max_model_len = 40;
  auto engine = Engine::create(o);
  std::mt19937 rng(5);
  auto outs = engine->generate({{random_prompt(rng, 30, 512), "", SamplingParams::greedy(11)},
                                {random_prompt(rng, 30, 512), "", SamplingParams::greedy(10)}});
  EXPECT_EQ(outs[0].finish_reason, FinishReason::Rejected);
  EXPECT_NE(outs[0].message.find("max_model_len (40)"), std::string::npos) << outs[0].message;
  EXPECT_EQ(outs[1].finish_reason, FinishReason::Length);
  EXPECT_EQ(outs[1].token_ids.size(), 10u);
}

TEST(Engine, OverloadRejectedBeforeAllocation) {
  EngineOptions o = base_options();
  o.threaded = false;  // nothing is admitted until a step runs
  o.max_waiting = 3;
  auto engine = Engine::create(o);
  std::vector<RequestStream> s;
  for (int i = 0; i < 5; ++i) s.push_back(engine->submit({{3, 4, 5}, "", SamplingParams::greedy(2)}));
  EXPECT_EQ(s[3].handle().slot, UINT32_MAX);  // no slot: nothing was allocated
  RequestOutput r = s[4].collect();
  EXPECT_EQ(r.finish_reason, FinishReason::Rejected);
  EXPECT_NE(r.message.find("overloaded"), std::string::npos);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s[size_t(i)].collect().finish_reason, FinishReason::Length);
}

TEST(Engine, StateBudgetRejectsWhatCanNeverFit) {
  EngineOptions o = base_options();
  o.threaded = false;
  auto probe = Engine::create(o);
  o.state_memory_bytes = probe->state_bytes_for(100);
  auto engine = Engine::create(o);
  Request fits{{3, 4, 5}, "", SamplingParams::greedy(97)};
  Request too_big{{3, 4, 5}, "", SamplingParams::greedy(200)};
  RequestStream big = engine->submit(too_big);
  EXPECT_EQ(big.handle().slot, UINT32_MAX);  // rejected before a slot or any state
  RequestOutput r = big.collect();
  EXPECT_EQ(r.finish_reason, FinishReason::Rejected);
  EXPECT_NE(r.message.find("state_memory_bytes"), std::string::npos) << r.message;
  fits.params.ignore_eos = true;
  EXPECT_EQ(engine->submit(fits).collect().token_ids.size(), 97u);
  EXPECT_LE(engine->stats().state_bytes_peak, o.state_memory_bytes);
}

TEST(Engine, ShutdownEndsEveryRequestOnce) {
  std::vector<RequestStream> streams;
  {
    EngineOptions o = base_options();
    o.max_num_seqs = 2;
    auto engine = Engine::create(o);
    for (int i = 0; i < 6; ++i) {
      Request r{{3, 4, 5}, "", SamplingParams::greedy(500)};
      r.params.ignore_eos = true;
      streams.push_back(engine->submit(r));
    }
    Event e;
    ASSERT_TRUE(streams[0].next(e));
  }  // the engine goes away with requests running and waiting
  for (auto& s : streams) {
    RequestOutput out = s.collect();  // the stream outlives the engine
    EXPECT_EQ(out.finish_reason, FinishReason::Cancelled);
    EXPECT_LT(out.token_ids.size(), 500u);
    s.cancel();  // harmless after the engine is gone
  }
}

TEST(Engine, StaleCancelCannotHitAReusedSlot) {
  EngineOptions o = base_options();
  o.threaded = false;
  auto engine = Engine::create(o);
  RequestStream a = engine->submit({{3, 4, 5}, "", SamplingParams::greedy(3)});
  RequestHandle old = a.handle();
  EXPECT_EQ(a.collect().finish_reason, FinishReason::Length);
  RequestStream b = engine->submit({{6, 7}, "", SamplingParams::greedy(3)});
  ASSERT_EQ(b.handle().slot, old.slot);  // the slot is reused ...
  EXPECT_NE(b.handle().generation, old.generation);  // ... under a new generation
  EXPECT_FALSE(engine->cancel(old));
  EXPECT_EQ(b.collect().finish_reason, FinishReason::Length);
  // A live handle does cancel.
  RequestStream c = engine->submit({{6, 7}, "", SamplingParams::greedy(50)});
  Event e;
  ASSERT_TRUE(c.next(e));
  EXPECT_TRUE(engine->cancel(c.handle()));
  RequestOutput rest = c.collect();
  EXPECT_EQ(rest.finish_reason, FinishReason::Cancelled);
  EXPECT_LT(rest.token_ids.size(), 49u);
}

TEST(Engine, EnvironmentOptions) {
  setenv("DEEPINFER_BATCH_INVARIANT", "1", 1);
  setenv("DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE", "decoder_tail", 1);
  setenv("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS", "200", 1);
  EngineOptions o = EngineOptions::from_env();
  EXPECT_TRUE(o.batch_invariant);
  EXPECT_EQ(o.prefill_truncation, PrefillTruncationMode::DecoderTail);
  EXPECT_EQ(o.prefill_keep_tokens, 200);
  setenv("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS", "many", 1);
  try {
    EngineOptions::from_env();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS"), std::string::npos);
  }
  unsetenv("DEEPINFER_BATCH_INVARIANT");
  unsetenv("DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE");
  unsetenv("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS");
  EXPECT_EQ(EngineOptions::from_env().prefill_keep_tokens, 140);
}

// The engine hands its batch-invariant option to the model loader (a device backend sets its kernels' dispatch
// from ModelOptions::batch_invariant before it builds the model): a probe backend records what it is given and
// serves the CPU reference.
TEST(Engine, BatchInvariantReachesTheModelOptions) {
  static std::vector<bool> seen;
  register_device_backend("options-probe", [](const std::string& dir, const ModelOptions& mo) {
    seen.push_back(mo.batch_invariant);
    ModelOptions cpu = mo;
    cpu.device = "cpu";
    return load_model(dir, cpu);
  });
  for (bool on : {true, false}) {
    EngineOptions o = base_options();
    o.device = "options-probe";
    o.batch_invariant = on;
    o.max_num_seqs = 4;
    o.max_model_len = 256;
    auto engine = Engine::create(o);
    EXPECT_EQ(engine->generate({{{5, 6, 7}, "", SamplingParams::greedy(2)}})[0].token_ids.size(), 2u);
  }
  EXPECT_EQ(seen, (std::vector<bool>{true, false}));
}

// A byte-level tokenizer for the 512-token fixture vocabulary: ids 0..255 are bytes, 256..511 the pairs of
// the letters a..p. Stop strings are checked against Tokenizer::decode of the generated ids.
std::string write_test_tokenizer() {
  using nlohmann::json;
  json spec = testing::byte_level_tokenizer_spec(256);
  // The chat template's control tokens, above the model's vocabulary (only encode_chat / decode use them).
  json added = json::array();
  int next_id = 512;
  for (const char* t : {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜System｜>", "<｜User｜>", "<｜Assistant｜>",
                        "<｜latest_reminder｜>", "<think>", "</think>", "｜DSML｜"})
    added.push_back(json{{"id", next_id++}, {"content", t}, {"special", true}});
  spec["added_tokens"] = added;
  std::string path = std::string(DEEPINFER_BINARY_DIR) + "/runtime_test_tokenizer.json";
  std::ofstream(path) << spec.dump();
  return path;
}

TEST(Engine, StopStringsCutTheText) {
  EngineOptions o = base_options();
  o.tokenizer = write_test_tokenizer();
  auto engine = Engine::create(o);
  std::mt19937 rng(3);
  int stopped = 0;
  for (int i = 0; i < 40; ++i) {
    Request r;
    r.prompt_token_ids = random_prompt(rng, 6, 512);
    r.params.temperature = 1.5f;
    r.params.max_tokens = 40;
    r.params.seed = uint64_t(i);
    r.params.ignore_eos = true;
    r.params.stop = {"e", "ab"};
    RequestOutput out = engine->submit(r).collect();
    std::string full = engine->decode(out.token_ids);
    size_t cut = std::min(full.find("e"), full.find("ab"));
    if (out.finish_reason == FinishReason::Stopped) {
      ++stopped;
      ASSERT_NE(cut, std::string::npos);
      EXPECT_EQ(out.text, full.substr(0, cut));
    } else {
      EXPECT_EQ(out.finish_reason, FinishReason::Length);
      EXPECT_EQ(cut, std::string::npos);
      EXPECT_EQ(out.text, full);
    }
  }
  EXPECT_GT(stopped, 5);
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

TEST(Engine, TextPromptsAndChat) {
  EngineOptions o = base_options();
  o.tokenizer = write_test_tokenizer();
  o.threaded = false;
  auto engine = Engine::create(o);
  Request r;
  r.prompt = "abc";
  r.params.seed = 1;
  r.params.max_tokens = 10;
  RequestOutput out = engine->submit(r).collect();
  EXPECT_EQ(out.prompt_token_ids, (std::vector<int32_t>{'a', 'b', 'c'}));  // byte tokens, no merges
  EXPECT_EQ(out.text, engine->decode(out.token_ids));
  std::vector<int32_t> chat = engine->encode_chat(R"([{"role": "user", "content": "hello"}])");
  std::string rendered = engine->decode(chat);
  EXPECT_NE(rendered.find("hello"), std::string::npos) << rendered;
  EXPECT_NE(rendered.find("<｜User｜>"), std::string::npos) << rendered;
  try {
    engine->encode_chat(R"([{"role": "robot", "content": "x"}])");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("messages[0].role"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace deepinfer
