// Shared by the engine tests on the CPU (tests/unit/runtime) and on the GPU (tests/gpu/model): a reproducible mix
// of requests (sampling settings, stops, logprobs, cancellations, invalid ones), the round-robin reader that
// cancels the chosen requests after their first event, and the per-request consistency check of the event stream
// (exactly one terminal event, a finish reason that agrees with the parameters).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "deepinfer/engine.h"

namespace deepinfer::testing {

inline std::vector<int32_t> random_prompt(std::mt19937& rng, int len, int vocab) {
  std::uniform_int_distribution<int> tok(2, vocab - 1);  // avoid BOS 0 / EOS 1 inside prompts
  std::vector<int32_t> p(static_cast<size_t>(len), 0);
  for (auto& t : p) t = tok(rng);
  return p;
}

struct Mixed {
  Request request;
  bool cancel = false;
  bool invalid = false;
};

inline std::vector<Mixed> mixed_requests(int n, uint32_t seed, int vocab) {
  std::mt19937 rng(seed);
  std::vector<Mixed> out;
  for (int i = 0; i < n; ++i) {
    Mixed m;
    SamplingParams& p = m.request.params;
    int kind = int(rng() % 6);
    p.temperature = kind == 0 ? 0.0f : 0.5f + float(rng() % 100) / 100.0f;
    if (kind == 2) p.top_k = 1 + int(rng() % 20);
    if (kind == 3) p.top_p = 0.3f + float(rng() % 60) / 100.0f;
    if (kind == 4) p.min_p = 0.05f + float(rng() % 20) / 100.0f;
    if (kind == 5) {
      p.repetition_penalty = 1.3f;
      p.frequency_penalty = 0.5f;
      p.presence_penalty = 0.3f;
    }
    p.max_tokens = 1 + int(rng() % 24);
    if (rng() % 4 == 0)
      for (int k = 0; k < 8; ++k) p.stop_token_ids.push_back(2 + int(rng() % uint32_t(vocab - 2)));
    if (rng() % 3 == 0) p.logprobs = int(rng() % 3);
    p.seed = rng();
    m.request.prompt_token_ids = random_prompt(rng, 1 + int(rng() % 40), vocab);
    m.cancel = rng() % 8 == 0;
    if (rng() % 20 == 0) {  // a bad request: must be rejected, not crash
      m.invalid = true;
      p.top_p = 1.5f;
    }
    out.push_back(std::move(m));
  }
  return out;
}

inline void check_consistent(const Mixed& m, const std::vector<Event>& events, int eos) {
  ASSERT_FALSE(events.empty());
  int terminals = 0;
  for (const Event& e : events) terminals += e.terminal();
  EXPECT_EQ(terminals, 1);
  EXPECT_TRUE(events.back().terminal());
  std::vector<int32_t> tokens;
  for (const Event& e : events) tokens.insert(tokens.end(), e.token_ids.begin(), e.token_ids.end());
  const SamplingParams& p = m.request.params;
  EXPECT_LE(int(tokens.size()), p.max_tokens);
  switch (events.back().reason) {
    case FinishReason::Length: EXPECT_EQ(int(tokens.size()), p.max_tokens); break;
    case FinishReason::Finished: EXPECT_EQ(tokens.back(), eos); break;
    case FinishReason::Stopped:
      EXPECT_NE(std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tokens.back()), p.stop_token_ids.end());
      break;
    case FinishReason::Rejected:
      EXPECT_TRUE(m.invalid);
      EXPECT_NE(events.back().message.find("params.top_p"), std::string::npos) << events.back().message;
      break;
    case FinishReason::Cancelled: EXPECT_TRUE(m.cancel); break;
    default: ADD_FAILURE() << "unexpected finish " << finish_reason_name(events.back().reason) << ": "
                           << events.back().message;
  }
  if (m.invalid) {
    EXPECT_EQ(events.back().reason, FinishReason::Rejected);
  }
  if (p.logprobs >= 0 && !m.invalid) {
    size_t n = 0;
    for (const Event& e : events) n += e.logprobs.size();
    EXPECT_EQ(n, tokens.size());
  }
}

// Submits every request, reads the streams round-robin and cancels the chosen requests after their first event;
// returns each request's events.
inline std::vector<std::vector<Event>> run_mixed(Engine& engine, const std::vector<Mixed>& reqs) {
  std::vector<RequestStream> streams;
  for (const Mixed& m : reqs) streams.push_back(engine.submit(m.request));
  std::vector<std::vector<Event>> events(reqs.size());
  std::vector<bool> cancelled(reqs.size(), false);
  size_t open = reqs.size();
  while (open > 0) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (streams[i].done()) continue;
      Event e;
      if (!streams[i].next_for(e, std::chrono::milliseconds(1))) continue;
      events[i].push_back(e);
      if (e.terminal()) --open;
      if (reqs[i].cancel && !cancelled[i] && !e.terminal()) {
        cancelled[i] = true;
        streams[i].cancel();
      }
    }
  }
  return events;
}

}  // namespace deepinfer::testing
