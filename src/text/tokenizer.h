// Byte-level BPE tokenizer for the DeepSeek V3/V4 family, read from a Hugging Face tokenizer.json.
//
// model-spec.md §7: GPT-2-style byte-level BPE (128,000 base entries, 127,741 merges) plus added tokens;
// the pre-tokenizer is a Sequence of three Split regexes followed by ByteLevel.
// serving.md §1.3 "Tokenization rule": template control tokens are encoded as special tokens, everything
// from the user as plain BPE, so the encoder exposes "encode without added-token matching".
//
// Thread safety: a Tokenizer is immutable after loading except for its internal BPE cache, which is
// synchronised, so one instance can be shared by many threads. StreamingDecoder is per stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

class Tokenizer {
 public:
  // Loads a tokenizer.json. Throws deepinfer::Error if the file is missing, malformed, or uses a
  // feature outside the supported subset (e.g. a pre-tokenizer other than the DeepSeek V3/V4 one).
  static Tokenizer from_file(const std::string& path);
  static Tokenizer from_json(std::string_view json_text);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Encodes text (UTF-8; invalid bytes are accepted, see encode() in tokenizer.cpp for their treatment).
  // allow_special = true: added tokens (`<｜User｜>`, `<think>`, ...) written literally in the text are
  //   matched and emitted as their ids, like HF `Tokenizer.encode`.
  // allow_special = false: the whole text is plain BPE; a typed control token costs ordinary tokens.
  // No BOS/EOS is added (the chat encoder decides that).
  std::vector<int32_t> encode(std::string_view text, bool allow_special) const;

  // Decodes ids to text. Invalid UTF-8 in the byte stream becomes U+FFFD (as HF `decode` does).
  // Throws deepinfer::Error for an id outside [0, vocab_size()) or an id with no token.
  std::string decode(std::span<const int32_t> ids) const;
  // Decodes ids to the exact byte string (no replacement of invalid UTF-8).
  std::string decode_bytes(std::span<const int32_t> ids) const;
  // Appends the bytes of one token to out (same rules as decode_bytes).
  void append_token_bytes(int32_t id, std::string& out) const;

  // Id of a vocabulary entry or added token spelled exactly `token` (vocab spelling, i.e. byte-level
  // characters for BPE entries); -1 if absent.
  int32_t token_id(std::string_view token) const;
  // Spelling of an id as stored in tokenizer.json; empty if the id is out of range or unused.
  std::string_view token_text(int32_t id) const;
  // True for added tokens marked "special": true in tokenizer.json.
  bool is_special(int32_t id) const;
  // One past the largest id (129,280 for V4).
  size_t vocab_size() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of generated ids into text pieces that are always complete UTF-8: bytes of a character
// split across tokens are held back until the character completes. The concatenation of all push()
// results and the final flush() equals Tokenizer::decode of the whole id sequence.
class StreamingDecoder {
 public:
  // The tokenizer must outlive the decoder.
  explicit StreamingDecoder(const Tokenizer& tokenizer);

  // Returns the text that became complete with this token (possibly empty).
  std::string push(int32_t id);
  // Returns whatever is held back (an incomplete sequence decodes to U+FFFD) and resets the decoder.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;  // bytes of an incomplete trailing UTF-8 sequence
};

}  // namespace deepinfer
