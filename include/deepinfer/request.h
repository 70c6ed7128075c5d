// One generation request and the handle that names it afterwards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deepinfer/sampling_params.h"

namespace deepinfer {

struct Request {
  // The prompt: token ids, or text (encoded with the engine's tokenizer, special tokens allowed). Exactly
  // one of the two must be given.
  std::vector<int32_t> prompt_token_ids;
  std::string prompt;
  SamplingParams params;
};

// Names an accepted request: its engine-wide id and the slot it occupies. A slot is reused by later
// requests; its generation counter changes at every reuse, so a cancel() carrying an old generation is
// recognised as stale and cannot hit the new occupant.
struct RequestHandle {
  uint64_t id = 0;
  uint32_t slot = UINT32_MAX;  // UINT32_MAX: the request was rejected and holds no slot
  uint32_t generation = 0;
};

}  // namespace deepinfer
