// The collectives a multi-GPU step needs, as an interface without NCCL (issue 7, docs/parallel.md): the GPU models
// (deepinfer_gpu) and the MoE (deepinfer_cuda) enqueue their communication through it and build without NCCL;
// parallel::Comm (comm.h, library deepinfer_nccl) implements it over one NCCL communicator. Every call enqueues on
// the caller's stream (so it can be captured into a CUDA graph) and every rank of the group must make the same
// calls with the same counts in the same order.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace deepinfer::parallel {

enum class CommType { U8, I32, I64, F32, BF16 };

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // recv [world_size * count] = the `count` elements of every rank, rank-major. In place when send is this rank's
  // segment of recv (recv + rank * count).
  virtual void all_gather(const void* send, void* recv, size_t count, CommType type, cudaStream_t stream) = 0;
  // recv [recv_count] = sum over ranks of send [world_size * recv_count]'s segment of this rank.
  virtual void reduce_scatter_sum(const void* send, void* recv, size_t recv_count, CommType type,
                                  cudaStream_t stream) = 0;
  // Grouped point-to-point all-to-all with per-rank counts (elements; host arrays of world_size entries that agree
  // pairwise between ranks): send_counts[r] elements from send + send_offsets[r] to rank r, recv_counts[r] from rank r
  // to recv + recv_offsets[r]. The EPLB weight moves between steps use it (GpuStepModelBase::rebalance_experts).
  // Plain arrays, not std::span: this header is also compiled as C++17 by nvcc.
  virtual void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_offsets, void* recv,
                            const size_t* recv_counts, const size_t* recv_offsets, CommType type,
                            cudaStream_t stream) = 0;
};

}  // namespace deepinfer::parallel
