#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace deepinfer::runtime {

namespace {

// Philox4x64 round constants (multipliers and Weyl key increments) of the Random123 paper.
constexpr uint64_t kPhiloxM0 = 0xD2E7470EE14C6C93ULL;
constexpr uint64_t kPhiloxM1 = 0xCA5A826395121157ULL;
constexpr uint64_t kPhiloxW0 = 0x9E3779B97F4A7C15ULL;
constexpr uint64_t kPhiloxW1 = 0xBB67AE8584CAA73BULL;

inline void mulhilo(uint64_t a, uint64_t b, uint64_t& hi, uint64_t& lo) {
  unsigned __int128 p = (unsigned __int128)a * b;
  hi = uint64_t(p >> 64);
  lo = uint64_t(p);
}

// Token order for truncation: more likely first, the lower id first among equals (a total order, so the
// kept set never depends on a sort's stability).
inline bool more_likely(const std::vector<double>& p, int32_t a, int32_t b) {
  return p[size_t(a)] > p[size_t(b)] || (p[size_t(a)] == p[size_t(b)] && a < b);
}

void renormalise(std::vector<double>& p) {
  double sum = 0.0;
  for (double v : p) sum += v;  // token order
  if (sum > 0)
    for (double& v : p) v /= sum;
}

}  // namespace

std::array<uint64_t, 4> philox4x64_10(std::array<uint64_t, 4> c, std::array<uint64_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    uint64_t hi0, lo0, hi1, lo1;
    mulhilo(kPhiloxM0, c[0], hi0, lo0);
    mulhilo(kPhiloxM1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kPhiloxW0;
    k[1] += kPhiloxW1;
  }
  return c;
}

double uniform_at(uint64_t seed, uint64_t position) {
  auto block = philox4x64_10({position, 0, 0, 0}, {seed, 0});
  return double(block[0] >> 11) * 0x1.0p-53;
}

void PenaltyState::set_prompt(std::span<const int32_t> prompt) {
  prompt_tokens.assign(prompt.begin(), prompt.end());
  std::sort(prompt_tokens.begin(), prompt_tokens.end());
  prompt_tokens.erase(std::unique(prompt_tokens.begin(), prompt_tokens.end()), prompt_tokens.end());
}

bool PenaltyState::seen(int32_t token) const {
  return output_counts.count(token) || std::binary_search(prompt_tokens.begin(), prompt_tokens.end(), token);
}

void apply_penalties(std::span<float> logits, const SamplingParams& params, const PenaltyState& state) {
  const int64_t vocab = int64_t(logits.size());
  if (params.repetition_penalty != 1.0f) {
    const float r = params.repetition_penalty;
    auto penalise = [&](int32_t t) {
      if (t < 0 || t >= vocab) return;
      float& l = logits[size_t(t)];
      l = l > 0 ? l / r : l * r;
    };
    for (int32_t t : state.prompt_tokens) penalise(t);
    for (const auto& [t, n] : state.output_counts)
      if (!std::binary_search(state.prompt_tokens.begin(), state.prompt_tokens.end(), t)) penalise(t);
  }
  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    for (const auto& [t, n] : state.output_counts) {
      if (t < 0 || t >= vocab) continue;
      logits[size_t(t)] -= params.frequency_penalty * float(n) + params.presence_penalty;
    }
  }
}

std::vector<double> sampling_distribution(std::span<const float> logits, const SamplingParams& params) {
  const size_t n = logits.size();
  std::vector<double> p(n, 0.0);
  if (n == 0) return p;
  const double inv_t = 1.0 / double(params.temperature);
  double mx = -std::numeric_limits<double>::infinity();
  for (float l : logits) mx = std::max(mx, double(l) * inv_t);
  for (size_t i = 0; i < n; ++i) p[i] = std::exp(double(logits[i]) * inv_t - mx);
  renormalise(p);

  if (params.top_k > 0 && size_t(params.top_k) < n) {
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::nth_element(order.begin(), order.begin() + params.top_k, order.end(),
                     [&](int32_t a, int32_t b) { return more_likely(p, a, b); });
    for (size_t i = size_t(params.top_k); i < n; ++i) p[size_t(order[i])] = 0.0;
    renormalise(p);
  }
  if (params.top_p < 1.0f) {
    std::vector<int32_t> order;
    for (size_t i = 0; i < n; ++i)
      if (p[i] > 0) order.push_back(int32_t(i));
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return more_likely(p, a, b); });
    double cum = 0.0;
    size_t keep = order.size();
    for (size_t i = 0; i < order.size(); ++i) {
      cum += p[size_t(order[i])];
      if (cum >= double(params.top_p)) {
        keep = i + 1;
        break;
      }
    }
    for (size_t i = keep; i < order.size(); ++i) p[size_t(order[i])] = 0.0;
    renormalise(p);
  }
  if (params.min_p > 0.0f) {
    const double pmax = *std::max_element(p.begin(), p.end());
    const double floor = double(params.min_p) * pmax;
    for (double& v : p)
      if (v < floor) v = 0.0;
    renormalise(p);
  }
  return p;
}

int32_t draw(const std::vector<double>& probs, double u) {
  double cum = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    cum += probs[i];
    last = int32_t(i);
    if (u < cum) return last;
  }
  return last < 0 ? 0 : last;  // u beyond the rounded total: the last token that may be drawn
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[size_t(best)]) best = int32_t(i);
  return best;
}

size_t apply_token_mask(std::span<float> logits, const uint32_t* mask, size_t mask_vocab) {
  const float ninf = -std::numeric_limits<float>::infinity();
  size_t allowed = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (i < mask_vocab && ((mask[i >> 5] >> (i & 31)) & 1u)) {
      ++allowed;
    } else {
      logits[i] = ninf;
    }
  }
  return allowed;
}

RequestGrammar::RequestGrammar(std::shared_ptr<const grammar::CompiledGrammar> cg, int32_t think_end_id)
    : matcher_(std::move(cg)), think_end_(think_end_id), in_grammar_(think_end_id < 0) {}

void RequestGrammar::fill_mask(std::vector<uint32_t>& words) {
  words.assign(matcher_.compiled().tokenizer().mask_words(), 0u);
  matcher_.fill_mask(words.data());
}

bool RequestGrammar::accept(int32_t token) {
  if (!in_grammar_) {
    const bool end = token == think_end_;
    kinds_.push_back(end ? 1 : 0);
    if (end) in_grammar_ = true;
    return true;
  }
  if (!matcher_.accept(token)) return false;
  kinds_.push_back(2);
  return true;
}

void RequestGrammar::rollback(size_t n) {
  if (n > kinds_.size()) throw std::out_of_range("RequestGrammar::rollback: more tokens than accepted");
  size_t fed = 0;
  for (size_t i = 0; i < n; ++i) {
    uint8_t k = kinds_.back();
    kinds_.pop_back();
    if (k == 2) ++fed;
    if (k == 1) in_grammar_ = false;
  }
  if (fed) matcher_.rollback(fed);
}

SampleResult sample(std::span<float> logits, const SamplingParams& params, const PenaltyState& penalties,
                    uint64_t seed, uint64_t position, const uint32_t* mask, size_t mask_vocab) {
  apply_penalties(logits, params, penalties);
  if (mask && apply_token_mask(logits, mask, mask_vocab) == 0)
    throw std::runtime_error("the grammar allows no token here");
  SampleResult r;
  if (params.temperature == 0.0f) {
    r.token = argmax(logits);
  } else {
    r.token = draw(sampling_distribution(logits, params), uniform_at(seed, position));
  }
  if (params.logprobs >= 0) {
    double mx = -std::numeric_limits<double>::infinity();
    for (float l : logits) mx = std::max(mx, double(l));
    double sum = 0.0;
    for (float l : logits) sum += std::exp(double(l) - mx);
    const double lse = mx + std::log(sum);
    r.logprob.token_id = r.token;
    r.logprob.logprob = float(double(logits[size_t(r.token)]) - lse);
    if (params.logprobs > 0) {
      std::vector<int32_t> order(logits.size());
      std::iota(order.begin(), order.end(), 0);
      size_t k = std::min(order.size(), size_t(params.logprobs));
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
      });
      for (size_t i = 0; i < k; ++i)
        if (std::isfinite(logits[size_t(order[i])]))  // masked-out tokens are no alternatives
          r.logprob.top.push_back({order[i], float(double(logits[size_t(order[i])]) - lse)});
    }
  }
  return r;
}

}  // namespace deepinfer::runtime
