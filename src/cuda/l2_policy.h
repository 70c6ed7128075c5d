// The L2 policy of the decode weight streams (evict_first): one switch for every weight-streaming kernel that honours
// it (the device helpers of the loads that take it: cuda/l2_policy.cuh).
//
// Why: a batch-1 decode step streams ~60 GB of weights through the 50 MB L2, each byte once, evicting everything
// between two uses of it: the code and data of the step's latency kernels (session 20, run 115: inside the step the
// decode select's last block takes 20,245 cycles after its ticket against 10,436 alone; its first radix pass 6,935
// against 2,591 while its second, the same code run again, is unchanged: the first run of each stretch of code
// fetches it from DRAM). With evict_first the weights' lines are the first L2 replaces. Only the cache policy
// changes, not the bytes read: the same bits.
#pragma once

#include <cstdint>

#include "core/env_switch.h"

namespace deepinfer::cuda {

// DEEPINFER_WEIGHT_L2_EVICT_FIRST=1 (default off until measured): the decode stream kernels (stream_gemm.cuh's,
// through packed::Args::weights_evict_first) and the W8A16 GEMV (wo_a) read their weights evict_first.
inline EnvSwitch<bool>& weight_l2_evict_first_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_WEIGHT_L2_EVICT_FIRST", [](const char* v) { return env_equals(v, "1"); }};
  return on;
}
inline bool weight_l2_evict_first() { return weight_l2_evict_first_switch().get(); }
inline void set_weight_l2_evict_first(bool on) { weight_l2_evict_first_switch().set(on); }

}  // namespace deepinfer::cuda
