// Shared body of the grammar fuzz target (libFuzzer, fuzz_grammar.cpp) and its CI replay
// (tests/unit/grammar/test_grammar_fuzz_replay.cpp). Input: first byte picks the front end (regex, EBNF,
// JSON Schema), the rest is the grammar text. Property: compiling either succeeds or throws deepinfer::Error
// (nothing else, no crash); a compiled grammar then drives a matcher over a small byte vocabulary for a few
// steps, and every allowed token must be accepted, and rollback must restore the mask.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace deepinfer::grammar::fuzz {

inline std::shared_ptr<const TokenizerInfo> fuzz_vocab() {
  static std::shared_ptr<const TokenizerInfo> info = [] {
    std::vector<std::string> toks;
    toks.push_back("");  // id 0: stop
    for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, char(b)));
    for (const char* s : {"ab", "abc", "{\"", "\":", "\",\"", "true", "null", "12", "[1", "]}", "\\u00", "日本", "é"})
      toks.push_back(s);
    return TokenizerInfo::from_bytes(toks, {0});
  }();
  return info;
}

// Returns 0 always (libFuzzer convention); aborts on a property violation.
inline int run_one(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  Limits lim;
  lim.max_repeat = 64;
  lim.max_dfa_states_per_rule = 2000;
  lim.max_nfa_states_per_rule = 20000;
  Grammar g;
  try {
    switch (data[0] % 3) {
      case 0: g = compile_regex(text, lim); break;
      case 1: g = compile_ebnf(text, "root", lim); break;
      default: {
        JsonSchemaOptions o;
        o.limits = lim;
        o.any_whitespace = (data[0] & 4) != 0;
        g = compile_json_schema(text, o);
      }
    }
  } catch (const Error&) {
    return 0;
  }
  if (g.states.size() > 3000) return 0;
  auto cg = compile_for(std::move(g), fuzz_vocab(), false);
  GrammarMatcher m(cg);
  std::vector<uint32_t> mask(cg->tokenizer().mask_words()), again(mask.size());
  uint32_t pick = size;
  for (int step = 0; step < 8 && !m.is_terminated(); ++step) {
    m.fill_mask(mask.data());
    std::vector<int32_t> allowed;
    for (size_t w = 0; w < mask.size(); ++w)
      for (uint32_t x = mask[w]; x; x &= x - 1) allowed.push_back(int32_t(w * 32 + __builtin_ctz(x)));
    if (allowed.empty()) break;
    int32_t t = allowed[(pick = pick * 1103515245u + 12345u) % allowed.size()];
    if (!m.accept(t)) __builtin_trap();
    m.rollback(1);
    m.fill_mask(again.data());
    if (again != mask) __builtin_trap();
    if (!m.accept(t)) __builtin_trap();
    (void)m.forced_bytes(64);
  }
  return 0;
}

}  // namespace deepinfer::grammar::fuzz
