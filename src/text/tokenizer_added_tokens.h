// Matching of added tokens (`<｜User｜>`, `<think>`, ...) written literally in text.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace deepinfer {

// A byte trie over added-token spellings that finds leftmost-longest matches, the semantics of HF's
// AddedVocabulary (an Aho-Corasick automaton in LeftmostLongest mode).
class AddedTokenMatcher {
 public:
  struct Match {
    size_t begin = kNone, end = kNone;
    int32_t id = -1;
  };
  static constexpr size_t kNone = static_cast<size_t>(-1);

  AddedTokenMatcher();
  void add(std::string_view spelling, int32_t id);
  bool empty() const { return nodes_.size() == 1; }
  // First match starting at or after pos (longest among those starting there); begin == kNone if none.
  Match find(std::string_view text, size_t pos) const;

 private:
  struct Node {
    int32_t id = -1;
    std::vector<std::pair<uint8_t, int32_t>> children;
  };
  int32_t child(int32_t node, uint8_t byte) const;

  std::vector<Node> nodes_;
  std::array<int32_t, 256> root_children_;  // direct table: most positions fail on the first byte
};

}  // namespace deepinfer
