// TCP bootstrap of a multi-process group (issue 7): rank 0 listens, every other rank connects and receives one
// blob from it (the NCCL unique id, src/parallel/comm.h). The address and port come from flags or from the
// environment that `deepinfer launch` (or torchrun, or a job scheduler) sets: MASTER_ADDR, MASTER_PORT,
// WORLD_SIZE, RANK. Nothing here needs CUDA, so the CPU tests run it.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace deepinfer::parallel {

struct BootstrapConfig {
  std::string master_addr = "127.0.0.1";  // rank 0's host (name or address), as the other ranks reach it
  int master_port = 29500;
  int world_size = 1;
  int rank = 0;
  double timeout_s = 120;  // how long rank 0 waits for the others and the others retry their connection

  // MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK (the first two default to 127.0.0.1:29500, the others are
  // required); a malformed or missing value is an error naming the variable.
  static BootstrapConfig from_env();
};

// Rank 0's listening socket, bound to every interface (other machines connect to MASTER_ADDR). Port 0 takes a
// free port (tests); port() says which.
class BootstrapServer {
 public:
  BootstrapServer(int port, int world_size, double timeout_s);
  ~BootstrapServer();
  BootstrapServer(const BootstrapServer&) = delete;
  BootstrapServer& operator=(const BootstrapServer&) = delete;

  int port() const { return port_; }
  // Waits for ranks 1 .. world_size - 1 (each exactly once, any order) and sends each the blob.
  void serve(std::span<const uint8_t> blob);
  // Waits for ranks 1 .. world_size - 1 like serve() and keeps their connections: element r is rank r's
  // connected socket (element 0 is -1). The caller owns (closes) them.
  std::vector<int> accept_ranks();

 private:
  int fd_ = -1;
  int port_ = 0;
  int world_size_;
  double timeout_s_;
};

// A rank > 0: connects to rank 0 (retrying until the timeout, since rank 0 may start later) and returns its blob.
std::vector<uint8_t> bootstrap_receive(const BootstrapConfig& config);

// The long-lived connections of a group (the data-parallel process group, src/runtime/process_group.h): rank 0
// listens on master_port and gets one connected socket per other rank (element r for rank r, element 0 is -1);
// every other rank connects (retrying until the timeout) and gets one element, its socket to rank 0. The caller
// owns (closes) the sockets. TCP_NODELAY is set on every one (small frames, one per lockstep step).
std::vector<int> bootstrap_connect(const BootstrapConfig& config);

// Exactly n bytes on a connected socket, or deepinfer::Error naming `what`: the peer closed the connection, a
// socket error, or the deadline passed (Clock::time_point::max(): no deadline).
void send_exact(int fd, const void* data, size_t n, std::chrono::steady_clock::time_point deadline,
                const std::string& what);
void recv_exact(int fd, void* data, size_t n, std::chrono::steady_clock::time_point deadline,
                const std::string& what);

// Both sides in one call: rank 0 serves `blob` and returns it; every other rank returns what rank 0 served.
std::vector<uint8_t> bootstrap_share(const BootstrapConfig& config, std::span<const uint8_t> blob);

}  // namespace deepinfer::parallel
