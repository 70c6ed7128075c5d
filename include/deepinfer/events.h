// What the engine tells a caller about one request: a stream of events that ends with exactly one
// terminal event (DESIGN.md "Styles worth learning from": exactly one terminal event per request).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer {

enum class FinishReason {
  None,       // not a terminal event
  Finished,   // the model's EOS token was sampled
  Stopped,    // a stop token id or a stop string
  Length,     // max_tokens reached (or the model's maximum length)
  Cancelled,  // cancel() before the request ended
  Rejected,   // never admitted: a bad request or an overloaded engine (no state was allocated)
  Error,      // the engine failed while running the request
};

// "finished", "stopped", "length", "cancelled", "rejected", "error" ("" for None).
const char* finish_reason_name(FinishReason reason);

struct TopLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

// The logprob of one generated token and, when asked, the most likely alternatives at that position.
struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<TopLogprob> top;
};

struct Event {
  enum class Kind { Token, Finish };
  Kind kind = Kind::Token;
  uint64_t request_id = 0;
  // Kind::Token: the tokens generated since the previous event (one per decode step), their text (complete
  // UTF-8 only, held back while it could be the start of a stop string; empty without a tokenizer) and
  // their logprobs (when requested).
  std::vector<int32_t> token_ids;
  std::string text_delta;
  std::vector<TokenLogprob> logprobs;
  // Kind::Finish: why, and for Rejected / Error a message naming the bad field or the failure. A Finish
  // event may also carry a last text_delta (text held back while it could have begun a stop string).
  FinishReason reason = FinishReason::None;
  std::string message;

  bool terminal() const { return kind == Kind::Finish; }
};

}  // namespace deepinfer
