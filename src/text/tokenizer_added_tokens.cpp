#include "text/tokenizer_added_tokens.h"

namespace deepinfer {

AddedTokenMatcher::AddedTokenMatcher() : nodes_(1) { root_children_.fill(-1); }

int32_t AddedTokenMatcher::child(int32_t node, uint8_t byte) const {
  if (node == 0) return root_children_[byte];
  for (const auto& [b, next] : nodes_[node].children)
    if (b == byte) return next;
  return -1;
}

void AddedTokenMatcher::add(std::string_view spelling, int32_t id) {
  if (spelling.empty()) return;  // an empty token can never be matched
  int32_t node = 0;
  for (char c : spelling) {
    const auto byte = static_cast<uint8_t>(c);
    int32_t next = child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      if (node == 0) {
        root_children_[byte] = next;
      } else {
        nodes_[node].children.emplace_back(byte, next);
      }
      nodes_.emplace_back();  // after the use of nodes_[node], which this may reallocate
    }
    node = next;
  }
  nodes_[node].id = id;
}

AddedTokenMatcher::Match AddedTokenMatcher::find(std::string_view text, size_t pos) const {
  for (size_t begin = pos; begin < text.size(); ++begin) {
    int32_t node = root_children_[static_cast<uint8_t>(text[begin])];
    Match best;
    for (size_t i = begin + 1; node >= 0; ++i) {
      if (nodes_[node].id >= 0) best = {begin, i, nodes_[node].id};
      if (i == text.size()) break;
      node = child(node, static_cast<uint8_t>(text[i]));
    }
    if (best.begin != kNone) return best;
  }
  return {};
}

}  // namespace deepinfer
