// The V4 compressor and lightning indexer checked against hand-computed values from the formulas of
// model-spec.md §3 (softmax pooling per channel, overlapping Ca/Cb groups, RMSNorm, top-k selection).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "layers/compressor/v4_compressor.h"
#include "layers/indexer/lightning_indexer.h"

using namespace deepinfer;

namespace {

Tensor make(std::vector<int64_t> shape, std::vector<float> values) {
  Tensor t(std::move(shape));
  t.data = std::move(values);
  return t;
}

// RMSNorm of model-spec §2, written out for the expected values.
std::vector<double> rms(std::vector<double> v, const std::vector<double>& w, double eps) {
  double ss = 0;
  for (double x : v) ss += x * x;
  double r = 1.0 / std::sqrt(ss / double(v.size()) + eps);
  for (size_t i = 0; i < v.size(); ++i) v[i] = w[i] * v[i] * r;
  return v;
}

double softmax_pool(const std::vector<double>& gates, const std::vector<double>& kv) {
  double den = 0, num = 0;
  for (size_t i = 0; i < gates.size(); ++i) {
    den += std::exp(gates[i]);
    num += std::exp(gates[i]) * kv[i];
  }
  return num / den;
}

}  // namespace

// HCA (ratio 2, non-overlapping): kv = x (identity wkv), gate = wgate x + ape[pos mod 2].
TEST(V4Compressor, NonOverlappingGroupIsGateSoftmaxPoolThenNorm) {
  V4CompressorWeights w;
  w.ratio = 2;
  w.dim = 2;
  w.overlap = false;
  w.wkv = make({2, 2}, {1, 0, 0, 1});
  w.wgate = make({2, 2}, {0.5f, 0, 0, -1});
  w.ape = make({2, 2}, {0.25f, 0, -0.5f, 0.75f});
  w.norm = make({2}, {2.0f, 0.5f});
  V4CompressorState s;
  s.reset(w);
  const float eps = 1e-6f;
  float x0[2] = {1.0f, 3.0f}, x1[2] = {-2.0f, 0.5f}, entry[2];
  EXPECT_FALSE(v4_compressor_push(w, s, x0, 2, 0, eps, false, entry));
  ASSERT_TRUE(v4_compressor_push(w, s, x1, 2, 1, eps, false, entry));
  EXPECT_EQ(s.entries, 1);
  // channel 0: gates 0.5*1+0.25, 0.5*(-2)-0.5; channel 1: gates -3+0, -0.5+0.75
  std::vector<double> pooled = {softmax_pool({0.75, -1.5}, {1.0, -2.0}), softmax_pool({-3.0, 0.25}, {3.0, 0.5})};
  std::vector<double> expected = rms(pooled, {2.0, 0.5}, eps);
  EXPECT_NEAR(entry[0], expected[0], 1e-6);
  EXPECT_NEAR(entry[1], expected[1], 1e-6);
}

// CSA (ratio 4, overlapping): entry 0 pools only Cb of group 0; entry 1 pools Ca of group 0 and Cb of group 1.
// With zero gates every pool is a plain mean, so the expected values are averages of the token inputs.
TEST(V4Compressor, OverlappingEntryPoolsPreviousCaAndCurrentCb) {
  V4CompressorWeights w;
  w.ratio = 4;
  w.dim = 2;
  w.overlap = true;
  // hidden 4: Ca = x[0:2], Cb = x[2:4].
  w.wkv = make({4, 4}, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1});
  w.wgate = Tensor({4, 4}, 0.0f);
  w.ape = Tensor({4, 4}, 0.0f);
  w.norm = make({2}, {1.0f, 1.0f});
  V4CompressorState s;
  s.reset(w);
  const float eps = 1e-6f;
  std::vector<std::vector<float>> x(8);
  for (int t = 0; t < 8; ++t) x[t] = {float(t + 1), float(2 * t - 5), float(t * t) / 4, float(3 - t)};
  std::vector<std::vector<float>> entries;
  for (int t = 0; t < 8; ++t) {
    float e[2];
    if (v4_compressor_push(w, s, x[t].data(), 4, t, eps, false, e)) entries.push_back({e[0], e[1]});
  }
  ASSERT_EQ(entries.size(), 2u);
  auto mean = [&](int channel, std::vector<int> tokens) {
    double m = 0;
    for (int t : tokens) m += x[t][channel];
    return m / double(tokens.size());
  };
  std::vector<double> e0 = rms({mean(2, {0, 1, 2, 3}), mean(3, {0, 1, 2, 3})}, {1, 1}, eps);
  double c0 = (mean(0, {0, 1, 2, 3}) + mean(2, {4, 5, 6, 7})) / 2;
  double c1 = (mean(1, {0, 1, 2, 3}) + mean(3, {4, 5, 6, 7})) / 2;
  std::vector<double> e1 = rms({c0, c1}, {1, 1}, eps);
  EXPECT_NEAR(entries[0][0], e0[0], 1e-6);
  EXPECT_NEAR(entries[0][1], e0[1], 1e-6);
  EXPECT_NEAR(entries[1][0], e1[0], 1e-6);
  EXPECT_NEAR(entries[1][1], e1[1], 1e-6);
}

TEST(V4Compressor, OutOfOrderPositionIsAnError) {
  V4CompressorWeights w;
  w.ratio = 2;
  w.dim = 2;
  w.wkv = Tensor({2, 2}, 0.0f);
  w.wgate = Tensor({2, 2}, 0.0f);
  w.ape = Tensor({2, 2}, 0.0f);
  w.norm = Tensor({2}, 1.0f);
  V4CompressorState s;
  s.reset(w);
  float x[2] = {1, 1}, e[2];
  EXPECT_THROW(v4_compressor_push(w, s, x, 2, 1, 1e-6f, false, e), Error);
}

namespace {

// An indexer with 2 heads of width 2, no rope channels used by these tests.
LightningIndexerWeights small_indexer(int topk) {
  LightningIndexerWeights ix;
  ix.heads = 2;
  ix.dim = 2;
  ix.topk = topk;
  return ix;
}

IndexQuery query(std::vector<float> q, std::vector<double> w) { return {std::move(q), std::move(w)}; }

}  // namespace

// score(s) = sum_h w_h relu(q_h . k_s): head 0 sees k.x, head 1 sees -k.x with weight 2.
TEST(LightningIndexer, TopEntriesUseReluWeightedScoresAndAscendingIds) {
  LightningIndexerWeights ix = small_indexer(2);
  IndexQuery iq = query({1, 0, -1, 0}, {1.0, 2.0});
  // keys (x, y): scores 3, 2*1=2, 0.5, 2*4=8, 0
  std::vector<float> keys = {3, 0, -1, 7, 0.5f, 0, -4, 1, 0, 9};
  std::vector<int64_t> top = lightning_top_entries(ix, iq, keys.data(), 5);
  EXPECT_EQ(top, (std::vector<int64_t>{0, 3}));
  // Only the visible prefix is scored: among entries 0..2 the best two are 0 and 1.
  EXPECT_EQ(lightning_top_entries(ix, iq, keys.data(), 3), (std::vector<int64_t>{0, 1}));
}

TEST(LightningIndexer, FewerVisibleEntriesThanTopkKeepsAll) {
  LightningIndexerWeights ix = small_indexer(8);
  IndexQuery iq = query({1, 0, -1, 0}, {1.0, 1.0});
  std::vector<float> keys = {-1, 0, -2, 0, -3, 0};
  EXPECT_EQ(lightning_top_entries(ix, iq, keys.data(), 3), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_TRUE(lightning_top_entries(ix, iq, keys.data(), 0).empty());
}

TEST(LightningIndexer, EqualScoresPreferLowerIds) {
  LightningIndexerWeights ix = small_indexer(2);
  IndexQuery iq = query({1, 0, 0, 1}, {1.0, 1.0});
  // every key scores 1
  std::vector<float> keys = {1, 0, 0, 1, 1, 0, 0.5f, 0.5f};
  EXPECT_EQ(lightning_top_entries(ix, iq, keys.data(), 4), (std::vector<int64_t>{0, 1}));
}
