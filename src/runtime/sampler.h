// The sampler: penalties, truncation masks and one seeded draw per request and position
// (DESIGN.md "The path of one request": sampler; algorithms.md §4 "per-request seeded RNG").
//
// Everything here is a pure function of (logits row, params, the request's tokens, seed, position): no
// state is shared between requests, so a request's samples cannot depend on the batch it runs in.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "deepinfer/events.h"
#include "deepinfer/sampling_params.h"
#include "grammar/matcher.h"

namespace deepinfer::runtime {

// Philox4x64-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a counter-based
// generator, out = bijection_key(counter). The same (key, counter) always gives the same block.
std::array<uint64_t, 4> philox4x64_10(std::array<uint64_t, 4> counter, std::array<uint64_t, 2> key);

// The uniform in [0, 1) of request `seed` at sequence position `position` (53 bits of the first word of
// philox(counter = {position, 0, 0, 0}, key = {seed, 0})).
double uniform_at(uint64_t seed, uint64_t position);

// Per-request token counts the penalties need (the prompt's set and the output's counts).
struct PenaltyState {
  std::unordered_map<int32_t, int> output_counts;
  std::vector<int32_t> prompt_tokens;  // sorted, unique
  void set_prompt(std::span<const int32_t> prompt);
  void add_output(int32_t token) { ++output_counts[token]; }
  bool seen(int32_t token) const;  // in the prompt or the output
};

// Step 1 of sampling_params.h: repetition, then frequency and presence penalties, in place.
void apply_penalties(std::span<float> logits, const SamplingParams& params, const PenaltyState& state);

// Step 3 for temperature > 0: the distribution the draw uses, in token order (masked tokens are exactly 0,
// the rest sum to 1). Sums run in token-id order, whatever the batch.
std::vector<double> sampling_distribution(std::span<const float> logits, const SamplingParams& params);

// Inverse-CDF draw: the first token whose cumulative probability (in token-id order) exceeds u; tokens of
// probability 0 are never returned.
int32_t draw(const std::vector<double>& probs, double u);

// Greedy choice: argmax, lowest id on ties.
int32_t argmax(std::span<const float> logits);

struct SampleResult {
  int32_t token = 0;
  TokenLogprob logprob;  // filled when params.logprobs >= 0
};

// Grammar mask (bit id % 32 of word id / 32 set = allowed; ids >= mask_vocab are disallowed): disallowed
// logits become -inf. Returns the number of allowed ids within the row.
size_t apply_token_mask(std::span<float> logits, const uint32_t* mask, size_t mask_vocab);

// The whole pipeline for one row. `logits` is modified (penalties, then the mask, are applied in place).
// mask == nullptr: unconstrained. With a mask, logprobs are those of the masked distribution.
SampleResult sample(std::span<float> logits, const SamplingParams& params, const PenaltyState& penalties,
                    uint64_t seed, uint64_t position, const uint32_t* mask = nullptr, size_t mask_vocab = 0);

// One request's structured-output state: the grammar matcher plus the thinking phase. Owned by the execution
// thread; fill_mask may run on a helper thread while the model runs (nothing else touches it then).
class RequestGrammar {
 public:
  // think_end_id >= 0: the prompt ended in thinking mode; tokens are free until that token, the grammar
  // applies from the next one. -1: the grammar applies from the first output token.
  RequestGrammar(std::shared_ptr<const grammar::CompiledGrammar> cg, int32_t think_end_id = -1);

  // True if the next token is constrained (a mask must be applied).
  bool constrained() const { return in_grammar_; }
  size_t mask_vocab() const { return matcher_.compiled().tokenizer().vocab_size(); }
  // Fills mask_words() words; only when constrained().
  void fill_mask(std::vector<uint32_t>& words);
  const std::vector<uint32_t>& mask() const { return mask_; }
  // Computes the mask for the next token into mask() (no-op when unconstrained).
  void prepare() {
    if (in_grammar_) fill_mask(mask_);
  }
  // Advances by a sampled token; false if the grammar does not allow it (state unchanged).
  bool accept(int32_t token);
  // Undoes the last n accepted tokens (speculative verification); n <= tokens accepted.
  void rollback(size_t n);
  // The grammar took its stop token: the output is complete.
  bool terminated() const { return in_grammar_ && matcher_.is_terminated(); }
  grammar::GrammarMatcher& matcher() { return matcher_; }

 private:
  grammar::GrammarMatcher matcher_;
  int32_t think_end_;
  bool in_grammar_;
  // Per accepted token: 0 = free (thinking), 1 = the </think> token, 2 = fed to the matcher.
  std::vector<uint8_t> kinds_;
  std::vector<uint32_t> mask_;
};

}  // namespace deepinfer::runtime
