// The process-wide PDL switch of cuda/launch.h.
#include "cuda/launch.h"

#include "core/env_switch.h"

namespace deepinfer::cuda {

namespace {

// DEEPINFER_PDL=0 turns PDL off, anything else (or unset) leaves it on; read once (steps may be enqueued from
// several host threads, one per GPU: core/env_switch.h guards the first read).
EnvSwitch<bool> g_pdl{"DEEPINFER_PDL", [](const char* v) { return !env_equals(v, "0"); }};

}  // namespace

bool pdl_enabled() { return g_pdl.get(); }

void set_pdl(bool on) { g_pdl.set(on); }

}  // namespace deepinfer::cuda
