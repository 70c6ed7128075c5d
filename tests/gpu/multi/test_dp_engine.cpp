// The data-parallel engine on two GPUs (issue 7, docs/data_parallel.md "On the GPU"): EngineOptions::data_parallel = 2
// with device cuda builds rank r's V4 or V4.1 GPU model on GPU r, with half of the routed experts and an NCCL
// expert-parallel group over both ranks; the ranks step in lockstep, a rank without rows joining the group's MoE
// collectives. In batch-invariant mode (algorithms.md §4) every request must give bitwise the tokens, finish reason
// and logprobs of the one-GPU engine, greedy and seeded alike (request ids, hence default seeds, follow submission
// order on both). Prints GPU_CHECK lines. Needs 2 CUDA devices (skipped otherwise; DEEPINFER_REQUIRE_GPU turns the skip into a failure).
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/mixed_requests.h"
#include "gpu_test_engine.h"
#include "two_gpus.h"

namespace deepinfer::gputest {
namespace {

using multi_gpu_test::device_count;

EngineOptions dp_engine_options() {
  EngineOptions o = gpu_test_engine_options();
  gpu::register_cuda_data_parallel();
  o.prefill_chunk = 16;
  o.max_num_seqs = 16;
  o.max_batch_tokens = 48;  // >= prefill_chunk + max_num_seqs - 1 (batch-invariant chunks are never shortened)
  o.batch_invariant = true;
  o.show_progress = false;
  return o;
}

// The 20 mixed requests of the checkpoint in `model_dir` (vocab 1024: tools/fixtures/make_gpu_model.py, both
// families) on the one-GPU engine and on the data-parallel engine over two GPUs, with asynchronous and with synchronous
// scheduling: every request's tokens, finish reason, request id and logprobs (bitwise) equal. `tag` prefixes the
// GPU_CHECK names ("" for V4). With `rebalance_steps` > 0 the two-GPU engine also rebalances its experts every that
// many lockstep steps (EngineOptions::eplb_rebalance_steps, a gain threshold of 0 so that every changed placement
// moves; docs/parallel.md "The engine's rebalancing"): the moves change no result bit, and at least one happens.
// With `redundant` > 0 (EngineOptions::eplb_redundant_experts) the ranks' experts are built with that many redundant
// slots per layer (the load-unaware EPLB placement, parallel::load_unaware_placement) and the rebalances keep that
// shape: the replicas hold the same bits, so which copy computes a pair changes no result bit either.
void expect_two_gpus_give_the_one_gpu_outputs(const std::string& model_dir, const std::string& tag,
                                              int rebalance_steps = 0, int redundant = 0) {
  const int64_t vocab = 1024;
  const auto mixed = testing::mixed_requests(20, 4242, int(vocab));
  std::vector<Request> reqs;
  for (const auto& m : mixed) reqs.push_back(m.request);
  for (bool async : {true, false}) {
    SCOPED_TRACE(async ? "asynchronous scheduling" : "synchronous scheduling");
    EngineOptions o = dp_engine_options();
    o.model = model_dir;
    o.async_scheduling = async;
    std::vector<RequestOutput> one;
    {
      auto engine = Engine::create(o);
      ASSERT_EQ(engine->vocab_size(), vocab);
      one = engine->generate(reqs);
    }
    o.data_parallel = 2;
    if (rebalance_steps > 0) {
      o.expert_parallel = 2;
      o.eplb_window_steps = 8;
      o.eplb_rebalance_steps = rebalance_steps;
      o.eplb_rebalance_min_gain = 0;
      o.eplb_redundant_experts = redundant;
    }
    std::vector<RequestOutput> two;
    EngineStats st;
    {
      auto engine = Engine::create(o);
      two = engine->generate(reqs);
      st = engine->stats();
    }
    ASSERT_EQ(one.size(), reqs.size());
    ASSERT_EQ(two.size(), reqs.size());
    int accepted = 0, greedy = 0, seeded = 0, tokens_equal = 0, logprobs_equal = 0, tokens = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      SCOPED_TRACE("request " + std::to_string(i));
      const bool rejected = one[i].finish_reason == FinishReason::Rejected;
      accepted += !rejected;
      greedy += !rejected && reqs[i].params.temperature == 0.0f;
      seeded += !rejected && reqs[i].params.temperature > 0.0f;
      tokens += int(one[i].token_ids.size());
      const bool same_tokens =
          two[i].token_ids == one[i].token_ids && two[i].finish_reason == one[i].finish_reason &&
          two[i].request_id == one[i].request_id;
      bool same_logprobs = two[i].logprobs.size() == one[i].logprobs.size();
      for (size_t k = 0; same_logprobs && k < one[i].logprobs.size(); ++k)  // bitwise
        same_logprobs = std::memcmp(&two[i].logprobs[k].logprob, &one[i].logprobs[k].logprob, sizeof(float)) == 0;
      tokens_equal += same_tokens;
      logprobs_equal += same_logprobs;
      EXPECT_EQ(two[i].request_id, one[i].request_id);
      EXPECT_EQ(two[i].token_ids, one[i].token_ids);
      EXPECT_EQ(two[i].finish_reason, one[i].finish_reason);
      EXPECT_TRUE(same_logprobs);
    }
    const char* mode = async ? "async" : "sync";
    std::printf("GPU_CHECK %sdp2_engine_vs_one_gpu_%s requests=%zu tokens_equal=%d logprobs_equal=%d (accepted %d: "
                "greedy %d, seeded %d; %d tokens)\n",
                tag.c_str(), mode, reqs.size(), tokens_equal, logprobs_equal, accepted, greedy, seeded, tokens);
    ASSERT_EQ(st.ranks.size(), 2u);
    std::printf("GPU_CHECK %sdp2_engine_ranks_%s requests=%llu/%llu steps=%llu/%llu joined_empty=%llu/%llu "
                "prefill_tokens=%llu/%llu decode_tokens=%llu/%llu async_steps=%llu\n",
                tag.c_str(), mode, (unsigned long long)st.ranks[0].requests, (unsigned long long)st.ranks[1].requests,
                (unsigned long long)st.ranks[0].steps, (unsigned long long)st.ranks[1].steps,
                (unsigned long long)st.ranks[0].empty_steps, (unsigned long long)st.ranks[1].empty_steps,
                (unsigned long long)st.ranks[0].prefill_tokens, (unsigned long long)st.ranks[1].prefill_tokens,
                (unsigned long long)st.ranks[0].decode_tokens, (unsigned long long)st.ranks[1].decode_tokens,
                (unsigned long long)st.async_steps);
    EXPECT_GT(greedy, 0);
    EXPECT_GT(seeded, 0);
    EXPECT_GT(st.ranks[0].requests, 0u);
    EXPECT_GT(st.ranks[1].requests, 0u);
    EXPECT_EQ(st.ranks[0].requests + st.ranks[1].requests, uint64_t(accepted));
    if (rebalance_steps > 0) {
      std::printf("GPU_CHECK %sdp2_engine_rebalance_%s every=%d redundant=%d rebalances=%llu slots_moved=%llu "
                  "moe_lb_placed=%.4f contiguous=%.4f window_pairs=%llu\n",
                  tag.c_str(), mode, rebalance_steps, redundant, (unsigned long long)st.eplb_rebalances,
                  (unsigned long long)st.eplb_slots_moved, st.moe_lb_placed, st.moe_lb_contiguous,
                  (unsigned long long)st.eplb_window_pairs);
      EXPECT_GT(st.eplb_rebalances, 0u);
    }
  }
}

TEST(DpEngine, TwoGpusGiveTheOneGpuOutputs) {
  SKIP_WITHOUT_TWO_GPUS();
  ResetBatchInvariant reset;
  expect_two_gpus_give_the_one_gpu_outputs(gpu_test_model_dir(), "");
}

// The same on the V4.1 GPU test checkpoint (every CSA2 role, two Engram layers, 16 experts top-4: rank r holds
// experts 8r..8r+7 of every layer; docs/parallel.md "V4.1"). Its steps need every token on the host (the Engram
// n-gram hash), so on both engines the sampled steps run synchronously through the host sampler
// (GpuStepModel::resolves_tokens_on_device: V4GpuForward::enqueue_sampled takes Model's default), asynchronous
// scheduling or not; each rank hashes its own rows and reads the process's one copy of the Engram tables.
TEST(DpEngine, V41TwoGpusGiveTheOneGpuOutputs) {
  SKIP_WITHOUT_TWO_GPUS();
  ResetBatchInvariant reset;
  expect_two_gpus_give_the_one_gpu_outputs(gpu_test_model_v41_dir(), "v41_");
}

// The engine's EPLB rebalancing on two GPUs (written, not yet run): every 4 lockstep steps both ranks move their
// experts to the window's EPLB placement (Model::rebalance_experts -> GpuStepModelBase::rebalance_experts, an
// all-to-all-v of the moving experts); the outputs stay the one-GPU engine's bit for bit (the replicas hold the same
// bits and batch-invariant mode makes a row independent of the step's other rows).
TEST(DpEngine, RebalancingKeepsTheOneGpuOutputs) {
  SKIP_WITHOUT_TWO_GPUS();
  ResetBatchInvariant reset;
  expect_two_gpus_give_the_one_gpu_outputs(gpu_test_model_dir(), "", /*rebalance_steps=*/4);
}

TEST(DpEngine, V41RebalancingKeepsTheOneGpuOutputs) {
  SKIP_WITHOUT_TWO_GPUS();
  ResetBatchInvariant reset;
  expect_two_gpus_give_the_one_gpu_outputs(gpu_test_model_v41_dir(), "v41_", /*rebalance_steps=*/4);
}

// The same with 8 redundant expert slots per layer (16 experts: 12 slots per rank, 8 experts with a copy on each
// rank): the engine's option builds the ranks' experts in the load-unaware EPLB placement and every rebalance keeps
// 8 redundant slots (written, not yet run).
TEST(DpEngine, RebalancingWithRedundantExpertsKeepsTheOneGpuOutputs) {
  SKIP_WITHOUT_TWO_GPUS();
  ResetBatchInvariant reset;
  expect_two_gpus_give_the_one_gpu_outputs(gpu_test_model_dir(), "redundant_", /*rebalance_steps=*/4,
                                           /*redundant=*/8);
}

TEST(DpEngine, V41RebalancingWithRedundantExpertsKeepsTheOneGpuOutputs) {
  SKIP_WITHOUT_TWO_GPUS();
  ResetBatchInvariant reset;
  expect_two_gpus_give_the_one_gpu_outputs(gpu_test_model_v41_dir(), "v41_redundant_", /*rebalance_steps=*/4,
                                           /*redundant=*/8);
}

// More ranks than visible GPUs: a clear error before any communicator is made.
TEST(DpEngine, MoreRanksThanGpusIsRejected) {
  const int n = device_count();
  if (n < 1) GTEST_SKIP() << "needs a CUDA device";
  ResetBatchInvariant reset;
  EngineOptions o = dp_engine_options();
  o.data_parallel = n + 1;
  std::string error;
  try {
    Engine::create(o);
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::printf("GPU_CHECK dp_more_ranks_than_gpus rejected=%d\n", int(error.find("CUDA device") != std::string::npos));
  EXPECT_NE(error.find("one CUDA device each"), std::string::npos) << error;
}

}  // namespace
}  // namespace deepinfer::gputest
