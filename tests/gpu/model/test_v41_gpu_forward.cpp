// The whole V4.1 forward on the GPU (src/model/v41/gpu/) against the engine's CPU V4.1 forward with the same
// official numerics (NumericsOptions all on), on a random V4.1 checkpoint with the production attention shape
// (tools/fixtures/make_gpu_model.py --family v41: SWA, Full ratio 2 and Reuse 2 with Engram before them, Full ratio
// 1 + candidate source, Reuse 1, Reindex, Reuse). The CPU forward is itself checked against
// NeMo on the golden fixtures (tests/golden/forward).
//
// The bound follows test_v4_gpu_forward.cpp: every GEMM input, window KV row (MXFP8), compressed entry and index key
// (FP4) passes a quantizer, so last-bit differences of summation order flip codes by a whole step and reach the
// logits at O(0.1); on V4.1 they also move the indexer's top-k and candidate blocks. The test measures the CPU's own
// sensitivity to the bf16 cast points in the same run (the CPU forward with bf16_activations off) and requires the
// GPU to differ from the CPU no more than 1.5 x that; a wrong kernel, lag, index list or cache row is a structural
// error far outside it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpu_test_model.h"
#include "gpu_test_util.h"
#include "layers/attention/kv_record.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/gpu/backend.h"
#include "model/model.h"
#include "model/v41/gpu/v41_gpu_model.h"

namespace deepinfer::gputest {
namespace {

using namespace gpu_steps;

Models load_both() {
  return gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
}

TEST(V41GpuForward, PrefillDecodeAndChunksMatchTheCpuForward) {
  DI_SKIP_WITHOUT_GPU();
  Models m = load_both();
  // GPU: slot 0 in chunks of 48, slot 1 one token per step, slot 2 in chunks of 1, 7, 16, 33, ... all sharing steps.
  expect_mixed_chunks_follow_cpu("v41_gpu_forward_logits", m, gpu_test_model_v41_dir(), 910);
}

TEST(V41GpuForward, GreedyDecodeFollowsTheCpuForward) {
  DI_SKIP_WITHOUT_GPU();
  Models m = load_both();
  // GPU greedy: the prompt as one chunk, then one row per step (host-known tokens: the model has Engram layers).
  expect_greedy_decode_follows_cpu("v41_gpu_greedy", m, gpu_test_model_v41_dir(), 4321);
}

// The same sequence fed twice with the same step shapes (eager, then from CUDA graphs) must give the same logits bit
// for bit, whatever slot and pages it lands in; a slot reused from position 0 drops its pages and Engram history.
TEST(V41GpuForward, RunToRunBitwiseEagerAndGraphs) {
  DI_SKIP_WITHOUT_GPU();
  Models m = load_both();
  // The scored sequence: its decode rows' indexers rank more entries than index_topk (gpu_test_model.h).
  const ScoredSequence seq = scored_sequence(m.config, 78);
  ASSERT_NO_FATAL_FAILURE(expect_indexers_rank("v41_gpu_forward run-to-run", m.config, seq));
  auto feed = [&](int slot, bool graphs) { return feed_scored(*m.gpu, seq, slot, graphs); };
  const std::vector<float> a = feed(0, false), b = feed(2, false), c = feed(1, true), d = feed(3, true);
  const std::vector<float> e = feed(0, true);  // slot 0 again from position 0, now from the captured graphs
  report_exact("v41_gpu_forward eager run-to-run (slot 0 vs slot 2)", bitwise_mismatches(a, b), a.size());
  report_exact("v41_gpu_forward graph replay vs eager (slot 1 vs slot 0)", bitwise_mismatches(a, c), a.size());
  report_exact("v41_gpu_forward graph run-to-run (slot 1 vs slot 3)", bitwise_mismatches(c, d), c.size());
  report_exact("v41_gpu_forward slot 0 restarted at position 0 (graphs) vs its first run", bitwise_mismatches(a, e),
               a.size());
}

// DEEPINFER_ENGRAM_TABLES=mapped reads the Engram tables from the checkpoint shards in place (registered shared
// mappings, cuda/host_file_mapping.h) instead of a pinned copy: the same bytes, so the same logits bit for bit,
// eager and from graphs; and two models of the process share the one mapping (no second registration, which CUDA
// would refuse).
TEST(V41GpuForward, MappedEngramTablesGiveThePinnedCopysLogits) {
  DI_SKIP_WITHOUT_GPU();
  const std::string dir = gpu_test_model_v41_dir();
  const ModelConfig config = load_model_config(dir + "/config.json");
  const Checkpoint ck = Checkpoint::open(dir);
  auto build = [&](const char* where) {
    ::setenv("DEEPINFER_ENGRAM_TABLES", where, 1);
    auto model = std::make_unique<gpu::V41GpuModel>(config, gpu::upload_v41_gpu_weights(config, ck, false),
                                                    test_capacity());
    ::unsetenv("DEEPINFER_ENGRAM_TABLES");
    return model;
  };
  auto pinned = build("host");
  auto mapped = build("mapped");
  auto mapped_again = build("mapped");
  const std::vector<int32_t> prompt = random_tokens(79, 40, config.vocab_size);
  for (bool graphs : {false, true}) {
    const std::vector<float> a = feed_chunk_then_decode(*pinned, prompt, 0, 16, graphs);
    const std::vector<float> b = feed_chunk_then_decode(*mapped, prompt, 0, 16, graphs);
    const std::vector<float> c = feed_chunk_then_decode(*mapped_again, prompt, 0, 16, graphs);
    const std::string how = graphs ? " (graphs)" : " (eager)";
    report_exact("v41_gpu_forward mapped Engram tables vs the pinned copy" + how, bitwise_mismatches(a, b), a.size());
    report_exact("v41_gpu_forward a second model on the same mapping" + how, bitwise_mismatches(a, c), a.size());
  }
}

// DEEPINFER_KV_FORMAT=fp8 (cuda::set_kv_format here): the window rings as 528-byte MXFP8 records and the compressed
// KV as 288-byte FP4 records (layers/attention/kv_record.h kvrec41, bench/gpu/NOTES.md "V4.1 packed KV records")
// decode to the bf16 caches' values, so the logits are the same bits: a 48-row chunk and 52 decode steps (the
// window of 16 wraps, 50 ratio-2 / 100 ratio-1 entries against index_topk 16: tiles hold window and compressed
// rows together), eager and from graphs, and three sequences in ragged shared steps. Under
// DEEPINFER_FUSED_ATTENTION_STEPS=0 (read once per process) the same test covers mxfp8_window_fake_quant's records.
TEST(V41GpuForward, KvFormatsBitwise) {
  DI_SKIP_WITHOUT_GPU();
  const std::string dir = gpu_test_model_v41_dir();
  const ModelConfig config = load_model_config(dir + "/config.json");
  const Checkpoint ck = Checkpoint::open(dir);
  const cuda::KvFormat process_format = cuda::kv_format();
  auto build = [&](cuda::KvFormat format) {
    cuda::set_kv_format(format);  // read when the model allocates its caches
    auto g = std::make_unique<gpu::V41GpuModel>(config, gpu::upload_v41_gpu_weights(config, ck, false),
                                                test_capacity());
    cuda::set_kv_format(process_format);
    const bool packed = format != cuda::KvFormat::Bf16;
    EXPECT_EQ(g->window_format(), packed ? cuda::KvFormat::Mxfp8 : cuda::KvFormat::Bf16);
    EXPECT_EQ(g->entry_format(), packed ? cuda::KvFormat::Fp4 : cuda::KvFormat::Bf16);
    return g;
  };
  const std::unique_ptr<gpu::V41GpuModel> bf16 = build(cuda::KvFormat::Bf16), packed = build(cuda::KvFormat::Fp8);
  // The caches' share of the state arena shrinks: window and compressed-KV rows 1024 -> 528 / 288 bytes.
  std::printf("v41_gpu_forward state arena: bf16 caches %.2f MB, packed records %.2f MB\n",
              double(bf16->state_bytes()) / 1e6, double(packed->state_bytes()) / 1e6);
  EXPECT_LT(packed->state_bytes(), bf16->state_bytes());
  const std::vector<int32_t> prompt = random_tokens(4243, 100, config.vocab_size);
  for (const bool graphs : {false, true}) {
    const int slot = graphs ? 1 : 0;
    const std::vector<float> a = feed_chunk_then_decode(*bf16, prompt, slot, 48, graphs);
    const std::vector<float> b = feed_chunk_then_decode(*packed, prompt, slot, 48, graphs);
    report_exact(std::string("v41_gpu_forward mxfp8/fp4 record caches vs bf16 caches (") +
                     (graphs ? "graphs" : "eager") + ", 48-row chunk + 52 decode steps)",
                 bitwise_mismatches(a, b), a.size());
  }
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back(random_tokens(910 + i, 96, config.vocab_size));
  const std::vector<std::vector<float>> a = feed_mixed_chunks(*bf16, prompts, 96);
  const std::vector<std::vector<float>> b = feed_mixed_chunks(*packed, prompts, 96);
  for (size_t slot = 0; slot < a.size(); ++slot)
    report_exact("v41_gpu_forward mxfp8/fp4 record caches vs bf16 caches (mixed steps, slot " + std::to_string(slot) +
                     ")",
                 bitwise_mismatches(a[slot], b[slot]), a[slot].size());
}

// The engine path: the cuda backend loads deepseek_v41 behind V4GpuForward; a prompt through forward() gives the
// direct model's logits bit for bit (same weights, same step shape), and the sampled steps of a model with Engram
// layers run synchronously with the host sampler (greedy: the arg-max of those logits).
TEST(V41GpuForward, EngineBackendLoadsAndSamples) {
  DI_SKIP_WITHOUT_GPU();
  gpu::register_cuda_backend();
  const std::string dir = gpu_test_model_v41_dir();
  ModelOptions opt;
  opt.show_progress = false;
  opt.device = "cuda";
  opt.capacity.sequences = 4;
  opt.capacity.max_context = 256;
  opt.capacity.max_rows = 64;
  std::unique_ptr<Model> engine = load_model(dir, opt);
  const int64_t V = engine->config().vocab_size;
  const std::vector<int32_t> prompt = random_tokens(55, 20, V);
  auto seq = engine->new_sequence();
  Tensor got = engine->forward(*seq, prompt);

  Models m = load_both();
  std::vector<StepRow> rows;
  for (size_t t = 0; t < prompt.size(); ++t) rows.push_back({0, prompt[t], int32_t(t)});
  const std::vector<float> want = logits_to_host(*m.gpu, m.gpu->step(rows), rows.size());
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) bad += std::memcmp(got.ptr() + i, &want[i], sizeof(float)) != 0;
  report_exact("v41_gpu engine forward vs the direct model step", bad, want.size());

  auto seq2 = engine->new_sequence();
  BatchChunk c{seq2.get(), prompt, true, nullptr};
  ChunkSampling greedy;
  const std::vector<int32_t> tokens =
      engine->enqueue_sampled(std::span<const BatchChunk>(&c, 1), std::span<const ChunkSampling>(&greedy, 1))->tokens();
  ASSERT_EQ(tokens.size(), 1u);
  EXPECT_EQ(tokens[0], argmax(want.data() + (prompt.size() - 1) * V, V));
}

}  // namespace
}  // namespace deepinfer::gputest

namespace deepinfer::gputest {
namespace {

// SWA bounded replay (model-spec §9): with keep_tokens at least every run of a step nothing is cut and the model is
// the exact one bit for bit; with keep_tokens 32 a 96-token prefill step runs the layers after the candidate source
// on its last 32 rows (the first 64 rows' logits are NaN, as on the CPU) and the GPU follows the CPU's bounded replay
// within the statistical bound of the first test, over the kept rows and 8 teacher-forced decode steps after them
// (whose decoder windows start at the first kept row).
TEST(V41GpuForward, BoundedReplayMatchesTheCpuAndIsExactWhenNothingIsCut) {
  DI_SKIP_WITHOUT_GPU();
  const std::string dir = gpu_test_model_v41_dir();
  const ModelConfig config = load_model_config(dir + "/config.json");
  const int64_t V = config.vocab_size;
  const int T = 96, decode = 8;
  const std::vector<int32_t> prompt = random_tokens(2024, T, V), next = random_tokens(2025, decode, V);
  StepCapacity cap = test_capacity();
  cap.max_rows = 128;
  auto replay = [](int keep) {
    PrefillReplayOptions r;
    r.mode = PrefillReplayOptions::Mode::DecoderTail;
    r.keep_tokens = keep;
    return r;
  };
  // The prompt as one step, then one decode row per step: every row's logits.
  std::vector<int32_t> tokens = prompt;
  tokens.insert(tokens.end(), next.begin(), next.end());
  auto run_gpu = [&](const PrefillReplayOptions& r) {
    Checkpoint ck = Checkpoint::open(dir);
    gpu::V41GpuModel g(config, gpu::upload_v41_gpu_weights(config, ck, false), cap, r);
    return feed_chunk_then_decode(g, tokens, 0, T, false);
  };
  const std::vector<float> exact = run_gpu(PrefillReplayOptions{}), uncut = run_gpu(replay(T)), cut = run_gpu(replay(32));
  report_exact("v41_gpu bounded replay with keep_tokens >= the run vs exact", bitwise_mismatches(exact, uncut),
               exact.size());

  auto run_cpu = [&](bool bf16) {
    ModelOptions opt;
    opt.show_progress = false;
    opt.numerics.bf16_activations = bf16;
    opt.prefill_replay = replay(32);
    std::unique_ptr<Model> cpu = load_model(dir, opt);
    auto state = cpu->new_sequence();
    Tensor pre = cpu->forward(*state, prompt);
    std::vector<float> all(pre.ptr(), pre.ptr() + size_t(T) * V);
    for (int i = 0; i < decode; ++i) {
      Tensor l = cpu->forward(*state, std::vector<int32_t>{next[size_t(i)]});
      all.insert(all.end(), l.ptr(), l.ptr() + V);
    }
    return all;
  };
  const std::vector<float> want = run_cpu(true), other = run_cpu(false);
  size_t nan_rows = 0;
  for (int t = 0; t < T - 32; ++t) nan_rows += std::isnan(cut[size_t(t) * V]) && std::isnan(want[size_t(t) * V]);
  EXPECT_EQ(nan_rows, size_t(T - 32)) << "the cut rows' logits must be NaN on both";
  double gpu_sum = 0, ref_sum = 0;
  int gpu_argmax = 0, ref_argmax = 0, total = 0;
  for (int t = T - 32; t < T + decode; ++t) {
    const std::vector<float> g(cut.begin() + t * V, cut.begin() + (t + 1) * V),
        w(want.begin() + t * V, want.begin() + (t + 1) * V), o(other.begin() + t * V, other.begin() + (t + 1) * V);
    gpu_sum += rel_l2(g, w);
    ref_sum += rel_l2(o, w);
    gpu_argmax += argmax(g.data(), V) == argmax(w.data(), V);
    ref_argmax += argmax(o.data(), V) == argmax(w.data(), V);
    ++total;
  }
  std::printf("GPU_CHECK v41_gpu_bounded_replay_logits mean rel_l2=%.3e bound=%.3e (1.5 x the CPU's own bf16 "
              "sensitivity %.3e); argmax equal %d/%d (CPU %d/%d)\n",
              gpu_sum / total, 1.5 * ref_sum / total, ref_sum / total, gpu_argmax, total, ref_argmax, total);
  EXPECT_LE(gpu_sum, 1.5 * ref_sum);
  EXPECT_GE(gpu_argmax, ref_argmax - total / 10);
}

}  // namespace
}  // namespace deepinfer::gputest
