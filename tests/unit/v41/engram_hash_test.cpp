// Engram hash constants against the published test vectors of the released V4.1 config (model-spec.md §4
// "Engram": primes above 16,000,000, table sizes 384006168 / 384016682, numpy PCG64 multipliers) and the
// hash recurrence against hand-computed row ids.
#include <gtest/gtest.h>

#include "core/error.h"
#include "layers/engram/ngram_hash.h"

namespace deepinfer {
namespace {

ModelConfig released_engram_config() {
  ModelConfig c;
  c.engram_layer_ids = {1, 14};
  c.engram_num_embeddings = {384006168, 384016682};
  c.engram_max_ngram_size = 4;
  c.engram_vocab_size = 16000000;
  c.engram_n_heads = 8;
  c.engram_compressed_vocab_size = 99092;
  return c;
}

TEST(EngramHash, ReleasedConfigPrimesAndTableSizes) {
  std::vector<EngramLayerHash> h = derive_engram_hashes(released_engram_config());
  ASSERT_EQ(h.size(), 2u);
  ASSERT_EQ(h[0].primes.size(), 24u);
  EXPECT_EQ(h[0].primes[0], 16000057);
  EXPECT_EQ(h[0].primes[1], 16000079);
  EXPECT_EQ(h[0].primes[2], 16000081);
  EXPECT_EQ(h[1].primes.back(), 16000889);
  EXPECT_EQ(h[0].table_rows, 384006168);
  EXPECT_EQ(h[1].table_rows, 384016682);
  EXPECT_EQ(h[0].offsets[0], 0);
  EXPECT_EQ(h[0].offsets[1], 16000057);
}

TEST(EngramHash, ReleasedConfigMultipliersMatchNumpyPcg64) {
  std::vector<EngramLayerHash> h = derive_engram_hashes(released_engram_config());
  EXPECT_EQ(h[0].multipliers,
            (std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391}));
  EXPECT_EQ(h[1].multipliers,
            (std::vector<int64_t>{67716810739261, 51510806800915, 30921347202721, 82619226485591}));
}

TEST(EngramHash, TooSmallTableIsAnError) {
  ModelConfig c = released_engram_config();
  c.engram_num_embeddings[1] = 1000;
  EXPECT_THROW(derive_engram_hashes(c), Error);
}

TEST(EngramHash, RowIdsFollowTheXorRecurrenceAndPadBlocking) {
  EngramLayerHash h;
  h.primes = {7, 11, 13, 17};  // 2 n-gram orders x 2 heads
  h.offsets = {0, 7, 18, 31};
  h.multipliers = {3, 5, 9};
  const int64_t pad = 2;
  int64_t rows[4];
  // Full history (newest first): cids 4, 6, 1.
  int64_t history[3] = {4, 6, 1};
  engram_row_ids(h, history, 3, 3, 2, pad, rows);
  int64_t bigram = (4 * 3) ^ (6 * 5), trigram = bigram ^ (1 * 9);
  EXPECT_EQ(rows[0], bigram % 7 + 0);
  EXPECT_EQ(rows[1], bigram % 11 + 7);
  EXPECT_EQ(rows[2], trigram % 13 + 18);
  EXPECT_EQ(rows[3], trigram % 17 + 31);
  // A dead position at distance 1 blocks it and everything older: both become the pad id.
  int64_t dead[3] = {4, -1, 1};
  engram_row_ids(h, dead, 3, 3, 2, pad, rows);
  bigram = (4 * 3) ^ (pad * 5);
  trigram = bigram ^ (pad * 9);
  EXPECT_EQ(rows[0], bigram % 7);
  EXPECT_EQ(rows[3], trigram % 17 + 31);
  // The first token of a sequence has no history: missing positions are the pad id too.
  engram_row_ids(h, history, 1, 3, 2, pad, rows);
  EXPECT_EQ(rows[2], ((4 * 3) ^ (pad * 5) ^ (pad * 9)) % 13 + 18);
}

}  // namespace
}  // namespace deepinfer
