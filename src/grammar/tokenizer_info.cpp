// TokenizerInfo from the engine's Tokenizer (kept apart from matcher.cpp so the grammar fuzz target links
// without the tokenizer).
#include <algorithm>

#include "core/error.h"
#include "grammar/matcher.h"
#include "text/tokenizer.h"

namespace deepinfer::grammar {

std::shared_ptr<const TokenizerInfo> TokenizerInfo::from_tokenizer(const Tokenizer& tok, std::vector<int32_t> stop_ids,
                                                                   const std::vector<int32_t>& text_added) {
  size_t n = tok.vocab_size();
  auto listed = [](const std::vector<int32_t>& v, int32_t id) { return std::find(v.begin(), v.end(), id) != v.end(); };
  std::vector<std::string> bytes(n);
  std::vector<int32_t> excluded;
  for (size_t i = 0; i < n; ++i) {
    int32_t id = int32_t(i);
    std::string_view text = tok.token_text(id);
    if (text.empty()) continue;
    if (listed(stop_ids, id)) {
      excluded.push_back(id);
      continue;
    }
    if (listed(text_added, id)) {
      tok.append_token_bytes(id, bytes[i]);
      continue;
    }
    if (tok.is_special(id)) {
      excluded.push_back(id);
      continue;
    }
    tok.append_token_bytes(id, bytes[i]);
    // Added (non-special) tokens are stored verbatim: their bytes equal their spelling and only the
    // added-token matcher produces them.
    if (bytes[i] == text) {
      auto plain = tok.encode(text, false);
      if (!(plain.size() == 1 && plain[0] == id)) {
        auto with = tok.encode(text, true);
        if (with.size() == 1 && with[0] == id) excluded.push_back(id);
      }
    }
  }
  if (stop_ids.empty()) {
    int32_t eos = tok.token_id("<｜end▁of▁sentence｜>");
    if (eos < 0) throw Error("tokenizer has no <｜end▁of▁sentence｜> token; pass stop ids explicitly");
    stop_ids.push_back(eos);
  }
  return from_bytes(std::move(bytes), std::move(stop_ids), std::move(excluded));
}

}  // namespace deepinfer::grammar
