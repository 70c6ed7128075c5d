#include "parallel/comm.h"

#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <tuple>
#include <vector>
#include <string>

#include "core/error.h"

namespace deepinfer::parallel {

static_assert(sizeof(ncclUniqueId) == std::tuple_size_v<CommId>, "CommId must hold an ncclUniqueId");

namespace {

ncclDataType_t nccl_type(CommType t) {
  switch (t) {
    case CommType::U8: return ncclUint8;
    case CommType::I32: return ncclInt32;
    case CommType::I64: return ncclInt64;
    case CommType::F32: return ncclFloat32;
    case CommType::BF16: return ncclBfloat16;
  }
  throw Error("nccl: unknown CommType");
}

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw Error(std::string("nccl: ") + call + ": CUDA error " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                ")");
}

}  // namespace

size_t comm_type_bytes(CommType t) {
  switch (t) {
    case CommType::U8: return 1;
    case CommType::BF16: return 2;
    case CommType::I32:
    case CommType::F32: return 4;
    case CommType::I64: return 8;
  }
  throw Error("nccl: unknown CommType");
}

int nccl_version() {
  int v = 0;
  const ncclResult_t r = ncclGetVersion(&v);
  if (r != ncclSuccess) throw Error(std::string("nccl: ncclGetVersion: ") + ncclGetErrorString(r));
  return v;
}

CommId Comm::unique_id() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) throw Error(std::string("nccl: ncclGetUniqueId: ") + ncclGetErrorString(r));
  CommId out;
  std::memcpy(out.data(), &id, sizeof id);
  return out;
}

void Comm::check(int result, const char* call) const {
  const auto r = static_cast<ncclResult_t>(result);
  if (r == ncclSuccess) return;
  const char* last = comm_ ? ncclGetLastError(comm_) : ncclGetLastError(nullptr);
  throw Error(std::string("nccl: ") + call + " (rank " + std::to_string(rank_) + " of " + std::to_string(world_size_) +
              ", device " + std::to_string(device_) + "): " + ncclGetErrorString(r) +
              (last && *last ? std::string(": ") + last : std::string()));
}

Comm::Comm(const CommId& id, int rank, int world_size, int device)
    : rank_(rank), world_size_(world_size), device_(device) {
  DI_CHECK(world_size > 0 && rank >= 0 && rank < world_size,
           "nccl: rank " + std::to_string(rank) + " outside [0, " + std::to_string(world_size) + ")");
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  DI_CHECK(device >= 0 && device < devices, "nccl: rank " + std::to_string(rank) + " asks for CUDA device " +
                                                std::to_string(device) + " but this process sees " +
                                                std::to_string(devices));
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  // Connections at init, not at a collective's first use: NCCL (>= 2.22) connects peers lazily by default, and a
  // first collective inside a CUDA graph capture (the EP model's decode graphs) then fails to set up its peer
  // buffers ("operation not permitted when stream is capturing", H200 run 21). Set once per process, before the
  // first init reads it; an explicit NCCL_RUNTIME_CONNECT in the environment wins.
  static std::once_flag eager_connect;
  std::call_once(eager_connect, [] { setenv("NCCL_RUNTIME_CONNECT", "0", 0); });
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), sizeof nid);
  ncclComm_t comm = nullptr;
  check(ncclCommInitRank(&comm, world_size, nid, rank), "ncclCommInitRank");
  comm_ = comm;
  check_cuda(cudaMalloc(&barrier_word_, sizeof(int32_t)), "cudaMalloc (barrier word)");
  check_cuda(cudaMemset(barrier_word_, 0, sizeof(int32_t)), "cudaMemset (barrier word)");
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (barrier word)");  // before any non-blocking stream reads it
}

Comm::~Comm() {
  if (barrier_word_) cudaFree(barrier_word_);
  if (comm_) ncclCommDestroy(comm_);
}

void Comm::all_gather(const void* send, void* recv, size_t count, CommType type, cudaStream_t stream) {
  check(ncclAllGather(send, recv, count, nccl_type(type), comm_, stream), "ncclAllGather");
}

void Comm::all_reduce_sum(const void* send, void* recv, size_t count, CommType type, cudaStream_t stream) {
  check(ncclAllReduce(send, recv, count, nccl_type(type), ncclSum, comm_, stream), "ncclAllReduce");
}

void Comm::reduce_scatter_sum(const void* send, void* recv, size_t recv_count, CommType type, cudaStream_t stream) {
  check(ncclReduceScatter(send, recv, recv_count, nccl_type(type), ncclSum, comm_, stream), "ncclReduceScatter");
}

void Comm::broadcast(void* buffer, size_t count, CommType type, int root, cudaStream_t stream) {
  DI_CHECK(root >= 0 && root < world_size_, "nccl: broadcast root " + std::to_string(root) + " outside [0, " +
                                                std::to_string(world_size_) + ")");
  check(ncclBroadcast(buffer, buffer, count, nccl_type(type), root, comm_, stream), "ncclBroadcast");
}

void Comm::all_to_all_v(const void* send, std::span<const size_t> send_counts, std::span<const size_t> send_offsets,
                        void* recv, std::span<const size_t> recv_counts, std::span<const size_t> recv_offsets,
                        CommType type, cudaStream_t stream) {
  const size_t n = size_t(world_size_);
  DI_CHECK(send_counts.size() == n && send_offsets.size() == n && recv_counts.size() == n && recv_offsets.size() == n,
           "nccl: all_to_all_v needs " + std::to_string(n) + " counts and offsets per direction");
  const size_t elem = comm_type_bytes(type);
  const ncclDataType_t t = nccl_type(type);
  check(ncclGroupStart(), "ncclGroupStart (all_to_all_v)");
  // Inside a group NCCL only queues the calls; errors surface at ncclGroupEnd, which must run even after one.
  int first_error = ncclSuccess;
  const char* failed = nullptr;
  for (size_t r = 0; r < n && first_error == ncclSuccess; ++r) {
    if (send_counts[r] > 0) {
      first_error = ncclSend(static_cast<const uint8_t*>(send) + send_offsets[r] * elem, send_counts[r], t, int(r),
                             comm_, stream);
      failed = "ncclSend (all_to_all_v)";
    }
    if (first_error == ncclSuccess && recv_counts[r] > 0) {
      first_error = ncclRecv(static_cast<uint8_t*>(recv) + recv_offsets[r] * elem, recv_counts[r], t, int(r), comm_,
                             stream);
      failed = "ncclRecv (all_to_all_v)";
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  check(first_error, failed ? failed : "ncclSend (all_to_all_v)");
  check(end, "ncclGroupEnd (all_to_all_v)");
}

void Comm::barrier(cudaStream_t stream) {
  check(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_, stream), "ncclAllReduce (barrier)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (barrier)");
  ncclResult_t async = ncclSuccess;
  check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
  check(async, "asynchronous NCCL error (barrier)");
}

std::unique_ptr<Comm> comm_from_bootstrap(const BootstrapConfig& config, int device) {
  CommId id{};
  if (config.rank == 0) id = Comm::unique_id();
  const std::vector<uint8_t> shared = bootstrap_share(config, id);
  DI_CHECK(shared.size() == id.size(), "nccl: the bootstrap carried " + std::to_string(shared.size()) +
                                           " bytes, an NCCL unique id has " + std::to_string(id.size()));
  std::memcpy(id.data(), shared.data(), id.size());
  return std::make_unique<Comm>(id, config.rank, config.world_size, device);
}

}  // namespace deepinfer::parallel
