// A thin C++ wrapper of one NCCL communicator (issue 7, docs/parallel.md): one rank of a group, the collectives
// expert parallelism and attention data parallelism need, each enqueued on the caller's stream. Every failure
// throws deepinfer::Error naming the NCCL call, the rank and NCCL's own message.
//
// Built only when NCCL is found (cmake/nccl.cmake, option DEEPINFER_NCCL): the library deepinfer_nccl. The
// binaries link libnccl.so.2 dynamically; on the GPU machine LD_LIBRARY_PATH points at the NCCL of PyTorch's
// nvidia-nccl wheel (docs/parallel.md "Running").
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "parallel/bootstrap.h"
#include "parallel/collectives.h"

struct ncclComm;  // nccl.h: typedef struct ncclComm* ncclComm_t

namespace deepinfer::parallel {

// The NCCL unique id's bytes (NCCL_UNIQUE_ID_BYTES), carried by the TCP bootstrap.
using CommId = std::array<uint8_t, 128>;

size_t comm_type_bytes(CommType t);

class Comm : public Collectives {
 public:
  // A fresh id (rank 0 makes it; every rank of the group passes the same one to the constructor).
  static CommId unique_id();
  // Joins the group as `rank` of `world_size` on CUDA device `device` (made current for the calling thread).
  // Blocks until every rank has joined.
  Comm(const CommId& id, int rank, int world_size, int device);
  ~Comm() override;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int device() const { return device_; }

  // recv [world_size * count] = the `count` elements of every rank, rank-major.
  void all_gather(const void* send, void* recv, size_t count, CommType type, cudaStream_t stream) override;
  // recv [count] = sum over ranks of send [count].
  void all_reduce_sum(const void* send, void* recv, size_t count, CommType type, cudaStream_t stream);
  // recv [recv_count] = sum over ranks of send [world_size * recv_count]'s segment of this rank.
  void reduce_scatter_sum(const void* send, void* recv, size_t recv_count, CommType type,
                          cudaStream_t stream) override;
  // buffer [count] of `root` to every rank (in place).
  void broadcast(void* buffer, size_t count, CommType type, int root, cudaStream_t stream);
  // Grouped point-to-point all-to-all with per-rank counts (elements): send_counts[r] elements from send +
  // send_offsets[r] go to rank r, recv_counts[r] elements from rank r land at recv + recv_offsets[r]. The counts
  // are host arrays of world_size entries and must agree pairwise between ranks (exchange them first, e.g. with
  // an all_gather of the send counts). Zero counts send nothing.
  void all_to_all_v(const void* send, std::span<const size_t> send_counts, std::span<const size_t> send_offsets,
                    void* recv, std::span<const size_t> recv_counts, std::span<const size_t> recv_offsets,
                    CommType type, cudaStream_t stream);
  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_offsets, void* recv,
                    const size_t* recv_counts, const size_t* recv_offsets, CommType type,
                    cudaStream_t stream) override {
    const size_t n = size_t(world_size_);
    all_to_all_v(send, std::span<const size_t>(send_counts, n), std::span<const size_t>(send_offsets, n), recv,
                 std::span<const size_t>(recv_counts, n), std::span<const size_t>(recv_offsets, n), type, stream);
  }
  // Every rank reaches this point (a one-element all-reduce on `stream`, then the stream is synchronized); also
  // reports an asynchronous NCCL error.
  void barrier(cudaStream_t stream);

 private:
  void check(int result, const char* call) const;

  ncclComm* comm_ = nullptr;
  int rank_ = 0, world_size_ = 0, device_ = 0;
  int32_t* barrier_word_ = nullptr;  // device scratch of barrier()
};

// Rank 0 makes the id and the TCP bootstrap (src/parallel/bootstrap.h) carries it to every other rank; then all
// join on `device`.
std::unique_ptr<Comm> comm_from_bootstrap(const BootstrapConfig& config, int device);

// NCCL's version code of the loaded library (e.g. 22809 for 2.28.9).
int nccl_version();

}  // namespace deepinfer::parallel
