// Pieces the runtime tests' fake models share (test_data_parallel, test_eplb_stats, test_eplb_rebalance): a
// deterministic 64-bit mixer for the fake routings and outputs, a Zipf-skewed expert draw, and a sequence state that
// only counts its length.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/model.h"

namespace deepinfer::fake {

// SplitMix64's finalizer: a fixed function of x (the fakes' "random" choices are reproducible by construction).
inline uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The cumulative distribution of a Zipf law over n items (weight of rank i: (i + 1)^-exponent), normalized to end at 1.
inline std::vector<double> zipf_cdf(int n, double exponent) {
  std::vector<double> cdf;
  double c = 0;
  for (int i = 0; i < n; ++i) cdf.push_back(c += std::pow(1.0 / (i + 1), exponent));
  for (double& x : cdf) x /= c;
  return cdf;
}

// The fakes' routed expert rank for one (position, token, layer, top-k slot): a Zipf draw keyed by a fixed mix of the
// four, so every run and every rank sees the same routing. The caller maps the rank to an expert id (its shift).
inline int zipf_rank(const std::vector<double>& cdf, int64_t pos, int32_t token, int layer, int slot) {
  const uint64_t h = splitmix(uint64_t(pos) * 1000003 + uint64_t(token) * 7919 + uint64_t(layer) * 131 + slot);
  const double u = double(h >> 11) / double(1ull << 53);
  const int rank = int(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
  return std::min(rank, int(cdf.size()) - 1);
}

class FakeState : public SequenceState {
 public:
  int64_t length() const override { return length_; }
  int64_t length_ = 0;
};

using ExpertCounts = std::vector<std::vector<int64_t>>;  // [layer][expert]

// What a ZipfRoutingModel was asked and what it reported.
struct ExpertLoadLog {
  int set_calls = 0;
  int take_calls = 0;
  std::vector<ExpertCounts> takes;  // every table handed to the engine, in order
  // In a data-parallel group: the lockstep step each table belongs to (set_group_rows calls so far, 1 for the
  // first step; 0 on one rank).
  std::vector<uint64_t> take_steps;
  uint64_t group_steps = 0;
};

// The EPLB tests' fake model: each token at each layer goes to `top_k` experts drawn from a Zipf law over the
// experts' ranks (zipf_rank), rank i being expert (i + expert_shift(pos, layer)) % experts; it counts them while
// the engine asks (Model::set_expert_load_counting / take_expert_loads) and logs what it reported. Greedy
// continuation: a fixed function of the last token, so the routing never changes the outputs.
class ZipfRoutingModel : public Model {
 public:
  struct Shape {
    int vocab = 64, experts = 0, top_k = 0, layers = 0;
    double exponent = 1.0;
  };
  ZipfRoutingModel(const Shape& shape, std::shared_ptr<ExpertLoadLog> log)
      : shape_(shape), cdf_(zipf_cdf(shape.experts, shape.exponent)), load_log_(std::move(log)) {
    config_.vocab_size = shape.vocab;
    config_.eos_token_id = 1;
    config_.n_routed_experts = shape.experts;
    config_.n_experts_per_tok = shape.top_k;
  }
  const ModelConfig& config() const override { return config_; }
  std::unique_ptr<SequenceState> new_sequence() const override { return std::make_unique<FakeState>(); }
  Tensor forward(SequenceState& state, std::span<const int32_t> tokens) const override {
    auto& s = static_cast<FakeState&>(state);
    Tensor logits({int64_t(tokens.size()), shape_.vocab}, 0.0f);
    for (size_t r = 0; r < tokens.size(); ++r) {
      const int64_t pos = s.length_++;
      if (counting_)
        for (int l = 0; l < shape_.layers; ++l)
          for (int j = 0; j < shape_.top_k; ++j) {
            const int64_t expert = (zipf_rank(cdf_, pos, tokens[r], l, j) + expert_shift(pos, l)) % shape_.experts;
            ++pending_[size_t(l)][size_t(expert)];
          }
      logits.row(int64_t(r))[20 + (tokens[r] * 5 + 3) % (shape_.vocab - 20)] = 1.0f;
    }
    return logits;
  }
  void set_expert_load_counting(bool on) const override {
    ++load_log_->set_calls;
    counting_ = on;
    clear_pending();
  }
  std::optional<ExpertCounts> take_expert_loads() const override {
    ++load_log_->take_calls;
    if (!counting_) return std::nullopt;
    ExpertCounts out = pending_;
    load_log_->takes.push_back(out);
    load_log_->take_steps.push_back(load_log_->group_steps);
    clear_pending();
    return out;
  }
  // Called by a data-parallel rank at every lockstep step in which some rank has rows, before the step's forward.
  void set_group_rows(int) const override { ++load_log_->group_steps; }

 protected:
  // Where the hot experts sit for a position and layer (the tests' drift or rotation of the skew).
  virtual int64_t expert_shift(int64_t pos, int layer) const = 0;
  uint64_t group_steps() const { return load_log_->group_steps; }

 private:
  void clear_pending() const {
    pending_.assign(size_t(shape_.layers), std::vector<int64_t>(size_t(shape_.experts), 0));
  }
  Shape shape_;
  std::vector<double> cdf_;
  std::shared_ptr<ExpertLoadLog> load_log_;
  ModelConfig config_;
  mutable bool counting_ = false;
  mutable ExpertCounts pending_;
};

}  // namespace deepinfer::fake
