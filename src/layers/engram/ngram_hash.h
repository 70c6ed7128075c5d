// Engram n-gram hashing of DeepSeek-V4.1 (model-spec.md §4 "Engram"): every token gets, per Engram layer,
// (max_ngram - 1) * n_heads table row ids from the compressed ids of itself and the tokens before it.
// The hash parameters are derived from the config exactly as the released code derives them:
// primes = the next unused primes above engram_vocab_size - 1 (ascending over layers, n-gram orders and
// heads), offsets = their running sum within a layer, multipliers = 2 * numpy PCG64 draws + 1 seeded with
// 10007 * layer_id. The token -> compressed id map comes from the tokenizer and is computed offline.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace deepinfer {

// numpy.random.default_rng(seed).integers(0, high, size=n, dtype=np.int64) (SeedSequence -> PCG64 ->
// Lemire bounded draws). Needs high > 2^32, which holds for every Engram config (high ~ 2^63 / vocab).
std::vector<int64_t> numpy_pcg64_integers(uint64_t seed, int64_t high, int n);

// The hash constants of one Engram layer.
struct EngramLayerHash {
  int layer_id = -1;
  std::vector<int64_t> primes;       // [(max_ngram - 1) * heads], order (n-gram order, head)
  std::vector<int64_t> offsets;      // same order: first row of each head's bucket range
  std::vector<int64_t> multipliers;  // [max_ngram]: odd, one per look-back distance
  int64_t table_rows = 0;            // sum of the primes
};

// Derives the constants of every Engram layer of `c` (in engram_layer_ids order). Throws Error when a
// layer's table (engram_num_embeddings) is smaller than its buckets need.
std::vector<EngramLayerHash> derive_engram_hashes(const ModelConfig& c);

// Row ids of one token. `history` holds the compressed ids of the current token and the ones before it,
// newest first (history[k] = token t - k); -1 marks a dead position (image token / padding) and a
// missing history entry is "before the sequence start": both become `pad_id` and block everything older.
void engram_row_ids(const EngramLayerHash& h, const int64_t* history, int history_len, int max_ngram, int heads,
                    int64_t pad_id, int64_t* row_ids);

}  // namespace deepinfer
