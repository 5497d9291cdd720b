// Small POSIX TCP helpers for the store: an owning fd, listen / connect-with-retry, and
// send / receive of whole buffers bounded by a deadline (poll based, never blocking forever);
// a guard that starts threads with SIGPIPE blocked (for gloo's sockets).
#pragma once
#include <signal.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace minidl::dist::net {

using Clock = std::chrono::steady_clock;

// Owning file descriptor (closed on destruction, movable).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Binds and listens on host:port (port 0: the OS chooses) with SO_REUSEADDR. A busy port
// throws "address host:port already in use ..." at once. Returns the socket; *bound_port
// receives the actual port.
Fd listen_tcp(const std::string& host, int port, int* bound_port);

// Connects to host:port, retrying refused / unreachable attempts with backoff until
// `timeout`; then throws "could not reach store at host:port within 30 s (...)".
Fd connect_tcp(const std::string& host, int port, std::chrono::milliseconds timeout);

enum class IoResult { ok, timeout, closed };

// Sends / receives exactly n bytes before `deadline`. `closed` means the peer closed the
// connection or reset it.
IoResult send_all(int fd, const void* data, size_t n, Clock::time_point deadline);
IoResult recv_all(int fd, void* data, size_t n, Clock::time_point deadline);

// The local IPv4 address the kernel would use to reach host:port (a connected UDP socket sends
// nothing); "" when it cannot tell.
std::string local_address_towards(const std::string& host, int port);

void set_nonblocking(int fd);
void set_nodelay(int fd);

// Blocks SIGPIPE in the calling thread for its scope, so that threads started meanwhile inherit
// the block. For sockets written without MSG_NOSIGNAL (gloo's writev): a write to a peer that
// has gone then fails with EPIPE instead of killing the process (PyTorch's gloo runs under
// Python, which ignores SIGPIPE). The caller's mask is restored, and a SIGPIPE raised by its
// own writes meanwhile is discarded.
class SigpipeBlocked {
 public:
  SigpipeBlocked();
  ~SigpipeBlocked();
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_, old_;
};

}  // namespace minidl::dist::net
