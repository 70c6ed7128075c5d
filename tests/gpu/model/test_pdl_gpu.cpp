// Programmatic dependent launch across the whole GPU step (cuda/launch.h, bench/gpu/NOTES.md "PDL"): the same
// sequence fed with PDL off and on, eagerly and from the CUDA graphs of the step shapes, gives the same logits bit
// for bit, on the V4 and the V4.1 test checkpoints. Every kernel of the step runs here: the PDL ones (mHC sites,
// norms, RoPE, FP8 GEMMs, wo_a, the compressors, Engram) beside the plain ones (MoE, indexer, attention, cuBLAS),
// on both streams of the attention's fork / join. The graphs of each setting are captured separately
// (StepGraphs keys them by cuda::pdl_enabled()). Last, V4.1's site mix branch and query RoPE epilogue, and in both
// models the merge epilogue and wo_b's quantization prologue, on and off the same way. The sequence is long enough
// that every indexer layer's selection ranks its entries (scored_sequence below).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cuda/l2_policy.h"
#include "cuda/launch.h"
#include "cuda/stream_fp4_wgmma.h"
#include "layers/attention/decode_fused.h"
#include "layers/indexer/indexer_gpu.h"
#include "layers/moe/moe_gpu.h"
#include "layers/quant/fp8_gemm.h"
#include "gpu_test_model.h"
#include "gpu_test_util.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/gpu/step_model_base.h"
#include "model/v4/gpu/v4_gpu_model.h"
#include "model/v41/gpu/v41_gpu_model.h"

namespace deepinfer::gputest {
namespace {

using gpu_steps::bitwise_mismatches;
using gpu_steps::expect_indexers_rank;
using gpu_steps::feed_scored;
using gpu_steps::ScoredSequence;
using gpu_steps::scored_sequence;
using gpu_steps::feed_chunk_then_decode;
using gpu_steps::Models;
using gpu_steps::random_tokens;

struct PdlRestore {
  bool was = cuda::pdl_enabled();
  ~PdlRestore() { cuda::set_pdl(was); }
};

// The scored sequence (two prefill chunks, then decode steps), in four slots: PDL off eager (the reference) and
// graphs, PDL on eager and graphs, then slot 0 restarted from position 0 with PDL on from the graphs.
void expect_pdl_bitwise(const char* name, Models& m, uint64_t seed) {
  PdlRestore restore;
  const std::string n = name;
  const ScoredSequence seq = scored_sequence(m.config, seed);
  ASSERT_NO_FATAL_FAILURE(expect_indexers_rank(n, m.config, seq));
  auto feed = [&](bool pdl, int slot, bool graphs) {
    cuda::set_pdl(pdl);
    return feed_scored(*m.gpu, seq, slot, graphs);
  };
  const std::vector<float> off = feed(false, 0, false), off_graph = feed(false, 1, true);
  const std::vector<float> on = feed(true, 2, false), on_graph = feed(true, 3, true), again = feed(true, 0, true);
  report_exact(n + " pdl off: graphs vs eager", bitwise_mismatches(off, off_graph), off.size());
  report_exact(n + " pdl on vs off, eager", bitwise_mismatches(off, on), off.size());
  report_exact(n + " pdl on graphs vs off eager", bitwise_mismatches(off, on_graph), off.size());
  report_exact(n + " pdl on graphs, slot 0 restarted, vs off eager", bitwise_mismatches(off, again), off.size());
}

TEST(GpuPdlModel, V4StepBitwiseWithAndWithoutPdl) {
  DI_SKIP_WITHOUT_GPU();
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_pdl_bitwise("v4_gpu_forward", m, 91);
}

TEST(GpuPdlModel, V41StepBitwiseWithAndWithoutPdl) {
  DI_SKIP_WITHOUT_GPU();
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_pdl_bitwise("v41_gpu_forward", m, 92);
}

// A process-wide on / off switch (its getter and setter), set back to its value of construction at the end.
struct SwitchRestore {
  bool (*get)();
  void (*set)(bool);
  bool was = get();
  ~SwitchRestore() { set(was); }
};

// A schedule switch against its off setting: the same scored sequence as above, off eager (the reference), on eager
// and from graphs (captured with the switch on: no graph of this model exists before), and slot 0 restarted with the
// switch on from the graphs. The prefill chunks take the MoE's unfused routing, the decode steps the fused one. A race
// between a moved kernel and the kernels that write its inputs or read its outputs would show as mismatches here.
void expect_schedule_bitwise(Models& m, const std::string& name, const std::string& off_label,
                             const std::string& on_label, void (*set)(bool), uint64_t seed) {
  const ScoredSequence seq = scored_sequence(m.config, seed);
  ASSERT_NO_FATAL_FAILURE(expect_indexers_rank(name, m.config, seq));
  auto feed = [&](bool on, int slot, bool graphs) {
    set(on);
    return feed_scored(*m.gpu, seq, slot, graphs);
  };
  const std::vector<float> off = feed(false, 0, false), on = feed(true, 1, false), on_graph = feed(true, 2, true),
                           again = feed(true, 0, true);
  const std::string vs = name + " " + on_label;
  report_exact(vs + " vs " + off_label + ", eager", bitwise_mismatches(off, on), off.size());
  report_exact(vs + " graphs vs " + off_label + " eager", bitwise_mismatches(off, on_graph), off.size());
  report_exact(vs + " graphs, slot 0 restarted, vs " + off_label + " eager", bitwise_mismatches(off, again),
               off.size());
}

// V4.1's mHC site mix on its own branch (V41GpuModel::begin_site_mix, session 13) against the mix on the main stream.
TEST(GpuSiteMixBranch, V41StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore branch{gpu::v41_site_mix_branch, gpu::set_v41_site_mix_branch};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 site mix branch", "off", "on", gpu::set_v41_site_mix_branch, 93);
}

// The attention core's epilogue (window commit + de-rotation) inside the merge launch (DEEPINFER_MERGE_EPILOGUE=1,
// layers/attention/decode_fused.h) against its own launch, in both models' steps: the commit now runs in the
// launch that writes o, so a commit that raced the split kernel's window reads, or a de-rotation of the wrong rows,
// shows here.
TEST(GpuMergeEpilogue, V4StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore epilogue{cuda::merge_epilogue, cuda::set_merge_epilogue};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 merge epilogue", "off", "on", cuda::set_merge_epilogue, 94);
}

// wo_b's activation quantization inside its decode stream kernel (cuda::fp8_gemm_bf16) at every decode row count
// (on: up to 8 rows, off: never) against fp8_quantize + fp8_gemm, in both models' steps.
void set_quant_prologue(bool on) { cuda::set_fp8_quant_prologue_rows(on ? 8 : 0); }
struct QuantPrologueRestore {
  int was = cuda::fp8_quant_prologue_rows();
  ~QuantPrologueRestore() { cuda::set_fp8_quant_prologue_rows(was); }
};

TEST(GpuQuantPrologue, V4StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  QuantPrologueRestore restore;
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 wo_b quantization prologue", "off", "on", set_quant_prologue, 96);
}

TEST(GpuQuantPrologue, V41StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  QuantPrologueRestore restore;
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 wo_b quantization prologue", "off", "on", set_quant_prologue, 97);
}

// V4.1's query RoPE in wq_b's decode stream kernel (DEEPINFER_Q_ROPE_EPILOGUE, cuda::fp8_gemm_rope) against
// fp8_gemm + rope() in the step (the test checkpoint's wq_b: 64 heads of 512, rope 64, k 256, so its decode rows
// take the epilogue; the prefill chunks keep the two launches). V4's query takes rms_norm_f32_rope instead.
TEST(GpuQRopeEpilogue, V41StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore epilogue{cuda::q_rope_epilogue, cuda::set_q_rope_epilogue};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 query RoPE epilogue", "off", "on", cuda::set_q_rope_epilogue, 98);
}

TEST(GpuMergeEpilogue, V41StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore epilogue{cuda::merge_epilogue, cuda::set_merge_epilogue};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 merge epilogue", "off", "on", cuda::set_merge_epilogue, 95);
}

// The V4 lightning indexer's decode score blocks at 32-entry tiles (DEEPINFER_INDEX_SCORE_SHAPE=32x1, indexer_gpu.h,
// bench/gpu/NOTES.md "Decode score shape") against the default 64x2, in the V4 step: the same logits bit for bit. The
// test checkpoint's CSA layers (ratio 4, index_topk 16) score only past 64 positions; this feeds 160 tokens (its own
// layout, not scored_sequence's, to keep the entry counts below): a 64-row chunk (the split kernels), then 96 decode
// steps whose rows see 16 to 40 entries (up to two 32-entry score blocks; one 64-entry block at 64x2), off eager (the
// reference), 32x1 eager and from graphs (captured with 32x1: no graph of this model exists before), and slot 0
// restarted at 32x1 from the graphs.
struct ScoreShapeRestore {
  cuda::IndexScoreShape was = cuda::index_score_shape();
  ~ScoreShapeRestore() { cuda::set_index_score_shape(was); }
};

TEST(GpuIndexScoreShape, V4StepBitwise32x1And64x2) {
  DI_SKIP_WITHOUT_GPU();
  ScoreShapeRestore restore;
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  const std::vector<int32_t> prompt = random_tokens(99, 160, m.config.vocab_size);
  auto feed = [&](cuda::IndexScoreShape shape, int slot, bool graphs) {
    cuda::set_index_score_shape(shape);
    return feed_chunk_then_decode(*m.gpu, prompt, slot, 64, graphs);
  };
  using Shape = cuda::IndexScoreShape;
  const std::vector<float> base = feed(Shape::Tile64x2, 0, false), small = feed(Shape::Tile32x1, 1, false),
                           small_graph = feed(Shape::Tile32x1, 2, true), again = feed(Shape::Tile32x1, 0, true);
  const std::string vs = "v4 index score shape 32x1";
  report_exact(vs + " vs 64x2, eager", bitwise_mismatches(base, small), base.size());
  report_exact(vs + " graphs vs 64x2 eager", bitwise_mismatches(base, small_graph), base.size());
  report_exact(vs + " graphs, slot 0 restarted, vs 64x2 eager", bitwise_mismatches(base, again), base.size());
  // auto (32-entry tiles here: rows of <= 40 entries fit their blocks), eager, slot 1 restarted.
  const std::vector<float> by_auto = feed(Shape::Auto, 1, false);
  report_exact("v4 index score shape auto vs 64x2, eager", bitwise_mismatches(base, by_auto), base.size());
}

struct IndexQueryRestore {
  gpu::IndexQueryPlace was = gpu::index_query_place();
  ~IndexQueryRestore() { gpu::set_index_query_place(was); }
};

// The compressors on their own branch (DEEPINFER_COMPRESSOR_BRANCH, their own workspace and cuBLAS handle) against
// them on the side branch after the KV row, in both models' steps: a compressor sharing a workspace with another
// branch, or a select / attention that read the keys or the compressed KV before the branch wrote them, shows here.
TEST(GpuCompressorBranch, V4StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore compressor{gpu::compressor_branch, gpu::set_compressor_branch};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 compressor branch", "off", "on", gpu::set_compressor_branch, 102);
}

TEST(GpuCompressorBranch, V41StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore compressor{gpu::compressor_branch, gpu::set_compressor_branch};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 compressor branch", "off", "on", gpu::set_compressor_branch, 103);
}

// The indexer's query first on the main stream with the attention's wq_b (and its query norm / RoPE) on the query
// branch (DEEPINFER_INDEX_QUERY=first) against the query before the side branch's join (before_join), in both
// models' steps: an attention core that read the query before the branch wrote it shows here.
void set_index_query_first(bool on) {
  gpu::set_index_query_place(on ? gpu::IndexQueryPlace::First : gpu::IndexQueryPlace::BeforeJoin);
}

TEST(GpuIndexQueryFirst, V4StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  IndexQueryRestore query;
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 index query", "before join", "first", set_index_query_first, 105);
}

TEST(GpuIndexQueryFirst, V41StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  IndexQueryRestore query;
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 index query", "before join", "first", set_index_query_first, 106);
}

// V4's indexer inputs that read only u off the query's chain (DEEPINFER_INDEX_INPUTS_EARLY: the head weights first on
// the side branch, the index compressor on a branch of its own and the branches joined after the select) against the
// query's own head weights and both compressors on one branch joined before the select, in V4's step: a query finish
// or a select that read the head weights or the keys before their branch wrote them, two compressors sharing a
// workspace, or an attention that read the window rows or the compressed KV before the late join, shows here.
TEST(GpuIndexInputsEarly, V4StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore early{gpu::index_inputs_early, gpu::set_index_inputs_early};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 index inputs", "on the query's chain", "early", gpu::set_index_inputs_early, 138);
}

// wq_b on the query branch and the MoE's shared expert on the side branch with a capped decode stream grid
// (DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM=1 and DEEPINFER_BRANCH_GEMV_SPARE_SMS=8: one block per SM, none on 8 SMs;
// cuda::StreamGrid) against their own grid, in both models' steps (V4: fp8_gemm_grid, V4.1: fp8_gemm_rope's epilogue;
// the shared expert through moe_forward's SideStream grid), the query first so that wq_b is on the branch.
struct BranchGemvGridRestore {
  int blocks_was = gpu::branch_gemv_blocks_per_sm_switch().get();  // -1: each model's own count
  int spare_was = gpu::branch_gemv_spare_sms_switch().get();
  int multirow_was = gpu::branch_gemv_spare_sms_multirow_switch().get();
  bool shared_was = gpu::branch_gemv_shared_expert_switch().get();
  BranchGemvGridRestore() { gpu::set_branch_gemv_shared_expert(true); }
  ~BranchGemvGridRestore() {
    gpu::branch_gemv_blocks_per_sm_switch().set(blocks_was);
    gpu::branch_gemv_spare_sms_switch().set(spare_was);
    gpu::branch_gemv_spare_sms_multirow_switch().set(multirow_was);
    gpu::set_branch_gemv_shared_expert(shared_was);
  }
};
void set_branch_gemv_capped(bool on) { gpu::set_branch_gemv_grid(on ? cuda::StreamGrid{1, 8} : cuda::StreamGrid{}); }

TEST(GpuBranchGemvGrid, V4StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  IndexQueryRestore query;
  BranchGemvGridRestore grid;
  gpu::set_index_query_place(gpu::IndexQueryPlace::First);
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 branch gemv grid", "off", "capped", set_branch_gemv_capped, 118);
}

// The spare SMs of multi-row launches (DEEPINFER_BRANCH_GEMV_SPARE_SMS_MULTIROW): one row keeps the one-row count,
// more rows take the multi-row count where one is set; set_branch_gemv_grid sets both (host logic, no GPU needed).
TEST(GpuBranchGemvGrid, SpareSmsFollowTheRows) {
  BranchGemvGridRestore grid;
  gpu::set_branch_gemv_grid(cuda::StreamGrid{1, 8});
  EXPECT_EQ(gpu::branch_gemv_grid(2, 1).spare_sms, 8);
  EXPECT_EQ(gpu::branch_gemv_grid(2, 8).spare_sms, 8);
  EXPECT_EQ(gpu::branch_gemv_grid(2, 8).blocks_per_sm, 1);
  gpu::set_branch_gemv_spare_sms_multirow(16);
  EXPECT_EQ(gpu::branch_gemv_grid(2, 1).spare_sms, 8);
  EXPECT_EQ(gpu::branch_gemv_grid(2, 2).spare_sms, 16);
  EXPECT_EQ(gpu::branch_gemv_grid(2, 8).spare_sms, 16);
  gpu::set_branch_gemv_grid(cuda::StreamGrid{1, 4});
  EXPECT_EQ(gpu::branch_gemv_grid(2, 8).spare_sms, 4);
}

TEST(GpuBranchGemvGrid, V41StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  IndexQueryRestore query;
  BranchGemvGridRestore grid;
  gpu::set_index_query_place(gpu::IndexQueryPlace::First);
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 branch gemv grid", "off", "capped", set_branch_gemv_capped, 119);
}

// The weight streams read evict_first in L2 (DEEPINFER_WEIGHT_L2_EVICT_FIRST=1, cuda/l2_policy.h: the decode stream
// kernels' bulk copies and the W8A16 GEMV's loads) against the default policy, in both models' steps: only the cache
// policy changes, so the bits must not. "on": every kind (WeightEvictFirst::All).
struct WeightEvictFirstRestore {
  cuda::WeightEvictFirst was = cuda::weight_l2_evict_first();
  ~WeightEvictFirstRestore() { cuda::set_weight_l2_evict_first(was); }
};
void set_weight_evict_first_all(bool on) {
  cuda::set_weight_l2_evict_first(on ? cuda::WeightEvictFirst::All : cuda::WeightEvictFirst::Off);
}

TEST(GpuWeightEvictFirst, V4StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  WeightEvictFirstRestore policy;
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 weight evict_first", "off", "on", set_weight_evict_first_all, 120);
}

TEST(GpuWeightEvictFirst, V41StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  WeightEvictFirstRestore policy;
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 weight evict_first", "off", "on", set_weight_evict_first_all, 121);
}

// V4's query norm + RoPE in the attention split kernel's prologue (DEEPINFER_Q_NORM_PROLOGUE=1,
// layers/attention/decode_fused.h) against its own launch: the split kernel now reads wq_b's fp32 output, so a
// later writer of that scratch before the attention core shows here.
TEST(GpuQNormPrologue, V4StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore prologue{cuda::query_norm_prologue, cuda::set_query_norm_prologue};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 query norm prologue", "off", "on", cuda::set_query_norm_prologue, 104);
}

// The fused routing's scores in the logit blocks (cuda::route_scores_in_blocks, the default) against the last block
// (DEEPINFER_ROUTE_SCORES=tail), in both models' steps (V4.1: 384 experts, 12 a lane): the same bits.
TEST(GpuRouteScores, V4StepBitwiseBlocksAndTail) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore scores{cuda::route_scores_in_blocks, cuda::set_route_scores_in_blocks};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 route scores", "tail", "blocks", cuda::set_route_scores_in_blocks, 126);
}

TEST(GpuRouteScores, V41StepBitwiseBlocksAndTail) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore scores{cuda::route_scores_in_blocks, cuda::set_route_scores_in_blocks};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 route scores", "tail", "blocks", cuda::set_route_scores_in_blocks, 127);
}

// The fused routing's dispatch on one warp (cuda::route_dispatch_warp, the default, batch 1-4) against the whole
// block's (DEEPINFER_ROUTE_DISPATCH=block), in both models' steps: the same bits.
TEST(GpuRouteDispatch, V4StepBitwiseWarpAndBlock) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore dispatch{cuda::route_dispatch_warp, cuda::set_route_dispatch_warp};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 route dispatch", "block", "warp", cuda::set_route_dispatch_warp, 128);
}

TEST(GpuRouteDispatch, V41StepBitwiseWarpAndBlock) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore dispatch{cuda::route_dispatch_warp, cuda::set_route_dispatch_warp};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 route dispatch", "block", "warp", cuda::set_route_dispatch_warp, 129);
}

// The fused routing's gate rows loaded before its PDL wait (cuda::route_gate_early, the default) against after it
// (DEEPINFER_ROUTE_GATE=late), in both models' steps (V4.1: hidden 5120 at full width; the fixture's are small): the
// same bits.
TEST(GpuRouteGate, V4StepBitwiseEarlyAndLate) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore gate{cuda::route_gate_early, cuda::set_route_gate_early};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 route gate", "late", "early", cuda::set_route_gate_early, 134);
}

TEST(GpuRouteGate, V41StepBitwiseEarlyAndLate) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore gate{cuda::route_gate_early, cuda::set_route_gate_early};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 route gate", "late", "early", cuda::set_route_gate_early, 135);
}

// The fused routing's selector form (cuda::route_selector, DEEPINFER_ROUTE_SELECTOR=block: block 0 rehearses the rows'
// routing before its PDL wait, then routes once the other blocks have taken their tickets) against the ticket form
// (the default), in both models' steps (eager and from graphs): the same bits.
TEST(GpuRouteSelector, V4StepBitwiseTicketAndBlock) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore selector{cuda::route_selector, cuda::set_route_selector};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 route selector", "ticket", "block", cuda::set_route_selector, 136);
}

TEST(GpuRouteSelector, V41StepBitwiseTicketAndBlock) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore selector{cuda::route_selector, cuda::set_route_selector};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 route selector", "ticket", "block", cuda::set_route_selector, 137);
}

// The MoE's kept counters (cuda::moe_counters_kept, the default: the step's scratch counters, no zeroing launch)
// against the workspace's zeroed by each call (DEEPINFER_MOE_COUNTERS=zeroed), in both models' steps: the same
// bits, also from graphs replayed again and again on the same counters.
TEST(GpuMoeCounters, V4StepBitwiseKeptAndZeroed) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore kept{cuda::moe_counters_kept, cuda::set_moe_counters_kept};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 moe counters", "zeroed", "kept", cuda::set_moe_counters_kept, 132);
}

TEST(GpuMoeCounters, V41StepBitwiseKeptAndZeroed) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore kept{cuda::moe_counters_kept, cuda::set_moe_counters_kept};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 moe counters", "zeroed", "kept", cuda::set_moe_counters_kept, 133);
}

// The attention core's split and merge launched with PDL (DEEPINFER_ATTENTION_PDL=1, layers/attention/decode_fused.h)
// against their plain launches, in both models' steps: a split that read its query rows or index lists before its
// predecessor finished, or a merge (and its window commit) that overtook the split, shows here.
TEST(GpuAttentionPdl, V4StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore pdl{cuda::attention_pdl, cuda::set_attention_pdl};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 attention pdl", "off", "on", cuda::set_attention_pdl, 140);
}

TEST(GpuAttentionPdl, V41StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore pdl{cuda::attention_pdl, cuda::set_attention_pdl};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 attention pdl", "off", "on", cuda::set_attention_pdl, 141);
}

// The routed w1|w3 PDL-launched behind the fused routing (DEEPINFER_MOE_ROUTED_PDL, layers/moe/moe_gpu.h): on from
// one row against never, whatever the model's choice; a w1|w3 that read the groups, the dispatch or x's FP8 rows
// before the routing finished shows here.
void set_routed_pdl(bool on) { cuda::set_moe_routed_pdl_rows(on ? 1 : 0); }
struct RoutedPdlRestore {
  int was = cuda::moe_routed_pdl_rows();
  ~RoutedPdlRestore() { cuda::set_moe_routed_pdl_rows(was); }
};

TEST(GpuMoeRoutedPdl, V4StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  RoutedPdlRestore restore;
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 moe routed pdl", "off", "on", set_routed_pdl, 144);
}

TEST(GpuMoeRoutedPdl, V41StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  RoutedPdlRestore restore;
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 moe routed pdl", "off", "on", set_routed_pdl, 145);
}

// The MXFP4 stream's consume loop with a stage's halves overlapped (the default; DEEPINFER_FP4_HALF_OVERLAP=0,
// cuda/stream_fp4_wgmma.h) against the half-by-half loop, in both models' steps (routed w1|w3 and the fused w2; the
// fixtures' k of 512 and 256 take the path without a second half, GpuStreamFp4Wgmma.HalfOverlapSameBits the others).
TEST(GpuFp4HalfOverlap, V4StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore overlap{cuda::stream_fp4_half_overlap, cuda::set_stream_fp4_half_overlap};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_dir(), gpu_steps::make_v4_test_gpu);
  expect_schedule_bitwise(m, "v4 fp4 half overlap", "off", "on", cuda::set_stream_fp4_half_overlap, 146);
}

TEST(GpuFp4HalfOverlap, V41StepBitwiseOnAndOff) {
  DI_SKIP_WITHOUT_GPU();
  SwitchRestore overlap{cuda::stream_fp4_half_overlap, cuda::set_stream_fp4_half_overlap};
  Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  expect_schedule_bitwise(m, "v41 fp4 half overlap", "off", "on", cuda::set_stream_fp4_half_overlap, 147);
}

}  // namespace
}  // namespace deepinfer::gputest
