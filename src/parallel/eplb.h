// Expert-parallel load balancing (EPLB, algorithms.md §2.1-2.2): windowed per-layer expert load statistics, the
// choice of redundant experts and their placement onto ranks (the global policy of deepseek-ai/EPLB: replicate the
// expert with the largest load per replica, then pack the replicas onto ranks heaviest first, each onto the lightest
// rank that still has a free slot), the moe_lb metric (slowest rank's load / mean rank load, >= 1; the MoE step
// waits for the slowest rank), and the weight moves that turn one placement into another.
//
// A placement is a table per layer from physical expert slot to logical expert; slot s lives on rank
// s / slots_per_rank. Every rank holds the same number of slots so the expert weights of all ranks have one shape.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace deepinfer::parallel {

// Per-layer expert load (routed (token, expert) pairs) summed over the last `window_steps` steps.
class ExpertLoadWindow {
 public:
  ExpertLoadWindow(int layers, int experts, int window_steps);

  // Adds the routed experts of the current step at `layer` (one id per (token, top-k slot) pair).
  void record(int layer, std::span<const int32_t> expert_ids);
  // Adds counts [experts] of routed pairs per expert at `layer` to the current step.
  void record_counts(int layer, std::span<const int64_t> counts);
  // Closes the current step; the oldest step leaves the window once it holds window_steps steps.
  void end_step();

  // [layer][expert] pairs over the window (the current, open step included).
  std::vector<std::vector<double>> load() const;
  int layers() const { return layers_; }
  int experts() const { return experts_; }
  int window_steps() const { return window_; }

 private:
  int layers_, experts_, window_;
  int current_ = 0;                        // ring index of the open step
  std::vector<std::vector<int64_t>> ring_;  // [window][layer * experts + expert]
  std::vector<int64_t> sum_;               // over the ring
};

struct ExpertPlacement {
  int ranks = 0;
  int experts = 0;         // logical experts per layer
  int slots_per_rank = 0;  // physical slots per layer on one rank
  std::vector<std::vector<int32_t>> phy2log;  // [layer][ranks * slots_per_rank]

  int layers() const { return int(phy2log.size()); }
  int rank_of_slot(int slot) const { return slot / slots_per_rank; }
  // Copies of each logical expert at `layer` [experts].
  std::vector<int> replica_counts(int layer) const;
  // The physical slot that serves logical `expert` for a routed pair identified by `key` (e.g. the token's
  // position in the step): the key picks among the replicas, so the choice is a function of the token and never
  // of the load (batch invariance, algorithms.md §4). Replicas are taken in slot order: replica key mod copies, the
  // round-robin rule of the GPU's choice (parallel/replica_choice.h) without its home-rank preference.
  int slot_for(int layer, int expert, uint64_t key) const;
};

// Expert e on rank e / (experts / ranks), no redundancy: the placement before any statistics exist.
ExpertPlacement contiguous_placement(int layers, int experts, int ranks);

// The placement experts are built in before any statistics exist (load-unaware): the contiguous split when
// `redundant` is 0, else eplb_placement of a uniform load with `redundant` extra slots per layer (the copies do not
// know yet which experts are hot). A function of its arguments only, so every rank (thread or process) derives the
// same one: the GPU data-parallel loaders with EngineOptions::eplb_redundant_experts (src/model/gpu/
// data_parallel_nccl.cc) and v4_ep_decode --eplb-redundant.
ExpertPlacement load_unaware_placement(int layers, int experts, int ranks, int redundant);

// EPLB global policy per layer over `load` [layer][expert] with `redundant` extra slots per layer ((experts +
// redundant) must be a multiple of ranks). A replica never lands on a rank that already holds its expert while
// another rank with a free slot does not. When `previous` is given, experts that stay on a rank keep their slot
// there, so rebalance_plan(previous, result) moves only what changed. Deterministic: ties go to the lower index.
ExpertPlacement eplb_placement(const std::vector<std::vector<double>>& load, int ranks, int redundant,
                               const ExpertPlacement* previous = nullptr);

// Expected load of each rank at `layer` when each expert's pairs spread evenly over its replicas [ranks].
std::vector<double> rank_loads(const std::vector<double>& layer_load, const ExpertPlacement& p, int layer);
// max / mean of per-rank loads (1 for a balanced or empty load).
double moe_lb(std::span<const double> rank_load);
double moe_lb(const std::vector<double>& layer_load, const ExpertPlacement& p, int layer);
// Over all layers: sum over layers of the slowest rank / sum of the means (each layer's MoE waits for its slowest
// rank, so this is the MoE time relative to a perfect balance).
double moe_lb(const std::vector<std::vector<double>>& load, const ExpertPlacement& p);

// One expert's weights copied into a slot of the new placement. src_rank == dst_rank is a copy inside one GPU.
struct ExpertMove {
  int layer = 0;
  int expert = 0;
  int src_rank = 0, src_slot = 0;
  int dst_rank = 0, dst_slot = 0;
};

// The copies that turn `from` into `to`: one for every slot whose expert changes, read from a slot of `from` that
// holds the expert (the destination rank's own copy when it has one, else the holder with the fewest sends so far,
// so the traffic spreads over ranks). Every source is read from `from` as it was, so an executor stages the
// copies before it overwrites a slot. Empty when the placements are equal.
std::vector<ExpertMove> rebalance_plan(const ExpertPlacement& from, const ExpertPlacement& to);

}  // namespace deepinfer::parallel
