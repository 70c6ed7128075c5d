// The L2 prefetch of the next decode GEMVs' weights (cuda/l2_prefetch.h, bench/gpu/NOTES.md "L2 prefetch of the next
// GEMV's weights"):
//  - the kernel, in each L2PrefetchMode, on ranges of every alignment (unaligned heads and tails, ranges inside one
//    16-byte granule, a range ending at the allocation's last byte, empty and null ranges) runs without a fault and
//    changes no byte; more than kL2PrefetchMaxRanges ranges throw;
//  - the V4 and V4.1 GPU steps with the prefetch on (DEEPINFER_L2_PREFETCH=1, read at the model's construction) give
//    the same logits bit for bit as with it off, eagerly and from the CUDA graphs of the step shapes: a prefetch is a
//    hint that reads only weights, so nothing the kernels compute may change. The decode steps (1 row) take the fork
//    points; the 24-row chunk does not (kL2PrefetchMaxRows), so both kinds of step run next to each other.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/l2_prefetch.h"
#include "gpu_test_model.h"
#include "gpu_test_util.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/v4/gpu/v4_gpu_model.h"
#include "model/v41/gpu/v41_gpu_model.h"

namespace deepinfer::gputest {
namespace {

using gpu_steps::bitwise_mismatches;
using gpu_steps::Models;

struct PrefetchRestore {
  bool was = cuda::l2_prefetch_enabled();
  ~PrefetchRestore() { cuda::set_l2_prefetch(was); }
};

TEST(GpuL2Prefetch, RangesOfEveryAlignmentLeaveMemoryUnchanged) {
  DI_SKIP_WITHOUT_GPU();
  // 9 MB + an odd tail: 289 chunks of 32 KB in the first range, so 256 stripes of 2 with a short last stripe.
  const size_t bytes = (size_t(9) << 20) + 77;
  std::vector<uint8_t> host(bytes);
  for (size_t i = 0; i < bytes; ++i) host[i] = uint8_t(i * 131 + 7);
  uint8_t* dev = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&dev, bytes));
  DI_CUDA_CHECK(cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice));
  cudaStream_t stream = nullptr;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const cuda::L2PrefetchMode was = cuda::l2_prefetch_mode();
  for (cuda::L2PrefetchMode mode :
       {cuda::L2PrefetchMode::Bulk, cuda::L2PrefetchMode::Line, cuda::L2PrefetchMode::LineLast}) {
    cuda::set_l2_prefetch_mode(mode);
    cuda::l2_prefetch({{dev + 1, bytes - 1},               // unaligned head, unaligned tail at the allocation's end
                       {dev + 5, 7},                       // inside one 16-byte granule: no interior
                       {dev + 16, 16},                     // exactly one granule
                       {nullptr, 100},                     // skipped
                       {dev, 0},                           // skipped
                       {dev + 3, 70000},                   // three chunks, both edges unaligned
                       {dev + bytes - 5, 5},               // the last bytes only
                       {dev + 4096, (size_t(1) << 20)}},  // aligned, a whole number of chunks
                      stream);
    cuda::l2_prefetch({}, stream);  // nothing to do: no launch
    DI_CUDA_CHECK(cudaStreamSynchronize(stream));
    DI_CUDA_CHECK(cudaGetLastError());
  }
  cuda::set_l2_prefetch_mode(was);
  std::vector<uint8_t> after(bytes);
  DI_CUDA_CHECK(cudaMemcpy(after.data(), dev, bytes, cudaMemcpyDeviceToHost));
  size_t changed = 0;
  for (size_t i = 0; i < bytes; ++i) changed += after[i] != host[i];
  report_exact("l2_prefetch leaves the prefetched bytes unchanged", changed, bytes);
  EXPECT_THROW(cuda::l2_prefetch({{dev, 16}, {dev, 16}, {dev, 16}, {dev, 16}, {dev, 16}, {dev, 16}, {dev, 16},
                                  {dev, 16}, {dev, 16}},
                                 stream),
               Error);
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
  DI_CUDA_CHECK(cudaFree(dev));
}

// The scored sequence (gpu_steps::scored_sequence: two prefill chunks, then decode steps whose indexers rank more
// entries than index_topk): prefetch off eager (the reference) and graphs from one model, prefetch on eager and graphs
// from another of the same checkpoint, then slot 0 of that one restarted from position 0 from its graphs.
void expect_prefetch_bitwise(const std::string& name, const std::string& dir, const gpu_steps::GpuModelFactory& make,
                             uint64_t seed) {
  PrefetchRestore restore;
  auto load = [&](bool prefetch) {
    cuda::set_l2_prefetch(prefetch);  // read by the model's constructor
    return gpu_steps::load_cpu_and_gpu(dir, make);
  };
  std::vector<float> off, off_graph;
  gpu_steps::ScoredSequence seq;
  {
    Models m = load(false);
    seq = gpu_steps::scored_sequence(m.config, seed);
    ASSERT_NO_FATAL_FAILURE(gpu_steps::expect_indexers_rank(name, m.config, seq));
    off = gpu_steps::feed_scored(*m.gpu, seq, 0, false);
    off_graph = gpu_steps::feed_scored(*m.gpu, seq, 1, true);
  }
  Models m = load(true);
  const std::vector<float> on = gpu_steps::feed_scored(*m.gpu, seq, 0, false);
  const std::vector<float> on_graph = gpu_steps::feed_scored(*m.gpu, seq, 1, true);
  const std::vector<float> again = gpu_steps::feed_scored(*m.gpu, seq, 0, true);
  ASSERT_EQ(on.size(), off.size());
  report_exact(name + " l2 prefetch off: graphs vs eager", bitwise_mismatches(off, off_graph), off.size());
  report_exact(name + " l2 prefetch on vs off, eager", bitwise_mismatches(off, on), off.size());
  report_exact(name + " l2 prefetch on graphs vs off eager", bitwise_mismatches(off, on_graph), off.size());
  report_exact(name + " l2 prefetch on graphs, slot 0 restarted, vs off eager", bitwise_mismatches(off, again),
               off.size());
}

TEST(GpuL2PrefetchModel, V4StepBitwiseWithAndWithoutPrefetch) {
  DI_SKIP_WITHOUT_GPU();
  expect_prefetch_bitwise("v4_gpu_forward", gpu_test_model_dir(), gpu_steps::make_v4_test_gpu, 93);
}

TEST(GpuL2PrefetchModel, V41StepBitwiseWithAndWithoutPrefetch) {
  DI_SKIP_WITHOUT_GPU();
  expect_prefetch_bitwise("v41_gpu_forward", gpu_test_model_v41_dir(),
                          gpu_steps::make_v41_test_gpu,
                          94);
}

}  // namespace
}  // namespace deepinfer::gputest
