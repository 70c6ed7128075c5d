// Kernel launches with programmatic dependent launch (PDL, sm_90; bench/gpu/NOTES.md "PDL"). At batch-1 decode
// the step is a chain of ~35 small kernels per layer whose cost is each kernel's own ramp-up and drain, not its
// bytes. With PDL the next kernel of the stream is scheduled while its predecessor drains: its blocks run their
// prologue (index math, shared-memory / barrier setup, prefetch of weights, which no step writes) and then wait
// at pdl_wait() until the predecessor has completed and its writes are visible. Captured into a CUDA graph the
// stream edge becomes a programmatic edge, so graph replay keeps the overlap.
//
// The contract every kernel launched through launch() keeps (tests/gpu/test_pdl.cpp checks the outcome):
//  - every thread that touches global memory other than weights calls pdl_wait() first: no read of data a
//    predecessor writes, and no global write at all before it (a predecessor may still READ the buffer: a
//    write-after-read hazard). Simplest form, used almost everywhere: pdl_wait() at the top of the kernel, before
//    any early return, after pure register / shared-memory setup and weight prefetches only;
//  - every block executes pdl_wait() (before any early exit). A grid that completes without waiting could
//    complete before its predecessor, and then a plain launch after it would no longer imply the predecessor
//    finished: transitivity (A -> B -> C: C's wait on B implies A only because B waited on A) needs the wait;
//  - pdl_launch_dependents() is a scheduling hint only: the dependent may start its prologue, its pdl_wait()
//    still waits for this whole grid's completion and memory flush. Called near the end of the main loop, so
//    the dependent's blocks do not take SM slots (and issue slots of a concurrent side-stream branch) too early;
//    the dense decode stream (cuda/stream_gemm.cuh entry_trigger) calls it at its top instead: its persistent
//    blocks fill the SMs, so a dependent block only takes a slot one of them has left (run 133: V4 batch 1 -1 %).
// A kernel launched without the attribute (DEEPINFER_PDL=0, or a plain <<<>>> launch by a caller that does not
// opt in, e.g. the MoE) runs the same code: both instructions are then no-ops, so results are bitwise the same
// either way. Kernels without pdl_wait() must never be launched with the attribute.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace deepinfer::cuda {

// Process-wide switch: DEEPINFER_PDL=0 turns PDL off (read once, default on); set_pdl overrides it (tests and
// bench/gpu/v4_decode --pdl compare both settings in one process). CUDA graphs keep the setting they were
// captured with: a step graph is captured per setting (model/gpu/step_rows.h StepGraphs).
bool pdl_enabled();
void set_pdl(bool on);

// Where and how a kernel runs. cluster_x > 1 adds a thread-block cluster along x (packed_gemm.cuh's split-K).
// pdl = false launches plainly whatever the switch says (callers whose neighbours are not ours).
struct LaunchSpec {
  dim3 grid;
  dim3 block;
  size_t smem = 0;
  cudaStream_t stream = nullptr;
  unsigned cluster_x = 1;
  bool pdl = true;
};

// The one launch path of the PDL-aware kernels: cudaLaunchKernelEx with the programmatic stream serialization
// attribute when PDL is on (and spec.pdl). Returns the launch's error (callers wrap it in DI_CUDA_CHECK, which
// names the call site). The arguments are converted to the kernel's parameter types as a <<<>>> launch does.
template <class... Params, class... Args>
cudaError_t launch(const LaunchSpec& spec, void (*kernel)(Params...), Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = spec.grid;
  cfg.blockDim = spec.block;
  cfg.dynamicSmemBytes = spec.smem;
  cfg.stream = spec.stream;
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  if (spec.pdl && pdl_enabled()) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (spec.cluster_x > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = spec.cluster_x;
    attrs[n].val.clusterDim.y = 1;
    attrs[n].val.clusterDim.z = 1;
    ++n;
  }
  cfg.attrs = n ? attrs : nullptr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// The common form: grid, block, dynamic shared memory, stream, then the kernel's arguments.
template <class... Params, class... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  LaunchSpec spec;
  spec.grid = grid;
  spec.block = block;
  spec.smem = smem;
  spec.stream = stream;
  return launch(spec, kernel, std::forward<Args>(args)...);
}

#if defined(__CUDACC__)
// Device side. griddepcontrol exists from sm_90; elsewhere (and in host passes) these compile to nothing. The
// "memory" clobber keeps the compiler from moving this thread's global accesses across the wait.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Pulls `bytes` of a READ-ONLY buffer (weights) into L2 with one bulk instruction, so that a kernel can start
// streaming its weights before pdl_wait(). A hint: the data is read again by ordinary loads after the wait. The
// instruction needs a 16-byte aligned address and size; anything else is skipped (a hint must never fault).
__device__ __forceinline__ void prefetch_l2_bulk(const void* src, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (bytes == 0 || ((reinterpret_cast<uintptr_t>(src) | bytes) & 15u) != 0) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
#endif
}
// Starts the line holding p towards L1: a hint, issued where it stands (the compiler may move a load behind the
// branch that uses it, not this), so a later read of the line hits L1 instead of paying its own round trip.
__device__ __forceinline__ void prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p)); }
#endif

}  // namespace deepinfer::cuda
