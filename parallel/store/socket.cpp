// POSIX TCP helpers: listen with a clear busy-port error, connect with retry and backoff,
// deadline-bounded whole-buffer send / receive built on poll(), and the SIGPIPE guard.
#include "parallel/store/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "parallel/store/store.h"
#include "tensor/error.h"

namespace minidl::dist::net {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

namespace {

struct AddrInfoList {
  addrinfo* head = nullptr;
  ~AddrInfoList() {
    if (head) ::freeaddrinfo(head);
  }
};

// getaddrinfo for host:port; returns the gai error code (0 on success).
int resolve(const std::string& host, int port, bool passive, AddrInfoList& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  const std::string service = std::to_string(port);
  return ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out.head);
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return int(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

}  // namespace

std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  AddrInfoList ai;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &ai.head) != 0) return "";
  Fd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid() || ::connect(fd.get(), ai.head->ai_addr, ai.head->ai_addrlen) != 0) return "";
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  char buf[INET_ADDRSTRLEN] = {};
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0 ||
      !::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)))
    return "";
  return buf;
}

Fd listen_tcp(const std::string& host, int port, int* bound_port) {
  MINIDL_CHECK(port >= 0 && port <= 65535, "store: port ", port, " is out of range [0, 65535]");
  AddrInfoList ai;
  int rc = resolve(host, port, true, ai);
  MINIDL_CHECK(rc == 0, "store: cannot resolve host '", host, "': ", ::gai_strerror(rc));
  int last_errno = 0;
  for (addrinfo* a = ai.head; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last_errno = errno;
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), 1024) != 0) {
      last_errno = errno;
      if (last_errno == EADDRINUSE) break;
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    *bound_port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                           : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    set_nonblocking(fd.get());
    return fd;
  }
  MINIDL_CHECK(last_errno != EADDRINUSE, "store: address ", host, ":", port,
               " already in use (another job or a leftover process holds it); choose another "
               "port, or port 0 for one the OS assigns");
  MINIDL_FAIL("store: cannot listen on ", host, ":", port, ": ", std::strerror(last_errno));
}

Fd connect_tcp(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  auto backoff = std::chrono::milliseconds(10);
  std::string last_error = "no attempt made";
  for (;;) {
    AddrInfoList ai;
    int rc = resolve(host, port, false, ai);
    if (rc != 0) last_error = std::string("cannot resolve host: ") + ::gai_strerror(rc);
    for (addrinfo* a = rc == 0 ? ai.head : nullptr; a; a = a->ai_next) {
      Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!fd.valid()) {
        last_error = std::strerror(errno);
        continue;
      }
      set_nonblocking(fd.get());
      int err = 0;
      if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
        err = errno;
        if (err == EINPROGRESS) {
          pollfd p{fd.get(), POLLOUT, 0};
          int n = ::poll(&p, 1, std::min(remaining_ms(deadline), 1000));
          socklen_t len = sizeof(err);
          if (n == 1)
            ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          else
            err = ETIMEDOUT;
        }
      }
      if (err == 0) {
        set_nodelay(fd.get());
        return fd;
      }
      last_error = std::strerror(err);
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  MINIDL_FAIL("could not reach store at ", host, ":", port, " within ", format_seconds(timeout),
              " (last error: ", last_error, ")");
}

IoResult send_all(int fd, const void* data, size_t n, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= size_t(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      int r = ::poll(&pf, 1, remaining_ms(deadline));
      if (r == 0) return IoResult::timeout;
      if (r < 0 && errno != EINTR) return IoResult::closed;
      continue;
    }
    return IoResult::closed;
  }
  return IoResult::ok;
}

IoResult recv_all(int fd, void* data, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    pollfd pf{fd, POLLIN, 0};
    int r = ::poll(&pf, 1, remaining_ms(deadline));
    if (r == 0) return IoResult::timeout;
    if (r < 0) {
      if (errno == EINTR) continue;
      return IoResult::closed;
    }
    ssize_t k = ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= size_t(k);
      continue;
    }
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    return IoResult::closed;  // 0: orderly shutdown; <0: reset
  }
  return IoResult::ok;
}

SigpipeBlocked::SigpipeBlocked() {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
}

SigpipeBlocked::~SigpipeBlocked() {
  if (!sigismember(&old_, SIGPIPE)) {
    const timespec now{};
    while (sigtimedwait(&pipe_, nullptr, &now) == SIGPIPE) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

}  // namespace minidl::dist::net
