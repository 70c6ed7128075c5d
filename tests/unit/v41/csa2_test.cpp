// CSA2 compressor pooling and indexer selection against hand-computed values (model-spec.md §4).
#include <gtest/gtest.h>

#include <cmath>

#include "layers/compressor/csa2_compressor.h"
#include "layers/indexer/csa2_indexer.h"

namespace deepinfer {
namespace {

TEST(Csa2Compressor, RatioTwoPoolsPairsWithAChannelwiseSoftmax) {
  // hidden 1, head_dim 2: kv = wkv x, gate = wgate x per channel; identity norm weight, tiny eps.
  Csa2CompressorWeights w;
  w.ratio = 2;
  w.wkv = Tensor({2, 1});
  w.wkv.data = {1.0f, -2.0f};
  w.wgate = Tensor({2, 1});
  w.wgate.data = {1.0f, 0.5f};
  w.norm = Tensor({2}, 1.0f);
  Csa2PartialGroup partial;
  float latent[2];
  float x0 = 1.0f, x1 = 3.0f;
  EXPECT_FALSE(csa2_compress_token(w, &x0, partial, 1e-20f, false, latent));
  ASSERT_TRUE(csa2_compress_token(w, &x1, partial, 1e-20f, false, latent));
  // channel 0: kv (1, 3), gates (1, 3); channel 1: kv (-2, -6), gates (0.5, 1.5).
  double p0 = 1.0 / (1.0 + std::exp(2.0)), p1 = 1.0 / (1.0 + std::exp(1.0));
  double c0 = p0 * 1 + (1 - p0) * 3, c1 = p1 * -2 + (1 - p1) * -6;
  double rms = std::sqrt((c0 * c0 + c1 * c1) / 2);
  EXPECT_NEAR(latent[0], c0 / rms, 1e-6);
  EXPECT_NEAR(latent[1], c1 / rms, 1e-6);
  EXPECT_EQ(partial.filled, 0);  // the closed group is cleared
}

TEST(Csa2Indexer, TopkKeepsBestAllowedFiniteEntriesInPositionOrder) {
  std::vector<float> scores = {0.5f, 3.0f, -1.0f, 2.0f, 7.0f, -INFINITY};
  EXPECT_EQ(select_index_topk(scores, nullptr, 3), (std::vector<int64_t>{1, 3, 4}));
  std::vector<uint8_t> allowed = {1, 0, 1, 1, 0, 1};
  EXPECT_EQ(select_index_topk(scores, &allowed, 3), (std::vector<int64_t>{0, 2, 3}));
  // Fewer eligible entries than k: the -inf one is never picked.
  EXPECT_EQ(select_index_topk(scores, nullptr, 10), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(Csa2Indexer, CandidateBlocksKeepBestBlocksAndTheNewest) {
  // 7 visible entries, blocks of 2: block maxima 1.0, 5.0, 0.2, and the last (partial) block is forced in.
  std::vector<float> scores = {1.0f, -3.0f, 5.0f, 0.0f, 0.2f, 0.1f, -9.0f};
  std::vector<uint8_t> mask = select_candidate_blocks(scores, 2, 2);
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 1, 1, 0, 0, 1}));
  EXPECT_EQ(select_candidate_blocks(scores, 2, 3), (std::vector<uint8_t>{1, 1, 1, 1, 0, 0, 1}));
}

}  // namespace
}  // namespace deepinfer
