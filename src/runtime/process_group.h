// The ranks of a data-parallel group as processes (`deepinfer launch --nproc N -- deepinfer generate
// --data-parallel N`, issue 7; docs/data_parallel.md "Ranks as processes"). A star over TCP: every rank > 0 keeps
// one connection to rank 0 (parallel::bootstrap_connect, MASTER_ADDR / MASTER_PORT / WORLD_SIZE / RANK). Over it
// go framed messages: the lockstep records (the all-gather behind Lockstep::exchange: each rank sends its record to
// rank 0, rank 0 sends every record back), and the engine's traffic (rank 0 forwards requests and cancellations and
// wakes idle ranks; a rank streams its requests' events back). One reader thread per connection; a connection that
// closes outside an orderly stop is a failure that every waiter sees at once (no hang on a dead peer).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "parallel/bootstrap.h"
#include "runtime/data_parallel.h"

namespace deepinfer::runtime {

class ProcessGroup : public LockstepTransport {
 public:
  enum class Message : uint32_t {
    Record = 1,   // rank r -> 0: its LockstepRecord (with its expert loads, when it counts them)
    Records = 2,  // 0 -> r: every rank's record of the step (and the sum of their expert loads)
    Submit = 3,   // 0 -> r: a request and its id (JSON)
    Cancel = 4,   // 0 -> r: a request id
    Event = 5,    // r -> 0: an event of one of its requests (JSON)
    Wake = 6,     // 0 -> r: rank 0's work epoch (after the work it announces)
    Blob = 7,     // 0 -> r, before the readers start: share_blob
  };
  // The engine's messages (not Record / Records), on the connection's reader thread, in arrival order.
  using Handler = std::function<void(int from, Message type, const std::string& payload)>;
  using FailureHandler = std::function<void(const std::string& message)>;

  // Connects the group (rank 0 waits for every other rank, the others connect; config.timeout_s bounds that).
  // `exchange_timeout_s` bounds each all-gather: a peer that neither answers nor closes its connection within it
  // (a hung process, a lost network) fails the group. It must cover a step and, at the first exchange, a model load.
  ProcessGroup(const parallel::BootstrapConfig& config, double exchange_timeout_s);
  ~ProcessGroup() override;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }

  // Before start(): rank 0's `blob` to every rank (rank 0 passes its blob, the others an empty one; all get rank
  // 0's). The NCCL unique id of a GPU group goes this way (RankModelLoader's ShareBlob).
  std::vector<uint8_t> share_blob(std::span<const uint8_t> blob);
  // Starts the readers; the handlers must outlive the group (or until the destructor has joined the readers).
  void start(Handler on_message, FailureHandler on_failure);
  // Sends one frame to `to` (rank 0: any peer; a peer: rank 0 only). Thread-safe. Throws deepinfer::Error when the
  // connection is gone.
  void send(int to, Message type, const std::string& payload);
  // Rank 0: the same frame to every peer.
  void broadcast(Message type, const std::string& payload);

  std::vector<LockstepRecord> all_gather(int rank, const LockstepRecord& mine) override;

  // Ends the group's connections (idempotent; the destructor calls it): no reader runs after it, and a send throws.
  // A closed connection is then no failure.
  void close();

  // The failure so far (empty: none).
  std::string failure() const;

 private:
  struct Peer {
    int fd = -1;
    std::mutex send_mutex;
    std::thread reader;
  };
  void read_loop(int peer);
  void fail(const std::string& message);

  const int rank_;
  const int world_;
  const double exchange_timeout_s_;
  std::vector<std::unique_ptr<Peer>> peers_;  // rank 0: element r for rank r; a peer: element 0 (rank 0)
  Handler on_message_;
  FailureHandler on_failure_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::optional<LockstepRecord>> arrived_;  // rank 0: this step's records from the peers
  std::optional<std::vector<LockstepRecord>> gathered_;  // a peer: rank 0's answer
  bool closing_ = false;  // an exchange stopped the group or the destructor runs: a closed connection is expected
  std::string failure_;
};

// Request / Event / LockstepRecord on the wire (exposed for tests).
std::string encode_request(uint64_t id, const Request& request);
Request decode_request(const std::string& payload, uint64_t& id);
std::string encode_event(const Event& event);
Event decode_event(const std::string& payload);

}  // namespace deepinfer::runtime
