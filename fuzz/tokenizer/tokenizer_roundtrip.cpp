#include "tokenizer_roundtrip.h"

#include <cstdlib>
#include <string_view>
#include <vector>

#include "text/pretokenize.h"
#include "text/tokenizer.h"

namespace deepinfer {

const Tokenizer& fuzz_tokenizer() {
  static const Tokenizer tokenizer = [] {
    const char* env = std::getenv("DEEPINFER_FUZZ_TOKENIZER");
    return Tokenizer::from_file(env != nullptr ? std::string(env)
                                               : std::string(DEEPINFER_SOURCE_DIR) +
                                                     "/../shared/data/tokenizers/deepseek-v3/tokenizer.json");
  }();
  return tokenizer;
}

namespace {

std::string check_ids(const Tokenizer& tok, std::string_view text, const std::vector<int32_t>& ids, const char* mode) {
  for (int32_t id : ids)
    if (id < 0 || static_cast<size_t>(id) >= tok.vocab_size())
      return std::string(mode) + ": id " + std::to_string(id) + " outside the vocabulary";
  if (tok.decode_bytes(ids) != text) return std::string(mode) + ": decode_bytes(encode(x)) != x";
  StreamingDecoder stream(tok);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.flush();
  if (streamed != tok.decode(ids)) return std::string(mode) + ": streaming decode differs from decode";
  return {};
}

}  // namespace

std::string check_tokenizer_roundtrip(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const Tokenizer& tok = fuzz_tokenizer();

  std::vector<std::string_view> pieces;
  pretokenize(text, pieces);
  size_t covered = 0;
  for (std::string_view p : pieces) {
    if (p.empty() || p.data() != text.data() + covered) return "pretokenize: pieces do not tile the input";
    covered += p.size();
  }
  if (covered != text.size()) return "pretokenize: pieces do not cover the input";

  if (auto err = check_ids(tok, text, tok.encode(text, false), "plain"); !err.empty()) return err;
  return check_ids(tok, text, tok.encode(text, true), "special");
}

}  // namespace deepinfer
