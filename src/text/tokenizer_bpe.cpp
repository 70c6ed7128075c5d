#include "text/tokenizer_bpe.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <functional>
#include <mutex>

#include "core/error.h"
#include "text/unicode.h"

namespace deepinfer {

namespace {

// GPT-2 bytes_to_unicode: printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF keep their value; the others
// get U+0100 + n in byte order.
struct ByteLevelAlphabet {
  std::array<char32_t, 256> char_of_byte{};
  ByteLevelAlphabet() {
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      char_of_byte[b] = printable ? static_cast<char32_t>(b) : next++;
    }
  }
};

const ByteLevelAlphabet& alphabet() {
  static const ByteLevelAlphabet a;
  return a;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {  // the alphabet never goes past U+0143, so two bytes suffice; kept general for clarity
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

inline uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

char32_t byte_level_char(uint8_t byte) { return alphabet().char_of_byte[byte]; }

int byte_of_byte_level_char(char32_t cp) {
  if (cp < 0x100) {
    const bool printable = (cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE);
    return printable ? static_cast<int>(cp) : -1;
  }
  const auto& table = alphabet().char_of_byte;
  for (int b = 0; b < 256; ++b)
    if (table[b] == cp) return b;
  return -1;
}

std::string to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(byte_level_char(static_cast<uint8_t>(c)), out);
  return out;
}

// Open-addressing map (left id, right id) -> (rank, merged id). The merge lookup is the inner loop of
// BPE, so it avoids std::unordered_map's node chasing.
struct BytePairModel::MergeTable {
  struct Slot {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    int32_t merged = -1;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  std::vector<Slot> slots;
  uint64_t mask = 0;
  int shift = 0;

  explicit MergeTable(size_t count) {
    size_t cap = 16;
    shift = 60;
    while (cap < count * 2) cap <<= 1, --shift;
    slots.assign(cap, Slot{});
    mask = cap - 1;
  }
  size_t home(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift; }

  // Later duplicates overwrite earlier ones, as building HF's HashMap from the merge list does.
  void insert(uint64_t key, uint32_t rank, int32_t merged) {
    for (size_t i = home(key);; i = (i + 1) & mask) {
      if (slots[i].key == kEmpty || slots[i].key == key) {
        slots[i] = {key, rank, merged};
        return;
      }
    }
  }
  const Slot* find(uint64_t key) const {
    for (size_t i = home(key);; i = (i + 1) & mask) {
      if (slots[i].key == key) return &slots[i];
      if (slots[i].key == kEmpty) return nullptr;
    }
  }
};

// Cache of piece -> ids for frequent pieces (words, indentation). Sharded so that threads sharing one
// Tokenizer rarely contend; a full shard is cleared, which keeps memory bounded and favours recent text.
class BytePairModel::PieceCache {
 public:
  static constexpr size_t kMaxPieceBytes = 256;

  bool lookup(std::string_view piece, std::vector<int32_t>& ids) {
    Shard& shard = shard_of(piece);
    std::lock_guard lock(shard.mutex);
    auto it = shard.map.find(piece);
    if (it == shard.map.end()) return false;
    ids.insert(ids.end(), it->second.begin(), it->second.end());
    return true;
  }
  void store(std::string_view piece, const int32_t* first, const int32_t* last) {
    Shard& shard = shard_of(piece);
    std::lock_guard lock(shard.mutex);
    if (shard.map.size() >= kEntriesPerShard) shard.map.clear();
    shard.map.emplace(std::string(piece), std::vector<int32_t>(first, last));
  }

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kEntriesPerShard = 4096;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map;
  };
  Shard& shard_of(std::string_view piece) { return shards_[Hash{}(piece) % kShards]; }

  std::array<Shard, kShards> shards_;
};

BytePairModel::BytePairModel(const std::unordered_map<std::string, int32_t>& vocab,
                             const std::vector<std::pair<std::string, std::string>>& merges)
    : merges_(std::make_unique<MergeTable>(merges.size())), cache_(std::make_unique<PieceCache>()) {
  for (int b = 0; b < 256; ++b) {
    std::string spelling;
    append_utf8(byte_level_char(static_cast<uint8_t>(b)), spelling);
    auto it = vocab.find(spelling);
    DI_CHECK(it != vocab.end(), "tokenizer.json: byte-level BPE vocab lacks the token for byte " +
                                    std::to_string(b) + " ('" + spelling + "')");
    byte_token_[b] = it->second;
  }
  auto id_of = [&](const std::string& token, size_t rank) {
    auto it = vocab.find(token);
    DI_CHECK(it != vocab.end(), "tokenizer.json: merge " + std::to_string(rank) + " uses token '" + token +
                                    "' that is not in the vocab");
    return it->second;
  };
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const int32_t merged = id_of(left + right, rank);
    merges_->insert(pair_key(id_of(left, rank), id_of(right, rank)), static_cast<uint32_t>(rank), merged);
  }
}

BytePairModel::~BytePairModel() = default;
BytePairModel::BytePairModel(BytePairModel&&) noexcept = default;

void BytePairModel::encode_piece(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.size() == 1) {
    ids.push_back(byte_token_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  const bool cacheable = piece.size() <= PieceCache::kMaxPieceBytes;
  if (cacheable && cache_->lookup(piece, ids)) return;
  const size_t first = ids.size();
  merge_symbols(piece, ids);
  if (cacheable) cache_->store(piece, ids.data() + first, ids.data() + ids.size());
}

// Same merge order as merge_symbols, by rescanning all adjacent pairs after each merge: for short pieces
// this is cheaper than maintaining a heap. Strict '<' keeps the leftmost pair on equal ranks.
void BytePairModel::merge_short(std::string_view piece, std::vector<int32_t>& ids) const {
  thread_local std::vector<int32_t> word;
  word.clear();
  for (char c : piece) word.push_back(byte_token_[static_cast<uint8_t>(c)]);
  for (;;) {
    uint32_t best_rank = UINT32_MAX;
    size_t best_at = 0;
    int32_t merged = -1;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const auto* m = merges_->find(pair_key(word[i], word[i + 1]));
      if (m != nullptr && m->rank < best_rank) {
        best_rank = m->rank;
        best_at = i;
        merged = m->merged;
      }
    }
    if (merged < 0) break;
    word[best_at] = merged;
    word.erase(word.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
  ids.insert(ids.end(), word.begin(), word.end());
}

// HF BPE word merging: start from one symbol per byte and repeatedly apply the merge of lowest rank
// among adjacent pairs, the leftmost one on ties, until no adjacent pair has a merge. A min-heap of
// (rank, position) with lazy invalidation keeps long pieces O(n log n).
void BytePairModel::merge_symbols(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.size() <= kShortPieceBytes) {
    merge_short(piece, ids);
    return;
  }
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<uint64_t> heap;  // (rank << 32) | left position, smallest on top
  const int32_t n = static_cast<int32_t>(piece.size());
  symbols.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i) symbols[i] = {byte_token_[static_cast<uint8_t>(piece[i])], i - 1, i + 1, true};
  symbols[n - 1].next = -1;

  auto push_pair = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    if (const auto* m = merges_->find(pair_key(symbols[left].id, symbols[right].id))) {
      heap.push_back((static_cast<uint64_t>(m->rank) << 32) | static_cast<uint32_t>(left));
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const uint64_t top = heap.back();
    heap.pop_back();
    const auto rank = static_cast<uint32_t>(top >> 32);
    const auto left = static_cast<int32_t>(top & 0xFFFFFFFFu);
    Symbol& l = symbols[left];
    if (!l.alive || l.next < 0) continue;
    // Stale entry: the pair at this position changed since it was pushed.
    const auto* m = merges_->find(pair_key(l.id, symbols[l.next].id));
    if (m == nullptr || m->rank != rank) continue;
    Symbol& r = symbols[l.next];
    l.id = m->merged;
    r.alive = false;
    l.next = r.next;
    if (l.next >= 0) symbols[l.next].prev = left;
    push_pair(l.prev);
    push_pair(left);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

}  // namespace deepinfer
