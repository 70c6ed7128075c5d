// Byte-level BPE model (model-spec.md §7): the "model" section of a HF tokenizer.json with type "BPE".
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace deepinfer {

// GPT-2 byte-level alphabet: each byte maps to one printable code point (bytes that are printable Latin-1
// map to themselves, the other 68 to U+0100..U+0143), so BPE vocabularies can be stored as text.
char32_t byte_level_char(uint8_t byte);
// Inverse of byte_level_char; -1 for a code point outside the alphabet.
int byte_of_byte_level_char(char32_t cp);
// UTF-8 spelling of bytes in the byte-level alphabet (e.g. " hi" -> "Ġhi").
std::string to_byte_level(std::string_view bytes);

class BytePairModel {
 public:
  // vocab: byte-level spelling -> id. merges: pairs of spellings in rank order (rank = index).
  // Throws deepinfer::Error if a byte has no single-character token or a merge names an unknown token.
  BytePairModel(const std::unordered_map<std::string, int32_t>& vocab,
                const std::vector<std::pair<std::string, std::string>>& merges);
  ~BytePairModel();
  BytePairModel(BytePairModel&&) noexcept;
  BytePairModel& operator=(BytePairModel&&) = delete;

  // Appends the ids of one pre-tokenized piece, given as raw bytes.
  void encode_piece(std::string_view piece, std::vector<int32_t>& ids) const;

 private:
  struct MergeTable;
  class PieceCache;

  static constexpr size_t kShortPieceBytes = 16;

  void merge_symbols(std::string_view piece, std::vector<int32_t>& ids) const;
  void merge_short(std::string_view piece, std::vector<int32_t>& ids) const;

  std::array<int32_t, 256> byte_token_{};
  std::unique_ptr<MergeTable> merges_;
  std::unique_ptr<PieceCache> cache_;
};

}  // namespace deepinfer
