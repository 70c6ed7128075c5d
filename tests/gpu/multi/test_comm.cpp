// The NCCL communicator (src/parallel/comm.h) on two GPUs: collectives against values worked out on the host,
// and one expert-parallel round trip (dispatch over all-to-all-v, experts on the ranks that hold them, outputs
// back, combine in top-k slot order) that must equal the single-GPU combine bit for bit. Ranks run as threads,
// one per GPU; CommProcess.* runs as separate processes under `deepinfer launch --nproc 2 -- test_gpu_comm
// --gtest_filter='CommProcess.*'` (TCP bootstrap) and skips otherwise.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "parallel/comm.h"
#include "parallel/eplb.h"
#include "parallel/expert_dispatch.h"
#include "two_gpus.h"

namespace deepinfer::parallel {
namespace {

#define DI_TEST_CUDA(expr)                                                                         \
  do {                                                                                             \
    cudaError_t e_ = (expr);                                                                       \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(e_)); \
  } while (0)

using multi_gpu_test::device_count;

template <class T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceArray(size_t count) : n(count) { DI_TEST_CUDA(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T))); }
  // A pageable host-to-device cudaMemcpy may return before its DMA lands, and the collectives run on a
  // non-blocking stream that does not wait for the legacy stream: synchronize before any collective reads it.
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    if (n) DI_TEST_CUDA(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    DI_TEST_CUDA(cudaDeviceSynchronize());
  }
  ~DeviceArray() { cudaFree(ptr); }
  std::vector<T> host() const {
    std::vector<T> out(n);
    if (n) DI_TEST_CUDA(cudaMemcpy(out.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }
};

// Runs fn(comm, stream) on `world` threads, thread r owning GPU r; a thrown error fails the test with its rank.
// Each fn checks its results after its last collective, so a rank whose check fails still meets the others at
// the closing barrier (instead of leaving them blocked in it).
void run_ranks(int world, const std::function<void(Comm&, cudaStream_t)>& fn) {
  const CommId id = Comm::unique_id();
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        Comm comm(id, r, world, r);
        cudaStream_t stream;
        DI_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        try {
          fn(comm, stream);
        } catch (const std::exception& e) {
          errors[size_t(r)] = e.what();
        }
        comm.barrier(stream);
        cudaStreamDestroy(stream);
      } catch (const std::exception& e) {
        errors[size_t(r)] += std::string(errors[size_t(r)].empty() ? "" : "; ") + e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
}

TEST(Comm, AllGather) {
  SKIP_WITHOUT_TWO_GPUS();
  std::printf("NCCL %d\n", nccl_version());
  const int world = 2;
  const size_t count = 1000;
  run_ranks(world, [&](Comm& c, cudaStream_t s) {
    std::vector<float> mine(count);
    for (size_t i = 0; i < count; ++i) mine[i] = float(c.rank() * 10000 + int(i));
    DeviceArray<float> send(mine), recv(world * count);
    c.all_gather(send.ptr, recv.ptr, count, CommType::F32, s);
    DI_TEST_CUDA(cudaStreamSynchronize(s));
    const std::vector<float> got = recv.host();
    for (int r = 0; r < world; ++r)
      for (size_t i = 0; i < count; ++i)
        if (got[size_t(r) * count + i] != float(r * 10000 + int(i)))
          throw std::runtime_error("all_gather: element " + std::to_string(i) + " of rank " + std::to_string(r));
  });
}

TEST(Comm, ReduceScatterAllReduceBroadcast) {
  SKIP_WITHOUT_TWO_GPUS();
  const int world = 2;
  const size_t n = 512;
  run_ranks(world, [&](Comm& c, cudaStream_t s) {
    // Small integers in fp32: every sum is exact whatever order NCCL adds in.
    std::vector<float> v(world * n);
    for (size_t i = 0; i < v.size(); ++i) v[i] = float((int(i) % 97) + 1000 * c.rank());
    DeviceArray<float> send(v), scattered(n), reduced(world * n);
    c.reduce_scatter_sum(send.ptr, scattered.ptr, n, CommType::F32, s);
    c.all_reduce_sum(send.ptr, reduced.ptr, world * n, CommType::F32, s);
    std::vector<int32_t> b(16, c.rank() == 1 ? 77 : -1);
    DeviceArray<int32_t> bcast(b);
    c.broadcast(bcast.ptr, b.size(), CommType::I32, 1, s);
    DI_TEST_CUDA(cudaStreamSynchronize(s));
    const std::vector<float> rs = scattered.host(), ar = reduced.host();
    for (size_t i = 0; i < n; ++i) {
      const size_t g = size_t(c.rank()) * n + i;
      if (rs[i] != float(2 * (int(g) % 97) + 1000)) throw std::runtime_error("reduce_scatter element " + std::to_string(i));
    }
    for (size_t i = 0; i < world * n; ++i)
      if (ar[i] != float(2 * (int(i) % 97) + 1000)) throw std::runtime_error("all_reduce element " + std::to_string(i));
    for (int32_t x : bcast.host())
      if (x != 77) throw std::runtime_error("broadcast from rank 1");
  });
}

TEST(Comm, AllToAllV) {
  SKIP_WITHOUT_TWO_GPUS();
  const int world = 2;
  // count(src, dst) elements from src to dst, self included; rank 1 sends nothing to rank 0.
  auto count = [](int src, int dst) -> size_t { return src == 1 && dst == 0 ? 0 : size_t(3 + 5 * src + 7 * dst); };
  auto value = [](int src, int dst, size_t i) { return int32_t(src * 1000000 + dst * 1000 + int(i)); };
  run_ranks(world, [&](Comm& c, cudaStream_t s) {
    const int me = c.rank();
    std::vector<size_t> send_counts(world), recv_counts(world);
    for (int r = 0; r < world; ++r) {
      send_counts[size_t(r)] = count(me, r);
      recv_counts[size_t(r)] = count(r, me);
    }
    const std::vector<size_t> send_offsets = segment_offsets(send_counts), recv_offsets = segment_offsets(recv_counts);
    std::vector<int32_t> send_host;
    for (int r = 0; r < world; ++r)
      for (size_t i = 0; i < send_counts[size_t(r)]; ++i) send_host.push_back(value(me, r, i));
    DeviceArray<int32_t> send(send_host), recv(recv_offsets.back() + recv_counts.back());
    c.all_to_all_v(send.ptr, send_counts, send_offsets, recv.ptr, recv_counts, recv_offsets, CommType::I32, s);
    DI_TEST_CUDA(cudaStreamSynchronize(s));
    const std::vector<int32_t> got = recv.host();
    for (int r = 0; r < world; ++r)
      for (size_t i = 0; i < recv_counts[size_t(r)]; ++i)
        if (got[recv_offsets[size_t(r)] + i] != value(r, me, i))
          throw std::runtime_error("all_to_all_v: element " + std::to_string(i) + " from rank " + std::to_string(r));
  });
}

// Expert e's stand-in output on a row (fp32 on the host, like the rows the device MoE sums).
void expert_output(int e, const float* x, int hidden, float* y) {
  for (int h = 0; h < hidden; ++h) y[h] = x[h] * (0.37f * float(e + 1)) + float(e) * 0.001f;
}

TEST(Comm, ExpertParallelRoundTripCombinesInSlotOrder) {
  SKIP_WITHOUT_TWO_GPUS();
  const int world = 2, experts = 16, top_k = 6, hidden = 256;
  std::vector<double> skew(experts, 1.0);
  skew[5] = 12.0;
  const ExpertPlacement placement = eplb_placement({skew}, world, 2);  // expert 5 takes both redundant slots
  const std::vector<int> tokens{37, 11};
  run_ranks(world, [&](Comm& c, cudaStream_t s) {
    const int me = c.rank(), T = tokens[size_t(me)];
    // Routing (distinct experts per token) and activations of this rank's tokens.
    uint32_t seed = 977u + 131u * uint32_t(me);
    auto next = [&] { return seed = seed * 1664525u + 1013904223u; };
    std::vector<int32_t> ids;
    std::vector<float> x;
    for (int t = 0; t < T; ++t) {
      std::vector<int32_t> picked;
      while (int(picked.size()) < top_k) {
        const int32_t e = int32_t(next() % experts);
        if (std::find(picked.begin(), picked.end(), e) == picked.end()) picked.push_back(e);
      }
      ids.insert(ids.end(), picked.begin(), picked.end());
      for (int h = 0; h < hidden; ++h) x.push_back(float(int(next() % 2001) - 1000) / 997.0f);
    }
    const DispatchLayout L = plan_dispatch(ids, top_k, placement, 0, me == 0 ? 0 : uint64_t(tokens[0]));
    // Counts: every rank learns the whole [src][dst] matrix.
    std::vector<int64_t> my_counts(L.send_counts.begin(), L.send_counts.end());
    DeviceArray<int64_t> counts_dev(my_counts), matrix_dev(size_t(world) * world);
    c.all_gather(counts_dev.ptr, matrix_dev.ptr, size_t(world), CommType::I64, s);
    DI_TEST_CUDA(cudaStreamSynchronize(s));
    const std::vector<int64_t> matrix = matrix_dev.host();
    std::vector<size_t> recv_counts(world);
    for (int src = 0; src < world; ++src) recv_counts[size_t(src)] = size_t(matrix[size_t(src) * world + size_t(me)]);
    const std::vector<size_t> recv_offsets = segment_offsets(recv_counts);
    const size_t received = recv_offsets.back() + recv_counts.back();
    // Dispatch: rows and destination slots in send order.
    std::vector<float> rows;
    for (int32_t pair : L.send_pair) rows.insert(rows.end(), x.begin() + (pair / top_k) * hidden, x.begin() + (pair / top_k + 1) * hidden);
    auto scaled = [&](const std::vector<size_t>& v) {
      std::vector<size_t> out(v);
      for (size_t& k : out) k *= size_t(hidden);
      return out;
    };
    DeviceArray<float> send_rows(rows), recv_rows(received * hidden);
    DeviceArray<int32_t> send_slots(L.send_slot), recv_slots(received);
    c.all_to_all_v(send_rows.ptr, scaled(L.send_counts), scaled(L.send_offsets), recv_rows.ptr, scaled(recv_counts),
                   scaled(recv_offsets), CommType::F32, s);
    c.all_to_all_v(send_slots.ptr, L.send_counts, L.send_offsets, recv_slots.ptr, recv_counts, recv_offsets,
                   CommType::I32, s);
    DI_TEST_CUDA(cudaStreamSynchronize(s));
    // Experts of this rank on what it received, outputs back to where the pairs came from.
    const std::vector<float> in = recv_rows.host();
    const std::vector<int32_t> slots = recv_slots.host();
    std::vector<float> out(received * hidden);
    for (size_t i = 0; i < received; ++i) {
      const int e = placement.phy2log[0][size_t(me * placement.slots_per_rank + slots[i])];
      expert_output(e, &in[i * hidden], hidden, &out[i * hidden]);
    }
    DeviceArray<float> out_dev(out), returned_dev(ids.size() * hidden);
    c.all_to_all_v(out_dev.ptr, scaled(recv_counts), scaled(recv_offsets), returned_dev.ptr, scaled(L.send_counts),
                   scaled(L.send_offsets), CommType::F32, s);
    DI_TEST_CUDA(cudaStreamSynchronize(s));
    const std::vector<float> returned = returned_dev.host();
    std::vector<float> combined(size_t(T) * hidden);
    combine_in_slot_order(returned.data(), L, hidden, combined.data());
    // The single-GPU combine: every expert of the token from zero, in top-k slot order.
    std::vector<float> expect(hidden), y(hidden);
    for (int t = 0; t < T; ++t) {
      std::fill(expect.begin(), expect.end(), 0.0f);
      for (int k = 0; k < top_k; ++k) {
        expert_output(ids[size_t(t * top_k + k)], &x[size_t(t) * hidden], hidden, y.data());
        for (int h = 0; h < hidden; ++h) expect[size_t(h)] += y[size_t(h)];
      }
      for (int h = 0; h < hidden; ++h)
        if (combined[size_t(t) * hidden + size_t(h)] != expect[size_t(h)])
          throw std::runtime_error("combine differs at token " + std::to_string(t) + ", channel " + std::to_string(h));
    }
  });
}

// Under `deepinfer launch --nproc 2`: each process finds rank 0 through MASTER_ADDR / MASTER_PORT, gets the NCCL
// id over TCP and gathers every rank's value.
TEST(CommProcess, BootstrapAndAllGather) {
  if (!std::getenv("WORLD_SIZE")) GTEST_SKIP() << "run under deepinfer launch --nproc 2";
  const BootstrapConfig config = BootstrapConfig::from_env();
  const char* local = std::getenv("LOCAL_RANK");
  const int device = local ? std::atoi(local) : config.rank;
  ASSERT_LT(device, device_count()) << "LOCAL_RANK " << device << " but only " << device_count() << " GPUs";
  std::unique_ptr<Comm> comm = comm_from_bootstrap(config, device);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  std::vector<int32_t> mine(64, 100 + config.rank);
  DeviceArray<int32_t> send(mine), recv(mine.size() * size_t(config.world_size));
  comm->all_gather(send.ptr, recv.ptr, mine.size(), CommType::I32, s);
  comm->barrier(s);
  const std::vector<int32_t> got = recv.host();
  for (int r = 0; r < config.world_size; ++r)
    for (size_t i = 0; i < mine.size(); ++i) ASSERT_EQ(got[size_t(r) * mine.size() + i], 100 + r) << "rank " << r;
  cudaStreamDestroy(s);
  std::printf("rank %d of %d on device %d: all-gather over the TCP bootstrap ok\n", config.rank, config.world_size,
              device);
}

}  // namespace
}  // namespace deepinfer::parallel
