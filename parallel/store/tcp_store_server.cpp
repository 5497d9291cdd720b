// TCP store server: one poll() loop over the listening socket, a wake-up pipe and all
// clients. Frames are size-checked before buffering; a malformed request drops only the
// client that sent it. Blocking get / wait park a waiter that set / add / compare_set wake.
#include "parallel/store/tcp_store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

#include "parallel/store/protocol.h"
#include "tensor/error.h"

namespace minidl::dist::detail {

using namespace proto;

TcpStoreServer::TcpStoreServer(const std::string& host, int port) {
  listen_ = net::listen_tcp(host, port, &port_);
  int p[2];
  MINIDL_CHECK(::pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0, "store: pipe2 failed");
  wake_read_.reset(p[0]);
  wake_write_.reset(p[1]);
  thread_ = std::thread([this] { loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  char c = 1;
  [[maybe_unused]] ssize_t k = ::write(wake_write_.get(), &c, 1);
  if (thread_.joinable()) thread_.join();
  clients_.clear();  // closes the sockets: connected clients see the server go away
}

void TcpStoreServer::loop() {
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake_read_.get(), POLLIN, 0});
    fds.push_back({listen_.get(), POLLIN, 0});
    for (auto& [fd, c] : clients_)
      fds.push_back({fd, short(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    int timeout_ms = -1;
    const auto now = net::Clock::now();
    for (const Waiter& w : waiters_) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(w.deadline - now).count();
      int ms = int(std::clamp<int64_t>(left, 0, 1 << 30));
      timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
    }
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) return;
    if (fds[0].revents) return;  // shutdown
    if (fds[1].revents & POLLIN) accept_clients();
    for (size_t i = 2; i < fds.size(); ++i) {
      auto it = clients_.find(fds[i].fd);
      if (it == clients_.end() || fds[i].revents == 0) continue;
      Client& c = it->second;
      bool alive = true;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) alive = read_client(c);
      if (alive && !c.out.empty()) {
        ssize_t k = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (k > 0)
          c.out.erase(c.out.begin(), c.out.begin() + k);
        else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
          alive = false;
      }
      if (!alive) drop(fds[i].fd);
    }
    expire(net::Clock::now());
  }
}

void TcpStoreServer::accept_clients() {
  for (;;) {
    int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN (no more) or a transient error: poll again later
    net::set_nodelay(fd);
    clients_[fd].fd.reset(fd);
  }
}

bool TcpStoreServer::read_client(Client& c) {
  uint8_t buf[65536];
  ssize_t k = ::recv(c.fd.get(), buf, sizeof(buf), 0);
  if (k == 0) return false;
  if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  c.in.insert(c.in.end(), buf, buf + k);
  size_t pos = 0;
  for (;;) {
    const int64_t len = store_frame_length(c.in.data() + pos, c.in.size() - pos);
    if (len < 0) return false;  // garbage: drop this client only
    if (len == 0) break;
    if (!handle_frame(c, c.in.data() + pos + 4, size_t(len))) return false;
    pos += 4 + size_t(len);
  }
  c.in.erase(c.in.begin(), c.in.begin() + ptrdiff_t(pos));
  return true;
}

namespace {

std::string format_int(int64_t v) {
  return std::to_string(v);
}

bool parse_int(const Bytes& b, int64_t* out) {
  const char* first = reinterpret_cast<const char*>(b.data());
  auto [ptr, ec] = std::from_chars(first, first + b.size(), *out);
  return ec == std::errc() && ptr == first + b.size();
}

void append(Bytes& out, Writer& w) {
  Bytes f = w.finish();
  out.insert(out.end(), f.begin(), f.end());
}

}  // namespace

int64_t store_frame_length(const uint8_t* p, size_t n) {
  if (n < 4) return 0;
  const uint32_t len = read_u32(p);
  if (len == 0 || len > kMaxFrame) return -1;
  return n - 4 < len ? 0 : int64_t(len);
}

std::optional<StoreRequest> parse_store_request(const uint8_t* p, size_t n) {
  Reader r{p, p + n};
  StoreRequest q;
  q.cmd = r.u8();
  switch (q.cmd) {
    case kSet:
      q.keys.push_back(r.str());
      q.value = r.blob();
      break;
    case kAdd:
      q.keys.push_back(r.str());
      q.delta = r.i64();
      break;
    case kCompareSet:
      q.keys.push_back(r.str());
      q.expected = r.blob();
      q.value = r.blob();
      break;
    case kGet:
    case kWait: {
      uint32_t count = q.cmd == kGet ? 1 : r.u32();
      if (count > kMaxFrame / 4) return std::nullopt;
      for (uint32_t i = 0; i < count && r.ok; ++i) q.keys.push_back(r.str());
      q.timeout_ms = r.i64();
      if (q.timeout_ms < 0) return std::nullopt;
      q.timeout_ms = std::min<int64_t>(q.timeout_ms, int64_t(1) << 40);
      break;
    }
    case kCheck: {
      uint32_t count = r.u32();
      if (count > kMaxFrame / 4) return std::nullopt;
      for (uint32_t i = 0; i < count && r.ok; ++i) q.keys.push_back(r.str());
      break;
    }
    case kDelete:
      q.keys.push_back(r.str());
      break;
    case kNumKeys:
      break;
    default:
      return std::nullopt;
  }
  if (!r.done()) return std::nullopt;
  return q;
}

bool TcpStoreServer::handle_frame(Client& c, const uint8_t* p, size_t n) {
  std::optional<StoreRequest> q = parse_store_request(p, n);
  if (!q) return false;
  Writer w;
  switch (q->cmd) {
    case kSet: {
      data_[q->keys[0]] = std::move(q->value);
      w.u8(kOk);
      append(c.out, w);
      notify();
      return true;
    }
    case kAdd: {
      const std::string& key = q->keys[0];
      int64_t cur = 0;
      auto it = data_.find(key);
      if (it != data_.end() && !parse_int(it->second, &cur)) {
        w.u8(kBadRequest);
        w.str("add('" + key + "'): the current value is not an integer");
      } else {
        cur += q->delta;
        data_[key] = to_bytes(format_int(cur));
        w.u8(kOk);
        w.i64(cur);
      }
      append(c.out, w);
      notify();
      return true;
    }
    case kCompareSet: {
      const Bytes &expected = q->expected, &desired = q->value;
      auto it = data_.find(q->keys[0]);
      Bytes result;
      if (it == data_.end()) {
        if (expected.empty()) data_[q->keys[0]] = desired;
        result = expected.empty() ? desired : expected;
      } else {
        if (it->second == expected) it->second = desired;
        result = it->second;
      }
      w.u8(kOk);
      w.blob(result);
      append(c.out, w);
      notify();
      return true;
    }
    case kGet:
    case kWait: {
      reply_when_ready({c.fd.get(), q->cmd, std::move(q->keys),
                        net::Clock::now() + std::chrono::milliseconds(q->timeout_ms)});
      return true;
    }
    case kCheck: {
      bool all = true;
      for (const std::string& k : q->keys) all = data_.count(k) && all;
      w.u8(kOk);
      w.u8(all ? 1 : 0);
      append(c.out, w);
      return true;
    }
    case kDelete: {
      w.u8(kOk);
      w.u8(data_.erase(q->keys[0]) ? 1 : 0);
      append(c.out, w);
      return true;
    }
    case kNumKeys: {
      w.u8(kOk);
      w.i64(int64_t(data_.size()));
      append(c.out, w);
      return true;
    }
    default:
      return false;
  }
}

bool TcpStoreServer::ready(const Waiter& w) const {
  return std::all_of(w.keys.begin(), w.keys.end(),
                     [&](const std::string& k) { return data_.count(k) > 0; });
}

// Reply: get -> ok + value; wait -> ok; timeout -> the list of keys still missing.
void TcpStoreServer::answer(const Waiter& wt, bool timed_out) {
  auto it = clients_.find(wt.fd);
  if (it == clients_.end()) return;
  Writer w;
  if (timed_out) {
    w.u8(kTimeout);
    std::vector<const std::string*> missing;
    for (const std::string& k : wt.keys)
      if (!data_.count(k)) missing.push_back(&k);
    w.u32(uint32_t(missing.size()));
    for (const std::string* k : missing) w.str(*k);
  } else {
    w.u8(kOk);
    if (wt.cmd == kGet) w.blob(data_.at(wt.keys[0]));
  }
  append(it->second.out, w);
}

void TcpStoreServer::reply_when_ready(Waiter w) {
  if (ready(w))
    answer(w, false);
  else if (w.deadline <= net::Clock::now())
    answer(w, true);
  else
    waiters_.push_back(std::move(w));
}

void TcpStoreServer::notify() {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (ready(*it)) {
      answer(*it, false);
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void TcpStoreServer::expire(net::Clock::time_point now) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->deadline <= now) {
      answer(*it, true);
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  // Replies queued by notify / expire go out on the next poll round (POLLOUT).
}

void TcpStoreServer::drop(int fd) {
  waiters_.remove_if([fd](const Waiter& w) { return w.fd == fd; });
  clients_.erase(fd);
}

}  // namespace minidl::dist::detail
