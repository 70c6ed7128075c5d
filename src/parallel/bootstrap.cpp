#include "parallel/bootstrap.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace deepinfer::parallel {

namespace {

using Clock = std::chrono::steady_clock;

// Hello of a connecting rank: magic, protocol version, rank, world size (network byte order).
constexpr uint32_t kMagic = 0x44494253;  // "DIBS"
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxBlob = uint64_t(1) << 20;

std::string errno_text() { return std::strerror(errno); }

int remaining_ms(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;  // poll: no timeout
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::max<int64_t>(left, 0));
}

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() { reset(); }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int fd() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// Waits until fd is readable / writable or the deadline passes.
void wait_fd(int fd, short events, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r > 0) return;
    if (r == 0) throw Error("bootstrap: " + what + " timed out");
    if (errno != EINTR) throw Error("bootstrap: poll during " + what + " failed: " + errno_text());
  }
}

void send_all(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    wait_fd(fd, POLLOUT, deadline, what);
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) throw Error("bootstrap: " + what + " failed: " + errno_text());
    p += k;
    n -= size_t(k);
  }
}

void recv_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    wait_fd(fd, POLLIN, deadline, what);
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k == 0) throw Error("bootstrap: " + what + ": the peer closed the connection");
    if (k < 0) throw Error("bootstrap: " + what + " failed: " + errno_text());
    p += k;
    n -= size_t(k);
  }
}

void put_u32(uint8_t* out, uint32_t v) {
  v = htonl(v);
  std::memcpy(out, &v, 4);
}
uint32_t get_u32(const uint8_t* in) {
  uint32_t v;
  std::memcpy(&v, in, 4);
  return ntohl(v);
}

int env_int(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    DI_CHECK(fallback != nullptr, std::string("bootstrap: environment variable ") + name + " is not set");
    v = fallback;
  }
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  DI_CHECK(errno == 0 && end && *end == '\0' && x >= 0 && x <= 1 << 30,
           std::string("bootstrap: environment variable ") + name + "='" + v + "' is not a non-negative integer");
  return int(x);
}

void check_config(const BootstrapConfig& c) {
  DI_CHECK(c.world_size > 0, "bootstrap: world size must be positive, got " + std::to_string(c.world_size));
  DI_CHECK(c.rank >= 0 && c.rank < c.world_size, "bootstrap: rank " + std::to_string(c.rank) + " outside [0, " +
                                                      std::to_string(c.world_size) + ")");
  DI_CHECK(c.master_port >= 0 && c.master_port < 65536,
           "bootstrap: port " + std::to_string(c.master_port) + " outside [0, 65535]");
  DI_CHECK(c.timeout_s > 0, "bootstrap: the timeout must be positive");
}

}  // namespace

BootstrapConfig BootstrapConfig::from_env() {
  BootstrapConfig c;
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) c.master_addr = a;
  c.master_port = env_int("MASTER_PORT", "29500");
  c.world_size = env_int("WORLD_SIZE", nullptr);
  c.rank = env_int("RANK", nullptr);
  check_config(c);
  return c;
}

BootstrapServer::BootstrapServer(int port, int world_size, double timeout_s)
    : world_size_(world_size), timeout_s_(timeout_s) {
  DI_CHECK(world_size > 0 && port >= 0 && port < 65536 && timeout_s > 0,
           "bootstrap: server needs a positive world size and timeout and a port in [0, 65535]");
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.fd() < 0) throw Error("bootstrap: socket() failed: " + errno_text());
  const int one = 1;
  ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(uint16_t(port));
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw Error("bootstrap: rank 0 cannot listen on port " + std::to_string(port) + ": " + errno_text() +
                " (MASTER_PORT)");
  if (::listen(s.fd(), 128) != 0) throw Error("bootstrap: listen() failed: " + errno_text());
  socklen_t len = sizeof addr;
  ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  fd_ = s.release();
}

BootstrapServer::~BootstrapServer() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<int> BootstrapServer::accept_ranks() {
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(timeout_s_ * 1000));
  std::vector<Socket> peers(static_cast<size_t>(world_size_));
  for (int joined = 1; joined < world_size_;) {
    wait_fd(fd_, POLLIN, deadline,
            "rank 0 waiting for " + std::to_string(world_size_ - joined) + " of " + std::to_string(world_size_ - 1) +
                " ranks on port " + std::to_string(port_));
    Socket peer(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (peer.fd() < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      throw Error("bootstrap: accept() failed: " + errno_text());
    }
    uint8_t hello[16];
    recv_all(peer.fd(), hello, sizeof hello, deadline, "rank 0 reading a hello");
    const uint32_t rank = get_u32(hello + 8), world = get_u32(hello + 12);
    // A stranger on the port (a stale process, a scanner) is dropped, not fatal.
    if (get_u32(hello) != kMagic || get_u32(hello + 4) != kVersion) continue;
    DI_CHECK(int(world) == world_size_, "bootstrap: rank " + std::to_string(rank) + " says the world has " +
                                            std::to_string(world) + " ranks, rank 0 has " +
                                            std::to_string(world_size_));
    DI_CHECK(rank >= 1 && int(rank) < world_size_, "bootstrap: a peer claims rank " + std::to_string(rank) +
                                                       " outside [1, " + std::to_string(world_size_) + ")");
    DI_CHECK(peers[rank].fd() < 0, "bootstrap: rank " + std::to_string(rank) + " connected twice");
    const int one = 1;
    ::setsockopt(peer.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    peers[rank] = std::move(peer);
    ++joined;
  }
  std::vector<int> fds(peers.size(), -1);
  for (size_t r = 1; r < peers.size(); ++r) fds[r] = peers[r].release();
  return fds;
}

void BootstrapServer::serve(std::span<const uint8_t> blob) {
  DI_CHECK(blob.size() <= kMaxBlob, "bootstrap: a blob of " + std::to_string(blob.size()) + " bytes is too large");
  std::vector<Socket> peers;
  for (int fd : accept_ranks()) peers.emplace_back(fd);
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(timeout_s_ * 1000));
  uint8_t header[8];
  const uint64_t n = blob.size();
  put_u32(header, uint32_t(n >> 32));
  put_u32(header + 4, uint32_t(n));
  for (int r = 1; r < world_size_; ++r) {
    const std::string what = "rank 0 sending to rank " + std::to_string(r);
    send_all(peers[size_t(r)].fd(), header, sizeof header, deadline, what);
    send_all(peers[size_t(r)].fd(), blob.data(), blob.size(), deadline, what);
  }
}

namespace {

// A rank > 0's connection to rank 0, its hello sent.
Socket connect_to_rank0(const BootstrapConfig& c, Clock::time_point deadline) {
  check_config(c);
  DI_CHECK(c.rank > 0, "bootstrap: rank 0 listens, it does not connect");
  const std::string where = c.master_addr + ":" + std::to_string(c.master_port);
  const std::string who = "rank " + std::to_string(c.rank) + " of " + std::to_string(c.world_size);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int gai = ::getaddrinfo(c.master_addr.c_str(), std::to_string(c.master_port).c_str(), &hints, &found);
  if (gai != 0)
    throw Error("bootstrap: " + who + " cannot resolve MASTER_ADDR '" + c.master_addr + "': " + gai_strerror(gai));
  Socket s;
  std::string last_error;
  for (;;) {
    s = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (s.fd() < 0) {
      ::freeaddrinfo(found);
      throw Error("bootstrap: socket() failed: " + errno_text());
    }
    if (::connect(s.fd(), found->ai_addr, found->ai_addrlen) == 0) break;
    last_error = errno_text();
    if (Clock::now() >= deadline) {
      ::freeaddrinfo(found);
      throw Error("bootstrap: " + who + " could not connect to rank 0 at " + where + " within " +
                  std::to_string(int(c.timeout_s)) + " s (" + last_error + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0 may not listen yet
  }
  ::freeaddrinfo(found);
  const int one = 1;
  ::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  uint8_t hello[16];
  put_u32(hello, kMagic);
  put_u32(hello + 4, kVersion);
  put_u32(hello + 8, uint32_t(c.rank));
  put_u32(hello + 12, uint32_t(c.world_size));
  send_all(s.fd(), hello, sizeof hello, deadline, who + " sending its hello to " + where);
  return s;
}

}  // namespace

std::vector<uint8_t> bootstrap_receive(const BootstrapConfig& c) {
  check_config(c);
  DI_CHECK(c.rank > 0, "bootstrap: rank 0 serves the blob, it does not receive one");
  const std::string where = c.master_addr + ":" + std::to_string(c.master_port);
  const std::string who = "rank " + std::to_string(c.rank) + " of " + std::to_string(c.world_size);
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(c.timeout_s * 1000));
  Socket s = connect_to_rank0(c, deadline);
  uint8_t header[8];
  recv_all(s.fd(), header, sizeof header, deadline, who + " waiting for the blob from " + where);
  const uint64_t n = (uint64_t(get_u32(header)) << 32) | get_u32(header + 4);
  DI_CHECK(n <= kMaxBlob, "bootstrap: rank 0 announced a blob of " + std::to_string(n) + " bytes");
  std::vector<uint8_t> blob(n);
  recv_all(s.fd(), blob.data(), blob.size(), deadline, who + " reading the blob from " + where);
  return blob;
}

std::vector<int> bootstrap_connect(const BootstrapConfig& c) {
  check_config(c);
  if (c.rank == 0) {
    if (c.world_size == 1) return {-1};
    BootstrapServer server(c.master_port, c.world_size, c.timeout_s);
    return server.accept_ranks();
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(c.timeout_s * 1000));
  return {connect_to_rank0(c, deadline).release()};
}

void send_exact(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  send_all(fd, data, n, deadline, what);
}

void recv_exact(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  recv_all(fd, data, n, deadline, what);
}

std::vector<uint8_t> bootstrap_share(const BootstrapConfig& c, std::span<const uint8_t> blob) {
  check_config(c);
  if (c.rank > 0) return bootstrap_receive(c);
  if (c.world_size > 1) {
    BootstrapServer server(c.master_port, c.world_size, c.timeout_s);
    server.serve(blob);
  }
  return {blob.begin(), blob.end()};
}

}  // namespace deepinfer::parallel
