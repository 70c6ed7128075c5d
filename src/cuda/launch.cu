// The process-wide PDL switch of cuda/launch.h.
#include "cuda/launch.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace deepinfer::cuda {

namespace {

// -1: not read yet; 0 / 1: off / on. Atomic: steps may be enqueued from several host threads (one per GPU).
std::atomic<int> g_pdl{-1};

}  // namespace

bool pdl_enabled() {
  int v = g_pdl.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("DEEPINFER_PDL");
    const int from_env = env && std::strcmp(env, "0") == 0 ? 0 : 1;  // default on
    int expected = -1;
    g_pdl.compare_exchange_strong(expected, from_env, std::memory_order_relaxed);
    v = g_pdl.load(std::memory_order_relaxed);
  }
  return v == 1;
}

void set_pdl(bool on) { g_pdl.store(on ? 1 : 0, std::memory_order_relaxed); }

}  // namespace deepinfer::cuda
