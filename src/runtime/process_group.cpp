// The data-parallel process group over TCP (see process_group.h).
#include "runtime/process_group.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include <nlohmann/json.hpp>

#include "deepinfer/errors.h"

namespace deepinfer::runtime {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr uint32_t kMaxFrame = 64u << 20;  // a bound against a corrupt length, far above any request or event
constexpr size_t kRecordBytes = 14;

void put_u32(std::string& out, uint32_t v) {
  v = htonl(v);
  out.append(reinterpret_cast<const char*>(&v), 4);
}
void put_u64(std::string& out, uint64_t v) {
  put_u32(out, uint32_t(v >> 32));
  put_u32(out, uint32_t(v));
}
uint32_t get_u32(const char* in) {
  uint32_t v;
  std::memcpy(&v, in, 4);
  return ntohl(v);
}
uint64_t get_u64(const char* in) { return (uint64_t(get_u32(in)) << 32) | get_u32(in + 4); }

void put_record(std::string& out, const LockstepRecord& r) {
  put_u32(out, uint32_t(r.rows));
  out.push_back(char(r.in_flight));
  out.push_back(char(r.stop));
  put_u64(out, r.epoch);
}
LockstepRecord get_record(const char* in) {
  LockstepRecord r;
  r.rows = int32_t(get_u32(in));
  r.in_flight = in[4] != 0;
  r.stop = in[5] != 0;
  r.epoch = get_u64(in + 6);
  return r;
}

// Expert loads after the fixed records of a frame (EPLB statistics; nothing when empty): step u64, experts u32,
// count u32, then the counts as u64. Cost per step: layers x experts x 8 bytes each way per peer (V4-Flash: 88 KB).
void put_loads(std::string& out, const StepExpertLoads& l) {
  if (l.empty()) return;
  put_u64(out, l.step);
  put_u32(out, uint32_t(l.experts));
  put_u32(out, uint32_t(l.counts.size()));
  for (int64_t c : l.counts) put_u64(out, uint64_t(c));
}
StepExpertLoads get_loads(const char* in, size_t n, const std::string& what) {
  StepExpertLoads l;
  if (n == 0) return l;
  DI_CHECK(n >= 16, what + ": expert loads of " + std::to_string(n) + " bytes");
  l.step = get_u64(in);
  l.experts = int32_t(get_u32(in + 8));
  const size_t count = get_u32(in + 12);
  DI_CHECK(n == 16 + 8 * count && count > 0 && l.experts > 0 && count % size_t(l.experts) == 0,
           what + ": expert loads of " + std::to_string(n) + " bytes for " + std::to_string(count) + " counts of " +
               std::to_string(l.experts) + " experts");
  l.counts.resize(count);
  for (size_t i = 0; i < count; ++i) l.counts[i] = int64_t(get_u64(in + 16 + 8 * i));
  return l;
}

std::string rank_name(int r) { return "rank " + std::to_string(r); }

// A stopping step is the group's last: the connections close after it, and that is no failure.
bool any_stop(const std::vector<LockstepRecord>& records) {
  for (const LockstepRecord& r : records)
    if (r.stop) return true;
  return false;
}

}  // namespace

ProcessGroup::ProcessGroup(const parallel::BootstrapConfig& config, double exchange_timeout_s)
    : rank_(config.rank), world_(config.world_size), exchange_timeout_s_(exchange_timeout_s) {
  DI_CHECK(exchange_timeout_s > 0, "ProcessGroup: the exchange timeout must be positive");
  const std::vector<int> fds = parallel::bootstrap_connect(config);
  for (int fd : fds) {
    auto p = std::make_unique<Peer>();
    p->fd = fd;
    peers_.push_back(std::move(p));
  }
  arrived_.resize(size_t(world_));
}

ProcessGroup::~ProcessGroup() {
  close();
  for (auto& p : peers_)
    if (p->fd >= 0) ::close(p->fd);
}

void ProcessGroup::close() {
  {
    std::lock_guard<std::mutex> lk(mutex_);
    closing_ = true;
  }
  // shutdown() wakes a reader blocked in poll / recv (it then reads end of file), so the joins cannot hang.
  for (auto& p : peers_)
    if (p->fd >= 0) ::shutdown(p->fd, SHUT_RDWR);
  for (auto& p : peers_)
    if (p->reader.joinable()) p->reader.join();
  // The descriptors stay open (shut down) until the group goes: a concurrent send() fails on them instead of
  // writing to a reused descriptor.
}

std::vector<uint8_t> ProcessGroup::share_blob(std::span<const uint8_t> blob) {
  DI_CHECK(!on_message_ && !on_failure_, "ProcessGroup::share_blob: call it before start()");
  if (rank_ == 0) {
    broadcast(Message::Blob, std::string(blob.begin(), blob.end()));
    return {blob.begin(), blob.end()};
  }
  // The readers are not running yet: read rank 0's frame here, bounded by the exchange timeout.
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(exchange_timeout_s_ * 1000));
  const std::string what = rank_name(rank_) + " waiting for rank 0's blob";
  char header[8];
  parallel::recv_exact(peers_[0]->fd, header, sizeof header, deadline, what);
  const uint32_t n = get_u32(header + 4);
  DI_CHECK(Message(get_u32(header)) == Message::Blob && n <= kMaxFrame, what + ": another message came first");
  std::vector<uint8_t> got(n);
  if (n) parallel::recv_exact(peers_[0]->fd, got.data(), n, deadline, what);
  return got;
}

void ProcessGroup::start(Handler on_message, FailureHandler on_failure) {
  on_message_ = std::move(on_message);
  on_failure_ = std::move(on_failure);
  for (size_t r = 0; r < peers_.size(); ++r)
    if (peers_[r]->fd >= 0) peers_[r]->reader = std::thread([this, r] { read_loop(int(r)); });
}

void ProcessGroup::send(int to, Message type, const std::string& payload) {
  DI_CHECK(to >= 0 && to < int(peers_.size()) && peers_[size_t(to)]->fd >= 0,
           "ProcessGroup: " + rank_name(rank_) + " has no connection to " + rank_name(to));
  std::string frame;
  frame.reserve(8 + payload.size());
  put_u32(frame, uint32_t(type));
  put_u32(frame, uint32_t(payload.size()));
  frame += payload;
  Peer& p = *peers_[size_t(to)];
  std::lock_guard<std::mutex> lk(p.send_mutex);  // frames of several threads must not interleave
  // A peer that stops reading for this long is as good as dead (its socket buffer is full).
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(exchange_timeout_s_ * 1000));
  parallel::send_exact(p.fd, frame.data(), frame.size(), deadline,
                       rank_name(rank_) + " sending to " + rank_name(rank_ == 0 ? to : 0));
}

void ProcessGroup::broadcast(Message type, const std::string& payload) {
  for (int r = 1; r < int(peers_.size()); ++r) send(r, type, payload);
}

void ProcessGroup::read_loop(int peer) {
  const int from = rank_ == 0 ? peer : 0;
  const int fd = peers_[size_t(peer)]->fd;
  const std::string what = rank_name(rank_) + " reading from " + rank_name(from);
  try {
    for (;;) {
      // No deadline: an idle group sends nothing. A dead peer's kernel closes the connection (end of file here).
      char header[8];
      parallel::recv_exact(fd, header, sizeof header, Clock::time_point::max(), what);
      const auto type = Message(get_u32(header));
      const uint32_t n = get_u32(header + 4);
      DI_CHECK(n <= kMaxFrame, what + ": a frame of " + std::to_string(n) + " bytes (a corrupt stream?)");
      std::string payload(n, '\0');
      if (n) parallel::recv_exact(fd, payload.data(), n, Clock::time_point::max(), what);
      if (type == Message::Record && rank_ == 0) {
        DI_CHECK(n >= kRecordBytes, what + ": a record of " + std::to_string(n) + " bytes");
        LockstepRecord record = get_record(payload.data());
        record.loads = get_loads(payload.data() + kRecordBytes, n - kRecordBytes, what);
        std::lock_guard<std::mutex> lk(mutex_);
        DI_CHECK(!arrived_[size_t(from)], what + ": two records in one step");
        arrived_[size_t(from)] = std::move(record);
        cv_.notify_all();
      } else if (type == Message::Records && rank_ > 0) {
        const size_t fixed = kRecordBytes * size_t(world_);
        DI_CHECK(n >= fixed, what + ": the records of " + std::to_string(n) + " bytes");
        std::vector<LockstepRecord> records;
        for (int r = 0; r < world_; ++r) records.push_back(get_record(payload.data() + size_t(r) * kRecordBytes));
        // The group's summed loads come in rank 0's record (all_gather).
        records[0].loads = get_loads(payload.data() + fixed, n - fixed, what);
        std::lock_guard<std::mutex> lk(mutex_);
        // Rank 0 closes its connections right after a stopping step's records: its end of file is no failure then.
        if (any_stop(records)) closing_ = true;
        gathered_ = std::move(records);
        cv_.notify_all();
      } else {
        if (on_message_) on_message_(from, type, payload);
      }
    }
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lk(mutex_);
      if (closing_) return;  // the group stopped in order: the peer's end of file is expected
    }
    fail("data-parallel " + rank_name(from) + " is gone (" + e.what() +
         "): its process exited or was killed, or the network failed");
  }
}

void ProcessGroup::fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lk(mutex_);
    if (!failure_.empty() || closing_) return;
    failure_ = message;
    cv_.notify_all();
  }
  if (on_failure_) on_failure_(message);
}

std::string ProcessGroup::failure() const {
  std::lock_guard<std::mutex> lk(mutex_);
  return failure_;
}

std::vector<LockstepRecord> ProcessGroup::all_gather(int rank, const LockstepRecord& mine) {
  DI_CHECK(rank == rank_, "ProcessGroup: this process is " + rank_name(rank_) + ", not " + rank_name(rank));
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(exchange_timeout_s_ * 1000));
  auto wait = [&](std::unique_lock<std::mutex>& lk, auto ready, auto waiting_for) {
    if (!cv_.wait_until(lk, deadline, [&] { return !failure_.empty() || ready(); })) {
      const std::string message = "data-parallel " + rank_name(rank_) + ": no lockstep answer from " +
                                  waiting_for() + " within " + std::to_string(int(exchange_timeout_s_)) +
                                  " s (a hung process or a lost network)";
      lk.unlock();  // fail() takes the lock and calls the failure handler
      fail(message);
      lk.lock();
    }
    if (!failure_.empty()) throw Error(failure_);
  };
  std::vector<LockstepRecord> records;
  if (rank_ == 0) {
    {
      std::unique_lock<std::mutex> lk(mutex_);
      auto missing = [&] {
        std::string m;
        for (int r = 1; r < world_; ++r)
          if (!arrived_[size_t(r)]) m += (m.empty() ? "" : ", ") + rank_name(r);
        return m;
      };
      wait(lk, [&] { return missing().empty(); }, missing);
      records.push_back(mine);
      for (int r = 1; r < world_; ++r) {
        records.push_back(std::move(*arrived_[size_t(r)]));
        arrived_[size_t(r)].reset();
      }
      // Before the answer goes out: a peer may leave as soon as it reads a stopping step's records.
      if (any_stop(records)) closing_ = true;
    }
    // The expert loads go back summed, in rank 0's record (Lockstep::agree sums the records' loads, so the sum is
    // the same): one table per peer instead of one per rank.
    StepExpertLoads sum;
    try {
      for (LockstepRecord& r : records) {
        sum.add(r.loads);
        r.loads = {};
      }
    } catch (const std::exception& e) {
      fail(std::string("data-parallel rank 0: ") + e.what());
      throw Error(failure());
    }
    records[0].loads = std::move(sum);
    std::string payload;
    for (const LockstepRecord& r : records) put_record(payload, r);
    put_loads(payload, records[0].loads);
    try {
      broadcast(Message::Records, payload);
    } catch (const std::exception& e) {
      fail(std::string("data-parallel rank 0: ") + e.what());
      throw Error(failure());
    }
  } else {
    std::string payload;
    put_record(payload, mine);
    put_loads(payload, mine.loads);
    try {
      send(0, Message::Record, payload);
    } catch (const std::exception& e) {
      fail("data-parallel rank 0 is gone (" + std::string(e.what()) + ")");
      throw Error(failure());
    }
    std::unique_lock<std::mutex> lk(mutex_);
    wait(lk, [&] { return gathered_.has_value(); }, [] { return std::string("rank 0"); });
    records = std::move(*gathered_);
    gathered_.reset();
  }
  return records;
}

// ---------------------------------------------------------------------------------------------------------
// Wire formats (JSON: a request or event per message; floats survive the round trip exactly, as nlohmann writes
// the shortest text that reads back to the same double, and a float converts to a double and back exactly)

std::string encode_request(uint64_t id, const Request& r) {
  const SamplingParams& p = r.params;
  const StructuredOutput& so = p.structured;
  json j = {{"id", id},
            {"prompt_token_ids", r.prompt_token_ids},
            {"prompt", r.prompt},
            {"temperature", p.temperature},
            {"top_p", p.top_p},
            {"top_k", p.top_k},
            {"min_p", p.min_p},
            {"repetition_penalty", p.repetition_penalty},
            {"presence_penalty", p.presence_penalty},
            {"frequency_penalty", p.frequency_penalty},
            {"max_tokens", p.max_tokens},
            {"stop_token_ids", p.stop_token_ids},
            {"stop", p.stop},
            {"ignore_eos", p.ignore_eos},
            {"logprobs", p.logprobs},
            {"seed", p.seed ? json(*p.seed) : json(nullptr)},
            {"structured",
             {{"json_schema", so.json_schema},
              {"regex", so.regex},
              {"ebnf", so.ebnf},
              {"json_object", so.json_object},
              {"tools", so.tools},
              {"tool_choice", so.tool_choice},
              {"tool_block_in_prompt", so.tool_block_in_prompt},
              {"dsml_version", so.dsml_version},
              {"any_whitespace", so.any_whitespace},
              {"after_think", so.after_think}}}};
  // Invalid UTF-8 in a prompt or stop string is the engine's to reject, not the wire's: replace, don't throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Request decode_request(const std::string& payload, uint64_t& id) {
  const json j = json::parse(payload);
  Request r;
  SamplingParams& p = r.params;
  StructuredOutput& so = p.structured;
  id = j.at("id").get<uint64_t>();
  j.at("prompt_token_ids").get_to(r.prompt_token_ids);
  j.at("prompt").get_to(r.prompt);
  j.at("temperature").get_to(p.temperature);
  j.at("top_p").get_to(p.top_p);
  j.at("top_k").get_to(p.top_k);
  j.at("min_p").get_to(p.min_p);
  j.at("repetition_penalty").get_to(p.repetition_penalty);
  j.at("presence_penalty").get_to(p.presence_penalty);
  j.at("frequency_penalty").get_to(p.frequency_penalty);
  j.at("max_tokens").get_to(p.max_tokens);
  j.at("stop_token_ids").get_to(p.stop_token_ids);
  j.at("stop").get_to(p.stop);
  j.at("ignore_eos").get_to(p.ignore_eos);
  j.at("logprobs").get_to(p.logprobs);
  if (!j.at("seed").is_null()) p.seed = j.at("seed").get<uint64_t>();
  const json& s = j.at("structured");
  s.at("json_schema").get_to(so.json_schema);
  s.at("regex").get_to(so.regex);
  s.at("ebnf").get_to(so.ebnf);
  s.at("json_object").get_to(so.json_object);
  s.at("tools").get_to(so.tools);
  s.at("tool_choice").get_to(so.tool_choice);
  s.at("tool_block_in_prompt").get_to(so.tool_block_in_prompt);
  s.at("dsml_version").get_to(so.dsml_version);
  s.at("any_whitespace").get_to(so.any_whitespace);
  s.at("after_think").get_to(so.after_think);
  return r;
}

std::string encode_event(const Event& e) {
  json lps = json::array();
  for (const TokenLogprob& lp : e.logprobs) {
    json top = json::array();
    for (const auto& t : lp.top) top.push_back({t.token_id, t.logprob});
    lps.push_back({{"t", lp.token_id}, {"l", lp.logprob}, {"top", top}});
  }
  json j = {{"kind", int(e.kind)},       {"id", e.request_id},         {"tokens", e.token_ids},
            {"text", e.text_delta},      {"logprobs", lps},            {"reason", int(e.reason)},
            {"message", e.message}};
  // The text deltas are complete UTF-8 (the decoder holds partial characters back); replace rather than throw anyway.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Event decode_event(const std::string& payload) {
  const json j = json::parse(payload);
  Event e;
  e.kind = Event::Kind(j.at("kind").get<int>());
  e.request_id = j.at("id").get<uint64_t>();
  j.at("tokens").get_to(e.token_ids);
  j.at("text").get_to(e.text_delta);
  for (const json& lp : j.at("logprobs")) {
    TokenLogprob t;
    t.token_id = lp.at("t").get<int32_t>();
    t.logprob = lp.at("l").get<float>();
    for (const json& top : lp.at("top")) {
      decltype(t.top)::value_type x;
      x.token_id = top.at(0).get<int32_t>();
      x.logprob = top.at(1).get<float>();
      t.top.push_back(x);
    }
    e.logprobs.push_back(std::move(t));
  }
  e.reason = FinishReason(j.at("reason").get<int>());
  j.at("message").get_to(e.message);
  return e;
}

}  // namespace deepinfer::runtime
