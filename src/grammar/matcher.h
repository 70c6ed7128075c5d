// Structured output, part 2: the token-level matcher (issue 6, serving.md §4).
//
// A GrammarMatcher runs a byte-level pushdown automaton over the rule DFAs of a compiled Grammar. Its state
// is a set of stacks; a stack is a top frame (DFA state) plus an interned parent node, so equal stacks are
// equal integers and copying a state is copying a few words.
//
// Token masks: for each DFA state that consumes bytes (a "position"), the vocabulary is split once into
//   accepted  - the token can be consumed from this position whatever lies below it on the stack,
//   rejected  - it cannot, whatever lies below,
//   uncertain - some path pops past the part of the stack that is known from the position alone.
// "Known" extends upwards through rules that have a single call site, so in JSON-Schema grammars most
// positions have no uncertain tokens. fill_mask ORs the accepted sets of the positions on top of the live
// stacks and checks only the uncertain tokens against the real stacks (walking them in byte order so shared
// prefixes are advanced once).
//
// Threading: a CompiledGrammar is immutable after construction (precompute_all) or fills its per-position
// cache lazily under std::call_once; it can be shared by many matchers on many threads. A GrammarMatcher is
// used by one thread at a time (the host thread that computes the next mask while the device runs a step).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace deepinfer {
class Tokenizer;
}

namespace deepinfer::grammar {

// The vocabulary as byte strings, plus a byte trie over the ordinary tokens.
class TokenizerInfo {
 public:
  // Every added token (special or not) is excluded from grammar text: it can never be produced by the
  // grammar; stop_ids (default: the tokenizer's `<｜end▁of▁sentence｜>`) are allowed when the grammar is complete.
  // `text_added`: added tokens that are grammar text all the same (their bytes), e.g. the DSML markers for the
  // tool-call grammar. A stop id is never text (a tiny vocabulary may give EOS an ordinary token's id).
  static std::shared_ptr<const TokenizerInfo> from_tokenizer(const Tokenizer& tok, std::vector<int32_t> stop_ids = {},
                                                             const std::vector<int32_t>& text_added = {});
  // Raw form for tests: tokens[i] = bytes of id i; excluded ids have empty strings or are listed in `excluded`.
  static std::shared_ptr<const TokenizerInfo> from_bytes(std::vector<std::string> tokens, std::vector<int32_t> stop_ids,
                                                         std::vector<int32_t> excluded = {});

  size_t vocab_size() const { return offsets_.size() - 1; }
  size_t mask_words() const { return (vocab_size() + 31) / 32; }
  std::string_view token(int32_t id) const {
    return std::string_view(bytes_).substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
  }
  bool is_text(int32_t id) const { return text_[id] != 0; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }

  // Trie in preorder: node i covers byte byte_[i] at depth depth_[i] (root excluded); its subtree is
  // [i, end_[i]); the tokens ending at node i are trie_tokens_[tok_begin_[i] .. tok_begin_[i+1]).
  struct Trie {
    std::vector<uint8_t> byte;
    std::vector<uint16_t> depth;
    std::vector<int32_t> end;
    std::vector<int32_t> tok_begin;  // size nodes+1
    std::vector<int32_t> tokens;
  };
  const Trie& trie() const { return trie_; }
  size_t max_token_len() const { return max_len_; }

 private:
  void build();
  std::string bytes_;
  std::vector<uint32_t> offsets_;
  std::vector<uint8_t> text_;
  std::vector<int32_t> stop_ids_;
  Trie trie_;
  size_t max_len_ = 0;
};

// Grammar + vocabulary + per-position token classification.
class CompiledGrammar {
 public:
  CompiledGrammar(Grammar g, std::shared_ptr<const TokenizerInfo> tok, bool precompute = true);
  const Grammar& grammar() const { return g_; }
  const TokenizerInfo& tokenizer() const { return *tok_; }

  struct PositionMasks {
    // accepted ids as a bitset (when dense) or a sorted list (when sparse)
    std::vector<uint32_t> accepted_bits;
    std::vector<int32_t> accepted_list;
    // uncertain ids in byte order, with the common prefix length to the previous entry
    std::vector<int32_t> uncertain;
    std::vector<uint16_t> uncertain_lcp;
    size_t accepted_count = 0;
  };
  const PositionMasks& position(int32_t state) const;
  void precompute_all() const;

  // Length of the shortest byte string that takes each DFA state to the end of its rule (rule references
  // cost the shortest string of the referenced rule); UINT32_MAX if the rule cannot end from there.
  const std::vector<uint32_t>& completion_dist() const;

  struct Stats {
    size_t positions = 0, accepted = 0, uncertain = 0, bytes = 0;
  };
  Stats stats() const;

 private:
  void compute(int32_t state, PositionMasks& out) const;
  Grammar g_;
  std::shared_ptr<const TokenizerInfo> tok_;
  mutable std::vector<PositionMasks> pos_;
  mutable std::unique_ptr<std::once_flag[]> once_;
  mutable std::once_flag dist_once_;
  mutable std::vector<uint32_t> dist_;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> cg);
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // Writes the allowed-token bitmask: bit (id % 32) of word id / 32 is set iff id may be sampled next.
  // `words` must hold tokenizer().mask_words() uint32 values (4,040 for the 129,280-token V4 vocabulary).
  void fill_mask(uint32_t* words);
  // Advances by one token; returns false (state unchanged) if the token is not allowed.
  bool accept(int32_t token);
  // Advances by raw bytes (no token boundary); returns false (state unchanged) if not allowed.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last n accepted tokens / byte strings (n <= history_size()).
  void rollback(size_t n);
  size_t history_size() const { return history_.size(); }
  // True after a stop token was accepted.
  bool is_terminated() const { return terminated_; }
  // True if the grammar accepts the output so far as complete (a stop token is allowed now).
  bool can_terminate() const { return can_end_; }
  // The bytes every continuation must start with (jump-forward); stops where a choice or the end is possible.
  std::string forced_bytes(size_t max_len = 4096);
  // A shortest byte string that completes the grammar from here (per-state shortest-completion distances,
  // summed down the stack; empty if complete now or if longer than max_len). Used by tests and corpus
  // drivers to finish random walks.
  std::string shortest_completion(size_t max_len = 2000);
  void reset();

  const CompiledGrammar& compiled() const { return *cg_; }

  struct Frame {
    int32_t state;
    int32_t parent;
    bool operator==(const Frame& o) const { return state == o.state && parent == o.parent; }
    bool operator<(const Frame& o) const { return state != o.state ? state < o.state : parent < o.parent; }
  };

  struct NodePool;  // interned stack nodes (matcher.cpp)

 private:
  struct Snapshot {
    std::vector<Frame> frames;
    bool can_end;
  };
  bool advance(const std::vector<Frame>& in, uint8_t b, std::vector<Frame>& out, bool& ended);
  void closure_into(Frame f, std::vector<Frame>& out, bool& ended);
  // Steps `frames` through `bytes` (check_token and accept_bytes). False when a byte has no continuation, unless
  // it is the last one and completes the grammar (`frames` then stays as before that byte); `ended` says whether
  // the last byte completed the grammar.
  bool walk(std::string_view bytes, std::vector<Frame>& frames, bool& ended);
  bool check_token(std::string_view bytes);

  std::shared_ptr<const CompiledGrammar> cg_;
  const Grammar* g_;
  std::unique_ptr<NodePool> pool_;
  std::vector<Frame> frames_;
  bool can_end_ = false;
  bool terminated_ = false;
  std::vector<Snapshot> history_;
  std::vector<Frame> work_, seen_;
  std::vector<std::vector<Frame>> depth_frames_;
  std::vector<uint8_t> depth_end_;
};

// Convenience: compile for a tokenizer.
std::shared_ptr<const CompiledGrammar> compile_for(Grammar g, std::shared_ptr<const TokenizerInfo> tok,
                                                   bool precompute = true);

}  // namespace deepinfer::grammar
