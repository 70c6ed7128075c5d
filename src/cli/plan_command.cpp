// `deepinfer plan --config config.json --gpus 8 [--ep 8] [--redundant-experts 32] [--engram host|device] ...`
// prints where every tensor class lives per rank and how many tokens of cached state fit (docs/parallel.md);
// exits 1 with the reason when the model does not fit.
#include "cli/plan_command.h"

#include <cstdio>
#include <memory>
#include <string>

#include "model/config.h"
#include "parallel/memory_plan.h"

namespace deepinfer::cli {

namespace {

struct PlanArgs {
  std::string config;
  parallel::ParallelLayout layout;
  double gpu_memory_gib = 140.0;
  double reserve_gib = 4.0;
  std::string engram = "host";
  std::string kv_storage = "bf16";
  bool no_draft = false;
  bool no_engine_copies = false;
};

int run_plan(const PlanArgs& a) {
  ModelConfig config = load_model_config(a.config);
  parallel::ParallelLayout layout = a.layout;
  layout.gpu_memory_bytes = int64_t(a.gpu_memory_gib * double(int64_t(1) << 30));
  layout.runtime_reserve_bytes = int64_t(a.reserve_gib * double(int64_t(1) << 30));
  layout.engram_on_host = a.engram == "host";
  layout.kv_storage = a.kv_storage == "packed" ? parallel::KvStorage::Packed : parallel::KvStorage::Bf16;
  layout.include_draft = !a.no_draft;
  layout.engine_copies = !a.no_engine_copies;
  parallel::MemoryPlan plan = parallel::plan_memory(config, layout);
  std::fputs(parallel::format_memory_plan(plan).c_str(), stdout);
  if (!plan.fits) {
    std::fprintf(stderr, "error: %s\n", plan.problem.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

std::function<int()> add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  auto* p = app.add_subcommand("plan", "Memory plan of a model over several GPUs (EP + attention DP)");
  p->add_option("--config", args->config, "config.json of the model (e.g. tools/gpu/v41_flash_config.json)")
      ->required();
  p->add_option("--gpus", args->layout.gpus, "GPUs (ranks)")->required()->check(CLI::PositiveNumber);
  p->add_option("--gpu-memory-gib", args->gpu_memory_gib, "Memory of one GPU in GiB (H200: 140)")
      ->check(CLI::PositiveNumber);
  p->add_option("--ep", args->layout.ep_size, "Expert-parallel group size (default: all GPUs)")
      ->check(CLI::NonNegativeNumber);
  p->add_option("--redundant-experts", args->layout.redundant_experts,
                "Extra EPLB expert slots per MoE layer (a multiple of the EP size)")
      ->check(CLI::NonNegativeNumber);
  p->add_option("--engram", args->engram, "Engram tables in pinned host memory or row-sharded on the GPUs")
      ->check(CLI::IsMember({"host", "device"}));
  p->add_option("--kv-storage", args->kv_storage,
                "bf16 (what the GPU model stores today) or packed (model-spec §6 record formats)")
      ->check(CLI::IsMember({"bf16", "packed"}));
  p->add_option("--sequences", args->layout.sequences_per_rank, "Sequences resident per rank")
      ->check(CLI::PositiveNumber);
  p->add_option("--max-rows", args->layout.max_rows_per_rank, "Token rows per step on a rank")
      ->check(CLI::PositiveNumber);
  p->add_option("--reserve-gib", args->reserve_gib, "Runtime reserve per rank (CUDA, cuBLAS, NCCL) in GiB")
      ->check(CLI::NonNegativeNumber);
  p->add_flag("--no-draft", args->no_draft, "Leave the MTP / DSpark draft layers out");
  p->add_flag("--no-engine-copies", args->no_engine_copies,
              "Count only the checkpoint formats (not the GPU model's decode-order copies and bf16 wo_a)");
  return [p, args]() { return *p ? run_plan(*args) : -1; };
}

}  // namespace deepinfer::cli
