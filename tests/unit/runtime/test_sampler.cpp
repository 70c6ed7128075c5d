// Sampler math: expected values are hand-computed distributions, an independent Philox (numpy), and a
// chi-square bound for the empirical distribution of seeded draws.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/sampler.h"

namespace deepinfer::runtime {
namespace {

std::vector<float> log_probs(std::vector<double> p) {
  std::vector<float> l;
  for (double v : p) l.push_back(float(std::log(v)));
  return l;
}

void expect_dist(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "token " << i;
}

// Expected words from numpy 1.26's independent Philox4x64-10:
//   g = numpy.random.Philox(key=[12345, 0], counter=[0, 0, 0, 0]); g.random_raw(8)
// numpy increments the counter before each block, so its first block is counter {1,0,0,0}, the second {2,0,0,0}.
TEST(Philox, MatchesNumpy) {
  auto b1 = philox4x64_10({1, 0, 0, 0}, {12345, 0});
  EXPECT_EQ(b1[0], 0xa5792c0a0ed6a560ULL);
  EXPECT_EQ(b1[1], 0xc63666ba8b756514ULL);
  EXPECT_EQ(b1[2], 0xc953e311f634209dULL);
  EXPECT_EQ(b1[3], 0x28db5404d83fac91ULL);
  auto b2 = philox4x64_10({2, 0, 0, 0}, {12345, 0});
  EXPECT_EQ(b2[0], 0x29338c7559c2d300ULL);
  EXPECT_EQ(b2[3], 0x101aa335768a55edULL);
}

TEST(Philox, UniformIsAFunctionOfSeedAndPosition) {
  EXPECT_EQ(uniform_at(7, 100), uniform_at(7, 100));
  EXPECT_NE(uniform_at(7, 100), uniform_at(7, 101));
  EXPECT_NE(uniform_at(7, 100), uniform_at(8, 100));
  // 53 bits of the first word: (0xa5792c0a0ed6a560 >> 11) / 2^53.
  EXPECT_EQ(uniform_at(12345, 1), double(0xa5792c0a0ed6a560ULL >> 11) / 9007199254740992.0);
}

TEST(Sampler, Penalties) {
  // logits [2, -1, 0.5, 3]; prompt {0, 1}; output 2, 2, 3.
  std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f};
  PenaltyState st;
  std::vector<int32_t> prompt = {1, 0, 1};
  st.set_prompt(prompt);
  st.add_output(2);
  st.add_output(2);
  st.add_output(3);
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  apply_penalties(l, p, st);
  // repetition: 2/2 = 1, -1*2 = -2, 0.5/2 = 0.25, 3/2 = 1.5; then token 2: 0.25 - 2*0.5 - 0.25, token 3: 1.5 - 0.5 - 0.25.
  EXPECT_FLOAT_EQ(l[0], 1.0f);
  EXPECT_FLOAT_EQ(l[1], -2.0f);
  EXPECT_FLOAT_EQ(l[2], -1.0f);
  EXPECT_FLOAT_EQ(l[3], 0.75f);
  // A token seen nowhere is untouched.
  std::vector<float> l2 = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  apply_penalties(l2, p, st);
  EXPECT_FLOAT_EQ(l2[4], 1.0f);
}

TEST(Sampler, TemperatureAndMasks) {
  const std::vector<float> l = log_probs({0.4, 0.3, 0.2, 0.1});
  SamplingParams p;
  expect_dist(sampling_distribution(l, p), {0.4, 0.3, 0.2, 0.1});
  p.temperature = 2.0f;  // p^(1/2), renormalised
  double z = std::sqrt(0.4) + std::sqrt(0.3) + std::sqrt(0.2) + std::sqrt(0.1);
  expect_dist(sampling_distribution(l, p), {std::sqrt(0.4) / z, std::sqrt(0.3) / z, std::sqrt(0.2) / z, std::sqrt(0.1) / z});

  p = {};
  p.top_k = 2;
  expect_dist(sampling_distribution(l, p), {4.0 / 7, 3.0 / 7, 0, 0});
  p = {};
  p.top_p = 0.6f;  // 0.4 < 0.6 <= 0.7
  expect_dist(sampling_distribution(l, p), {4.0 / 7, 3.0 / 7, 0, 0});
  p.top_p = 0.75f;  // 0.7 < 0.75 <= 0.9
  expect_dist(sampling_distribution(l, p), {4.0 / 9, 3.0 / 9, 2.0 / 9, 0});
  p.top_p = 0.35f;  // the most likely token alone
  expect_dist(sampling_distribution(l, p), {1, 0, 0, 0});
  p = {};
  p.min_p = 0.6f;  // floor 0.24
  expect_dist(sampling_distribution(l, p), {4.0 / 7, 3.0 / 7, 0, 0});
  p = {};
  p.top_k = 3;
  p.top_p = 0.8f;  // top-p on the renormalised top-3: 4/9, 7/9 < 0.8, 1
  expect_dist(sampling_distribution(l, p), {4.0 / 9, 3.0 / 9, 2.0 / 9, 0});
  p.top_p = 0.7f;
  expect_dist(sampling_distribution(l, p), {4.0 / 7, 3.0 / 7, 0, 0});
  // Ties at the top-k boundary keep the lower id.
  p = {};
  p.top_k = 1;
  expect_dist(sampling_distribution(std::vector<float>{0.0f, 1.0f, 1.0f}, p), {0, 1, 0});
}

TEST(Sampler, DrawAndArgmax) {
  std::vector<double> probs = {0.25, 0.0, 0.75};
  EXPECT_EQ(draw(probs, 0.0), 0);
  EXPECT_EQ(draw(probs, 0.1), 0);
  EXPECT_EQ(draw(probs, 0.25), 2);
  EXPECT_EQ(draw(probs, 0.9999999), 2);
  EXPECT_EQ(argmax(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}), 1);
}

TEST(Sampler, Logprobs) {
  std::vector<float> l = log_probs({0.5, 0.25, 0.125, 0.125});
  SamplingParams p = SamplingParams::greedy();
  p.logprobs = 2;
  PenaltyState st;
  SampleResult r = sample(l, p, st, 1, 0);
  EXPECT_EQ(r.token, 0);
  EXPECT_NEAR(r.logprob.logprob, std::log(0.5), 1e-6);
  ASSERT_EQ(r.logprob.top.size(), 2u);
  EXPECT_EQ(r.logprob.top[1].token_id, 1);
  EXPECT_NEAR(r.logprob.top[1].logprob, std::log(0.25), 1e-6);
}

// Pearson chi-square of n seeded draws (one per position) against the expected distribution.
double chi_square(const std::vector<float>& logits, const SamplingParams& p, uint64_t seed, int n,
                  std::vector<double>* expected_out = nullptr) {
  std::vector<double> expected = sampling_distribution(logits, p);
  std::vector<int> counts(logits.size(), 0);
  PenaltyState st;
  for (int i = 0; i < n; ++i) {
    std::vector<float> row = logits;
    ++counts[size_t(sample(row, p, st, seed, uint64_t(i)).token)];
  }
  double chi2 = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "masked token " << i << " was drawn";
      continue;
    }
    double e = expected[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  if (expected_out) *expected_out = expected;
  return chi2;
}

TEST(Sampler, SeededDrawsFollowTheDistribution) {
  const std::vector<float> logits = {1.0f, 0.5f, -0.3f, 2.0f, 0.0f, -1.0f, 1.5f, 0.2f};
  SamplingParams p;
  p.temperature = 0.8f;
  // 7 degrees of freedom: the 0.999 quantile of chi2(7) is 24.32.
  EXPECT_LT(chi_square(logits, p, 2024, 20000), 24.32);
  // top-k 4: 3 degrees of freedom, 0.999 quantile 16.27; masked tokens never appear.
  p.top_k = 4;
  EXPECT_LT(chi_square(logits, p, 99, 20000), 16.27);
  // min-p 0.3 on temperature 1: tokens 3 (p_max), 6, 0 remain; 2 degrees of freedom, 0.999 quantile 13.82.
  p = {};
  p.min_p = 0.3f;
  std::vector<double> expected;
  EXPECT_LT(chi_square(logits, p, 5, 20000, &expected), 13.82);
  int kept = 0;
  for (double e : expected) kept += e > 0;
  EXPECT_EQ(kept, 3);
}

}  // namespace
}  // namespace deepinfer::runtime
