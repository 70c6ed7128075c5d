#include "layers/engram/ngram_hash.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "core/error.h"

namespace deepinfer {

namespace {
using u128 = unsigned __int128;

// numpy SeedSequence (pool of 4 uint32 words): hashmix / mix constants of numpy/random/bit_generator.pyx.
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kPoolSize = 4;

std::vector<uint32_t> seed_sequence_state(uint64_t seed, int n_words32) {
  std::vector<uint32_t> entropy;
  do {  // little-endian 32-bit words of the integer seed (0 -> one zero word)
    entropy.push_back(uint32_t(seed & 0xffffffffu));
    seed >>= 32;
  } while (seed != 0);
  uint32_t hash_const = kInitA;
  auto hashmix = [&](uint32_t value) {
    value ^= hash_const;
    hash_const *= kMultA;
    value *= hash_const;
    return value ^ (value >> 16);
  };
  auto mix = [](uint32_t x, uint32_t y) {
    uint32_t r = kMixMultL * x - kMixMultR * y;
    return r ^ (r >> 16);
  };
  uint32_t pool[kPoolSize];
  for (int i = 0; i < kPoolSize; ++i) pool[i] = hashmix(i < int(entropy.size()) ? entropy[size_t(i)] : 0u);
  for (int src = 0; src < kPoolSize; ++src)
    for (int dst = 0; dst < kPoolSize; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
  for (size_t src = kPoolSize; src < entropy.size(); ++src)
    for (int dst = 0; dst < kPoolSize; ++dst) pool[dst] = mix(pool[dst], hashmix(entropy[src]));

  std::vector<uint32_t> state(static_cast<size_t>(n_words32));
  uint32_t out_const = kInitB;
  for (int i = 0; i < n_words32; ++i) {
    uint32_t v = pool[i % kPoolSize];
    v ^= out_const;
    out_const *= kMultB;
    v *= out_const;
    state[size_t(i)] = v ^ (v >> 16);
  }
  return state;
}

// PCG64 (128-bit LCG, XSL-RR output) as numpy seeds it from a SeedSequence.
class Pcg64 {
 public:
  explicit Pcg64(uint64_t seed) {
    std::vector<uint32_t> w = seed_sequence_state(seed, 8);
    auto u64 = [&](int i) { return uint64_t(w[size_t(2 * i)]) | (uint64_t(w[size_t(2 * i + 1)]) << 32); };
    u128 initstate = (u128(u64(0)) << 64) | u64(1);
    u128 initseq = (u128(u64(2)) << 64) | u64(3);
    state_ = 0;
    inc_ = (initseq << 1) | 1;
    step();
    state_ += initstate;
    step();
  }
  uint64_t next() {
    step();
    uint64_t x = uint64_t(state_ >> 64) ^ uint64_t(state_);
    unsigned rot = unsigned(state_ >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
  }

 private:
  void step() {
    const u128 mult = (u128(2549297995355413924ULL) << 64) | 4865540595714422341ULL;
    state_ = state_ * mult + inc_;
  }
  u128 state_ = 0, inc_ = 0;
};

bool is_prime(int64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  for (int64_t d = 3; d * d <= n; d += 2)
    if (n % d == 0) return false;
  return true;
}
}  // namespace

std::vector<int64_t> numpy_pcg64_integers(uint64_t seed, int64_t high, int n) {
  DI_CHECK(high > (int64_t(1) << 32), "engram: multiplier bound " + std::to_string(high) +
                                          " is too small for the 64-bit bounded draw");
  Pcg64 rng(seed);
  // numpy draws in [0, high - 1] with Lemire's multiply-shift rejection method.
  const uint64_t range_excl = uint64_t(high);
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) {
    u128 m = u128(rng.next()) * range_excl;
    uint64_t leftover = uint64_t(m);
    if (leftover < range_excl) {
      const uint64_t threshold = (std::numeric_limits<uint64_t>::max() - (range_excl - 1)) % range_excl;
      while (leftover < threshold) {
        m = u128(rng.next()) * range_excl;
        leftover = uint64_t(m);
      }
    }
    out.push_back(int64_t(m >> 64));
  }
  return out;
}

std::vector<EngramLayerHash> derive_engram_hashes(const ModelConfig& c) {
  std::vector<EngramLayerHash> layers;
  if (c.engram_layer_ids.empty()) return layers;
  DI_CHECK(c.engram_compressed_vocab_size > 0, "config: field 'engram_compressed_vocab_size' must be positive");
  DI_CHECK(c.engram_vocab_size >= 2, "config: field 'engram_vocab_size' must be at least 2");
  const int64_t bound = std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / c.engram_compressed_vocab_size) / 2);
  std::set<int64_t> used;
  for (size_t li = 0; li < c.engram_layer_ids.size(); ++li) {
    EngramLayerHash h;
    h.layer_id = c.engram_layer_ids[li];
    for (int n = 0; n + 1 < c.engram_max_ngram_size; ++n) {
      int64_t current = c.engram_vocab_size - 1;  // every n-gram order restarts the search; used primes are skipped
      for (int head = 0; head < c.engram_n_heads; ++head) {
        do ++current;
        while (!is_prime(current) || used.count(current));
        used.insert(current);
        h.primes.push_back(current);
      }
    }
    for (int64_t p : h.primes) {
      h.offsets.push_back(h.table_rows);
      h.table_rows += p;
    }
    DI_CHECK(h.table_rows <= c.engram_num_embeddings[li],
             "config: Engram layer " + std::to_string(h.layer_id) + " needs " + std::to_string(h.table_rows) +
                 " table rows for its hash buckets but 'engram_num_embeddings' gives " +
                 std::to_string(c.engram_num_embeddings[li]));
    for (int64_t v : numpy_pcg64_integers(uint64_t(10007) * uint64_t(h.layer_id), bound, c.engram_max_ngram_size))
      h.multipliers.push_back(2 * v + 1);
    layers.push_back(std::move(h));
  }
  return layers;
}

void engram_row_ids(const EngramLayerHash& h, const int64_t* history, int history_len, int max_ngram, int heads,
                    int64_t pad_id, int64_t* row_ids) {
  // Products cid * multiplier stay below 2^63: multipliers are < INT64_MAX / compressed_vocab.
  bool blocked = false;
  int64_t rolling = 0;
  for (int k = 0; k < max_ngram; ++k) {
    blocked = blocked || k >= history_len || history[k] < 0;
    int64_t cid = blocked ? pad_id : history[k];
    int64_t product = cid * h.multipliers[size_t(k)];
    rolling = k == 0 ? product : (rolling ^ product);
    if (k == 0) continue;
    for (int head = 0; head < heads; ++head) {
      size_t slot = size_t((k - 1) * heads + head);
      row_ids[slot] = rolling % h.primes[slot] + h.offsets[slot];
    }
  }
}

}  // namespace deepinfer
