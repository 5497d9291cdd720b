// TCP store client: one connection per TcpStore, one request in flight at a time (mutex).
// Replies are awaited with poll(); a server that closes the connection or stops answering
// breaks the client with an error naming host:port and the rank, never a hang.
#include "parallel/store/tcp_store.h"

#include <sys/socket.h>

#include <algorithm>

#include "parallel/store/protocol.h"
#include "parallel/store/tcp_store_server.h"
#include "tensor/error.h"

namespace minidl::dist {

using namespace proto;

namespace {

// Grace on top of a blocking request's server-side wait before the client gives up on a
// silent server: a tenth of the wait, within [0.2 s, 5 s].
std::chrono::milliseconds reply_grace(std::chrono::milliseconds wait) {
  return std::clamp(wait / 10, std::chrono::milliseconds(200), std::chrono::milliseconds(5000));
}

std::string bind_host_for(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" ? host : std::string();
}

std::string key_list(const std::vector<std::string>& keys) {
  std::string s = "[";
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", '" : "'") + keys[i] + "'";
  return s + "]";
}

}  // namespace

TcpStore::TcpStore(TcpStoreOptions o) : host_(o.host), port_(o.port) {
  timeout_ = o.timeout;
  rank_ = o.rank;
  if (o.is_master) {
    server_ = std::make_unique<detail::TcpStoreServer>(bind_host_for(o.host), o.port);
    port_ = server_->port();
  }
  MINIDL_CHECK(port_ > 0 && port_ <= 65535, "store: a client needs a port in [1, 65535], got ",
               port_);
  // the master reaches its own server over loopback when it listens on every interface
  const bool self_loopback = server_ && bind_host_for(o.host).empty();
  sock_ = net::connect_tcp(self_loopback ? "127.0.0.1" : host_, port_, timeout_);
}

TcpStore::~TcpStore() {
  companion_.reset();  // a heartbeat thread may abort() this client: stop it first
  {
    std::lock_guard<std::mutex> lock(fd_mu_);
    sock_.reset();
  }
  server_.reset();
}

void TcpStore::set_companion(std::unique_ptr<StoreCompanion> companion) {
  companion_ = std::move(companion);
}

void TcpStore::close_socket(const std::string& why) {
  std::lock_guard<std::mutex> lock(fd_mu_);
  if (broken_.empty()) broken_ = why;
  sock_.reset();
}

void TcpStore::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(fd_mu_);
  if (broken_.empty()) broken_ = why;
  if (sock_.valid()) ::shutdown(sock_.get(), SHUT_RDWR);  // wakes a request blocked in poll()
}

std::string TcpStore::broken_reason() {
  std::lock_guard<std::mutex> lock(fd_mu_);
  return broken_;
}

std::string TcpStore::where() const {
  return host_ + ":" + std::to_string(port_) + " (rank " + std::to_string(rank_) + ")";
}

TcpStore::Reply TcpStore::request(const Bytes& frame, std::chrono::milliseconds server_wait,
                                  const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::string why = broken_reason(); !why.empty())
    MINIDL_FAIL("store ", what, " at ", where(), ": connection unusable: ", why);
  MINIDL_CHECK(frame.size() - 4 <= kMaxFrame, "store ", what, ": message of ", frame.size(),
               " bytes exceeds the 64 MiB limit");
  const std::chrono::milliseconds bound =
      server_wait.count() > 0 ? server_wait + reply_grace(server_wait) : timeout_;
  const auto deadline = net::Clock::now() + bound;
  auto fail = [&](net::IoResult r) {
    std::string why = broken_reason();  // set by abort(): the reason beats the symptom
    if (why.empty())
      why = r == net::IoResult::closed
                ? "the store server closed the connection (did the master, rank 0, exit?)"
                : "the store server did not answer within " + format_seconds(bound) +
                      " (is the master, rank 0, unreachable?)";
    close_socket(why);
    MINIDL_FAIL("store ", what, " at ", where(), ": ", why);
  };
  if (auto r = net::send_all(sock_.get(), frame.data(), frame.size(), deadline);
      r != net::IoResult::ok)
    fail(r);
  uint8_t head[4];
  if (auto r = net::recv_all(sock_.get(), head, 4, deadline); r != net::IoResult::ok) fail(r);
  const uint32_t len = read_u32(head);
  if (len == 0 || len > kMaxFrame) {
    close_socket("malformed reply");
    MINIDL_FAIL("store ", what, " at ", where(), ": malformed reply of ", len, " bytes");
  }
  Bytes body(len);
  if (auto r = net::recv_all(sock_.get(), body.data(), len, deadline); r != net::IoResult::ok)
    fail(r);
  Reply reply{body[0], Bytes(body.begin() + 1, body.end())};
  if (reply.status == kBadRequest) {
    Reader rd{reply.payload.data(), reply.payload.data() + reply.payload.size()};
    MINIDL_FAIL("store ", what, " at ", where(), ": ", rd.str(kMaxFrame));
  }
  return reply;
}

namespace {

Bytes frame_with_key(Cmd cmd, const std::string& key) {
  MINIDL_CHECK(key.size() <= kMaxKey, "store: key of ", key.size(), " bytes exceeds the ", kMaxKey,
               "-byte limit");
  Writer w;
  w.u8(cmd);
  w.str(key);
  return std::move(w.buf);
}

// Parses a reply payload, failing loudly on a malformed one.
Reader reader(const Bytes& payload) {
  return Reader{payload.data(), payload.data() + payload.size()};
}

}  // namespace

void TcpStore::set(const std::string& key, const Bytes& value) {
  Writer w;
  w.buf = frame_with_key(kSet, key);
  w.blob(value);
  request(w.finish(), std::chrono::milliseconds(0), "set('" + key + "')");
}

Bytes TcpStore::get(const std::string& key) {
  Writer w;
  w.buf = frame_with_key(kGet, key);
  w.i64(timeout_.count());
  const std::string what = "get('" + key + "')";
  Reply r = request(w.finish(), timeout_, what);
  MINIDL_CHECK(r.status == kOk, "store ", what, " timed out after ", format_seconds(timeout_),
               " (rank ", rank_, ") waiting on ", host_, ":", port_);
  Reader rd = reader(r.payload);
  Bytes value = rd.blob();
  MINIDL_CHECK(rd.done(), "store ", what, ": malformed reply");
  return value;
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  Writer w;
  w.buf = frame_with_key(kAdd, key);
  w.i64(delta);
  Reply r = request(w.finish(), std::chrono::milliseconds(0), "add('" + key + "')");
  Reader rd = reader(r.payload);
  int64_t v = rd.i64();
  MINIDL_CHECK(rd.done(), "store add('", key, "'): malformed reply");
  return v;
}

Bytes TcpStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Writer w;
  w.buf = frame_with_key(kCompareSet, key);
  w.blob(expected);
  w.blob(desired);
  Reply r = request(w.finish(), std::chrono::milliseconds(0), "compare_set('" + key + "')");
  Reader rd = reader(r.payload);
  Bytes v = rd.blob();
  MINIDL_CHECK(rd.done(), "store compare_set('", key, "'): malformed reply");
  return v;
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  Writer w;
  w.u8(kWait);
  w.u32(uint32_t(keys.size()));
  for (const std::string& k : keys) {
    MINIDL_CHECK(k.size() <= kMaxKey, "store: key of ", k.size(), " bytes exceeds the limit");
    w.str(k);
  }
  w.i64(std::max<int64_t>(timeout.count(), 0));
  const std::string what = "wait(" + key_list(keys) + ")";
  Reply r = request(w.finish(), timeout, what);
  if (r.status == kOk) return;
  Reader rd = reader(r.payload);
  std::vector<std::string> missing(rd.u32());
  for (auto& k : missing) k = rd.str();
  MINIDL_FAIL("store ", what, " timed out after ", format_seconds(timeout), " (rank ", rank_,
              "); missing keys ", key_list(missing));
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  Writer w;
  w.u8(kCheck);
  w.u32(uint32_t(keys.size()));
  for (const std::string& k : keys) w.str(k);
  Reply r = request(w.finish(), std::chrono::milliseconds(0), "check(" + key_list(keys) + ")");
  return !r.payload.empty() && r.payload[0] != 0;
}

bool TcpStore::delete_key(const std::string& key) {
  Reply r = request(Writer{frame_with_key(kDelete, key)}.finish(), std::chrono::milliseconds(0),
                    "delete_key('" + key + "')");
  return !r.payload.empty() && r.payload[0] != 0;
}

int64_t TcpStore::num_keys() {
  Writer w;
  w.u8(kNumKeys);
  Reply r = request(w.finish(), std::chrono::milliseconds(0), "num_keys()");
  Reader rd = reader(r.payload);
  return rd.i64();
}

}  // namespace minidl::dist
