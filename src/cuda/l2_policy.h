// The L2 policy of the decode weight streams (evict_first): one switch for every weight-streaming kernel that honours
// it (the device helpers of the loads that take it: cuda/l2_policy.cuh).
//
// Why: between a latency kernel's runs in two consecutive layers a batch-1 decode step streams a layer's weights
// (~210 MB on V4-Flash) through the 50 MB L2, each byte once, evicting what the step reuses: the code and data of its
// latency kernels (session 20, run 115: inside the step the decode select's last block takes 20,245 cycles after its
// ticket against 10,436 alone; its first radix pass 6,935 against 2,591 while its second, the same code run again, is
// unchanged: the first run of each stretch of code fetches it from DRAM). With evict_first the weights' lines are the
// first L2 replaces (run 118: 20,245 -> 13,173 cycles, V4 batch 1 -4.6 %). Only the cache policy changes, not the
// bytes read: the same bits.
#pragma once

namespace deepinfer::cuda {

// Which weight streams read evict_first: none; the dense ones (the FP8 decode stream kernels through
// packed::Args::weights_evict_first, the W8A16 GEMV of wo_a and the one-row bf16 GEMV pair of the compressors, where
// a launch reads each weight byte once); or those and the MXFP4 expert streams.
// DEEPINFER_WEIGHT_L2_EVICT_FIRST=0 | dense | 1 (all, the default), read once (l2_policy.cu); set_weight_l2_evict_first
// overrides it (tests, benches; a captured graph keeps the policy of its launches).
enum class WeightEvictFirst { Off, Dense, All };
WeightEvictFirst weight_l2_evict_first();
void set_weight_l2_evict_first(WeightEvictFirst mode);
inline bool dense_weights_evict_first() { return weight_l2_evict_first() != WeightEvictFirst::Off; }
inline bool expert_weights_evict_first() { return weight_l2_evict_first() == WeightEvictFirst::All; }

}  // namespace deepinfer::cuda
