#include "parallel/eplb.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "core/error.h"
#include "parallel/replica_choice.h"

namespace deepinfer::parallel {

// ---------------------------------------------------------------------------------------------- load window

ExpertLoadWindow::ExpertLoadWindow(int layers, int experts, int window_steps)
    : layers_(layers), experts_(experts), window_(window_steps) {
  DI_CHECK(layers > 0 && experts > 0 && window_steps > 0,
           "eplb: the load window needs positive layers, experts and steps, got " + std::to_string(layers) + ", " +
               std::to_string(experts) + ", " + std::to_string(window_steps));
  ring_.assign(size_t(window_), std::vector<int64_t>(size_t(layers_) * experts_, 0));
  sum_.assign(size_t(layers_) * experts_, 0);
}

void ExpertLoadWindow::record(int layer, std::span<const int32_t> expert_ids) {
  DI_CHECK(layer >= 0 && layer < layers_,
           "eplb: layer " + std::to_string(layer) + " outside [0, " + std::to_string(layers_) + ")");
  std::vector<int64_t>& step = ring_[size_t(current_)];
  for (int32_t e : expert_ids) {
    DI_CHECK(e >= 0 && e < experts_, "eplb: expert id " + std::to_string(e) + " at layer " + std::to_string(layer) +
                                         " outside [0, " + std::to_string(experts_) + ")");
    const size_t i = size_t(layer) * experts_ + size_t(e);
    ++step[i];
    ++sum_[i];
  }
}

void ExpertLoadWindow::record_counts(int layer, std::span<const int64_t> counts) {
  DI_CHECK(layer >= 0 && layer < layers_ && int64_t(counts.size()) == experts_,
           "eplb: counts of " + std::to_string(counts.size()) + " experts at layer " + std::to_string(layer) +
               " for a window of " + std::to_string(layers_) + " layers x " + std::to_string(experts_) + " experts");
  std::vector<int64_t>& step = ring_[size_t(current_)];
  for (int e = 0; e < experts_; ++e) {
    DI_CHECK(counts[size_t(e)] >= 0, "eplb: negative count of expert " + std::to_string(e));
    const size_t i = size_t(layer) * experts_ + size_t(e);
    step[i] += counts[size_t(e)];
    sum_[i] += counts[size_t(e)];
  }
}

void ExpertLoadWindow::end_step() {
  current_ = (current_ + 1) % window_;
  // The step about to be reused is the oldest one of the window: it leaves the sums.
  std::vector<int64_t>& oldest = ring_[size_t(current_)];
  for (size_t i = 0; i < oldest.size(); ++i) sum_[i] -= oldest[i];
  std::fill(oldest.begin(), oldest.end(), 0);
}

std::vector<std::vector<double>> ExpertLoadWindow::load() const {
  std::vector<std::vector<double>> out(static_cast<size_t>(layers_), std::vector<double>(static_cast<size_t>(experts_)));
  for (int l = 0; l < layers_; ++l)
    for (int e = 0; e < experts_; ++e) out[size_t(l)][size_t(e)] = double(sum_[size_t(l) * experts_ + size_t(e)]);
  return out;
}

// ---------------------------------------------------------------------------------------------- placement

namespace {

void check_placement(const ExpertPlacement& p, const char* what) {
  DI_CHECK(p.ranks > 0 && p.experts > 0 && p.slots_per_rank > 0,
           std::string("eplb: ") + what + " placement needs positive ranks, experts and slots per rank");
  for (int l = 0; l < p.layers(); ++l) {
    const std::vector<int32_t>& row = p.phy2log[size_t(l)];
    DI_CHECK(int64_t(row.size()) == int64_t(p.ranks) * p.slots_per_rank,
             std::string("eplb: ") + what + " placement layer " + std::to_string(l) + " has " +
                 std::to_string(row.size()) + " slots, expected ranks x slots_per_rank");
    std::vector<int> copies(size_t(p.experts), 0);
    for (int32_t e : row) {
      DI_CHECK(e >= 0 && e < p.experts, std::string("eplb: ") + what + " placement layer " + std::to_string(l) +
                                            " holds expert " + std::to_string(e) + " outside the model");
      ++copies[size_t(e)];
    }
    for (int e = 0; e < p.experts; ++e)
      DI_CHECK(copies[size_t(e)] > 0, std::string("eplb: ") + what + " placement layer " + std::to_string(l) +
                                          " has no copy of expert " + std::to_string(e));
  }
}

// The experts each rank holds at one layer -> slot order: those that were on the rank in `previous` keep their
// slot, the others fill the free slots in ascending expert order.
std::vector<int32_t> order_slots(const std::vector<std::vector<int32_t>>& rank_experts, int slots_per_rank,
                                 const std::vector<int32_t>* previous) {
  std::vector<int32_t> row(rank_experts.size() * size_t(slots_per_rank), -1);
  for (size_t r = 0; r < rank_experts.size(); ++r) {
    std::vector<int32_t> left = rank_experts[r];
    std::sort(left.begin(), left.end());
    int32_t* slots = row.data() + r * size_t(slots_per_rank);
    if (previous) {
      for (int s = 0; s < slots_per_rank; ++s) {
        auto it = std::find(left.begin(), left.end(), (*previous)[r * size_t(slots_per_rank) + size_t(s)]);
        if (it == left.end()) continue;
        slots[s] = *it;
        left.erase(it);
      }
    }
    size_t next = 0;
    for (int s = 0; s < slots_per_rank; ++s)
      if (slots[s] < 0) slots[s] = left[next++];
  }
  return row;
}

}  // namespace

std::vector<int> ExpertPlacement::replica_counts(int layer) const {
  std::vector<int> counts(size_t(experts), 0);
  for (int32_t e : phy2log.at(size_t(layer))) ++counts[size_t(e)];
  return counts;
}

int ExpertPlacement::slot_for(int layer, int expert, uint64_t key) const {
  DI_CHECK(layer >= 0 && layer < layers() && expert >= 0 && expert < experts,
           "eplb: slot_for(layer " + std::to_string(layer) + ", expert " + std::to_string(expert) +
               ") outside the placement");
  const std::vector<int32_t>& row = phy2log[size_t(layer)];
  std::vector<int32_t> copies;  // ascending slots
  for (size_t s = 0; s < row.size(); ++s)
    if (row[s] == expert) copies.push_back(int32_t(s));
  DI_CHECK(!copies.empty(), "eplb: expert " + std::to_string(expert) + " has no slot at layer " + std::to_string(layer));
  // The round-robin branch of the GPU's choice (parallel/replica_choice.h), with no home rank to prefer.
  const int32_t count = int32_t(copies.size());
  const ReplicaView one{&count, copies.data(), count, slots_per_rank};
  return one.serving_slot(0, -1, int64_t(key % uint64_t(count)));
}

ExpertPlacement contiguous_placement(int layers, int experts, int ranks) {
  DI_CHECK(layers > 0 && ranks > 0 && experts > 0 && experts % ranks == 0,
           "eplb: " + std::to_string(experts) + " experts cannot be split evenly over " + std::to_string(ranks) +
               " ranks");
  ExpertPlacement p;
  p.ranks = ranks;
  p.experts = experts;
  p.slots_per_rank = experts / ranks;
  std::vector<int32_t> row(static_cast<size_t>(experts));
  std::iota(row.begin(), row.end(), 0);
  p.phy2log.assign(size_t(layers), row);
  return p;
}

ExpertPlacement load_unaware_placement(int layers, int experts, int ranks, int redundant) {
  if (redundant == 0) return contiguous_placement(layers, experts, ranks);
  DI_CHECK(layers > 0 && experts > 0,
           "eplb: a placement needs layers and experts (got " + std::to_string(layers) + " layers, " +
               std::to_string(experts) + " experts)");
  const std::vector<std::vector<double>> uniform(size_t(layers), std::vector<double>(size_t(experts), 1.0));
  return eplb_placement(uniform, ranks, redundant);
}

ExpertPlacement eplb_placement(const std::vector<std::vector<double>>& load, int ranks, int redundant,
                               const ExpertPlacement* previous) {
  DI_CHECK(!load.empty() && !load[0].empty(), "eplb: the load table is empty");
  const int layers = int(load.size()), experts = int(load[0].size());
  const int physical = experts + redundant;
  DI_CHECK(ranks > 0 && redundant >= 0 && physical % ranks == 0,
           "eplb: " + std::to_string(experts) + " experts + " + std::to_string(redundant) +
               " redundant slots must split evenly over " + std::to_string(ranks) + " ranks");
  if (previous) {
    check_placement(*previous, "previous");
    DI_CHECK(previous->ranks == ranks && previous->experts == experts && previous->layers() == layers &&
                 previous->slots_per_rank == physical / ranks,
             "eplb: the previous placement has another shape (ranks, experts, layers or slots per rank)");
  }
  ExpertPlacement p;
  p.ranks = ranks;
  p.experts = experts;
  p.slots_per_rank = physical / ranks;
  for (int l = 0; l < layers; ++l) {
    const std::vector<double>& w = load[size_t(l)];
    DI_CHECK(int(w.size()) == experts, "eplb: layer " + std::to_string(l) + " has " + std::to_string(w.size()) +
                                           " expert loads, layer 0 has " + std::to_string(experts));
    for (int e = 0; e < experts; ++e)
      DI_CHECK(w[size_t(e)] >= 0, "eplb: negative load of expert " + std::to_string(e) + " at layer " +
                                      std::to_string(l));
    // Replicate: each redundant slot goes to the expert with the largest load per replica (fewer replicas, then
    // the lower id, break ties).
    std::vector<int> copies(size_t(experts), 1);
    for (int r = 0; r < redundant; ++r) {
      int best = 0;
      for (int e = 1; e < experts; ++e) {
        const double a = w[size_t(e)] / copies[size_t(e)], b = w[size_t(best)] / copies[size_t(best)];
        if (a > b || (a == b && copies[size_t(e)] < copies[size_t(best)])) best = e;
      }
      ++copies[size_t(best)];
    }
    // Pack the replicas, heaviest first, each onto the lightest rank with a free slot (preferring ranks that do
    // not hold the expert yet).
    struct Replica {
      double weight;
      int32_t expert;
    };
    std::vector<Replica> replicas;
    for (int e = 0; e < experts; ++e)
      for (int c = 0; c < copies[size_t(e)]; ++c) replicas.push_back({w[size_t(e)] / copies[size_t(e)], e});
    std::stable_sort(replicas.begin(), replicas.end(),
                     [](const Replica& a, const Replica& b) { return a.weight > b.weight; });
    std::vector<std::vector<int32_t>> rank_experts(static_cast<size_t>(ranks));
    std::vector<double> rank_load(size_t(ranks), 0.0);
    for (const Replica& rep : replicas) {
      int best = -1;
      bool best_holds = true;
      for (int r = 0; r < ranks; ++r) {
        const std::vector<int32_t>& held = rank_experts[size_t(r)];
        if (int(held.size()) == p.slots_per_rank) continue;
        const bool holds = std::find(held.begin(), held.end(), rep.expert) != held.end();
        if (best < 0 || (best_holds && !holds) ||
            (holds == best_holds && rank_load[size_t(r)] < rank_load[size_t(best)])) {
          best = r;
          best_holds = holds;
        }
      }
      rank_experts[size_t(best)].push_back(rep.expert);
      rank_load[size_t(best)] += rep.weight;
    }
    p.phy2log.push_back(
        order_slots(rank_experts, p.slots_per_rank, previous ? &previous->phy2log[size_t(l)] : nullptr));
  }
  return p;
}

// ---------------------------------------------------------------------------------------------- moe_lb

std::vector<double> rank_loads(const std::vector<double>& layer_load, const ExpertPlacement& p, int layer) {
  DI_CHECK(int(layer_load.size()) == p.experts, "eplb: " + std::to_string(layer_load.size()) +
                                                    " expert loads for a placement of " + std::to_string(p.experts) +
                                                    " experts");
  const std::vector<int> copies = p.replica_counts(layer);
  std::vector<double> out(size_t(p.ranks), 0.0);
  const std::vector<int32_t>& row = p.phy2log[size_t(layer)];
  for (size_t s = 0; s < row.size(); ++s)
    out[size_t(p.rank_of_slot(int(s)))] += layer_load[size_t(row[s])] / copies[size_t(row[s])];
  return out;
}

double moe_lb(std::span<const double> rank_load) {
  if (rank_load.empty()) return 1.0;
  const double total = std::accumulate(rank_load.begin(), rank_load.end(), 0.0);
  if (total <= 0) return 1.0;
  return *std::max_element(rank_load.begin(), rank_load.end()) / (total / double(rank_load.size()));
}

double moe_lb(const std::vector<double>& layer_load, const ExpertPlacement& p, int layer) {
  const std::vector<double> r = rank_loads(layer_load, p, layer);
  return moe_lb(std::span<const double>(r));
}

double moe_lb(const std::vector<std::vector<double>>& load, const ExpertPlacement& p) {
  DI_CHECK(int(load.size()) == p.layers(), "eplb: " + std::to_string(load.size()) + " layers of load for a placement of " +
                                               std::to_string(p.layers()) + " layers");
  double slowest = 0, mean = 0;
  for (int l = 0; l < p.layers(); ++l) {
    const std::vector<double> r = rank_loads(load[size_t(l)], p, l);
    slowest += *std::max_element(r.begin(), r.end());
    mean += std::accumulate(r.begin(), r.end(), 0.0) / double(r.size());
  }
  return mean > 0 ? slowest / mean : 1.0;
}

// ---------------------------------------------------------------------------------------------- rebalancing

std::vector<ExpertMove> rebalance_plan(const ExpertPlacement& from, const ExpertPlacement& to) {
  check_placement(from, "current");
  check_placement(to, "new");
  DI_CHECK(from.ranks == to.ranks && from.experts == to.experts && from.slots_per_rank == to.slots_per_rank &&
               from.layers() == to.layers(),
           "eplb: a rebalancing needs placements of one shape (ranks, experts, slots per rank, layers)");
  std::vector<ExpertMove> moves;
  for (int l = 0; l < to.layers(); ++l) {
    const std::vector<int32_t>& old_row = from.phy2log[size_t(l)];
    const std::vector<int32_t>& new_row = to.phy2log[size_t(l)];
    std::vector<int> sends(size_t(from.ranks), 0);
    for (size_t s = 0; s < new_row.size(); ++s) {
      if (new_row[s] == old_row[s]) continue;
      ExpertMove m;
      m.layer = l;
      m.expert = new_row[s];
      m.dst_slot = int(s);
      m.dst_rank = to.rank_of_slot(int(s));
      int src = -1;
      for (size_t h = 0; h < old_row.size(); ++h) {
        if (old_row[h] != m.expert) continue;
        const int hr = from.rank_of_slot(int(h));
        if (hr == m.dst_rank) {  // a copy inside the destination GPU
          src = int(h);
          break;
        }
        if (src < 0 || sends[size_t(hr)] < sends[size_t(from.rank_of_slot(src))]) src = int(h);
      }
      m.src_slot = src;
      m.src_rank = from.rank_of_slot(src);
      if (m.src_rank != m.dst_rank) ++sends[size_t(m.src_rank)];
      moves.push_back(m);
    }
  }
  return moves;
}

}  // namespace deepinfer::parallel
