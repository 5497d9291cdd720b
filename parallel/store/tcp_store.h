// TCP key-value store (like c10d::TCPStore): the master (rank 0) hosts the server in a
// background thread (single-threaded poll loop); every rank, the master included, talks to
// it through a thread-safe client. Blocking get / wait are answered by the server when the
// keys appear (no client polling) or with a timeout reply at the deadline.
#pragma once
#include <memory>
#include <mutex>
#include <string>

#include "parallel/store/socket.h"
#include "parallel/store/store.h"

namespace minidl::dist {

struct TcpStoreOptions {
  // Where clients connect. The master listens there for a loopback host, else on every
  // interface (and reaches itself over loopback).
  std::string host = "127.0.0.1";
  int port = 0;            // 0 (master only): the OS chooses, see TcpStore::port()
  bool is_master = false;  // host the server in this process
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;  // connect, get, wait
  int rank = -1;                                               // named in error messages
};

namespace detail {
class TcpStoreServer;
}
// Something owned by a TcpStore and destroyed before the store's connection and server, e.g.
// the heartbeat that rendezvous attaches (parallel/rendezvous/peer_watch.h): the store only
// knows it through this base.
class StoreCompanion {
 public:
  virtual ~StoreCompanion() = default;
};

class TcpStore : public Store {
 public:
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  bool is_master() const { return server_ != nullptr; }

  using Store::compare_set;
  using Store::set;
  using Store::wait;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  // Makes every request in flight and every later one fail at once with `why` (thread-safe;
  // used when a heartbeat finds the server unreachable, so nothing waits out its timeout).
  void abort(const std::string& why);
  // Why the client is unusable ("" while it works).
  std::string broken_reason();
  // Keeps `companion` (rendezvous() sets a heartbeat watching this store's server) until the
  // store is destroyed; it is destroyed first there.
  void set_companion(std::unique_ptr<StoreCompanion> companion);
  StoreCompanion* companion() const { return companion_.get(); }

 private:
  struct Reply {
    uint8_t status;
    Bytes payload;
  };
  // Sends one request and waits for its reply. `server_wait` is how long the server may hold
  // it (blocking get / wait; zero for requests answered at once): the client waits that long
  // plus a short grace, and a request answered at once no longer than the store's timeout.
  Reply request(const Bytes& body, std::chrono::milliseconds server_wait, const std::string& what);
  std::string where() const;
  void close_socket(const std::string& why);  // records why, closes the fd (under fd_mu_)

  std::string host_;
  int port_ = 0;
  std::unique_ptr<detail::TcpStoreServer> server_;
  std::mutex mu_;
  std::mutex fd_mu_;  // guards sock_'s fd against abort() shutting down a closed fd
  net::Fd sock_;
  std::string broken_;  // why the connection is unusable (empty: fine); under fd_mu_
  std::unique_ptr<StoreCompanion> companion_;
};

}  // namespace minidl::dist
