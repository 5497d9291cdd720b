// Heartbeats through the TCP store: each rank counts up its own key from a background thread
// (own connection) and watches the others'. A peer silent past the limit is named with its
// rank and address; a store that stops answering makes the main store client fail at once.
#pragma once
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "parallel/store/tcp_store.h"

namespace minidl::dist {

struct PeerAddress {
  std::string host;     // host name the rank registered
  std::string address;  // its address towards the master (what peers connect to)
};

struct PeerWatchOptions {
  int rank = 0;
  std::vector<PeerAddress> peers;             // one per rank of the job (index = rank)
  std::chrono::milliseconds timeout{300000};  // the job's store / collective timeout
  bool watch_peers = true;  // read the others' counters (off: only beat, and watch the store)
};

class PeerWatch : public StoreCompanion {
 public:
  // Connects its own client to `main`'s server and starts beating. `main` is aborted (every
  // request fails at once) when the server stops answering heartbeats; it must outlive the
  // watch (TcpStore::set_companion arranges that).
  PeerWatch(TcpStore& main, PeerWatchOptions options);
  // Bounded: a clean goodbye (peers then know this rank left) within ~1 s, else abandoned.
  ~PeerWatch() override;
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // Beat every timeout/10 within [0.1 s, 1 s]; silent for timeout/2 within [3 s, 10 s] means
  // unreachable, so a broken link is known before a collective times out.
  static std::chrono::milliseconds interval_for(std::chrono::milliseconds timeout);
  static std::chrono::milliseconds silence_limit(std::chrono::milliseconds timeout);
  static std::string key(int rank) { return "minidl/hb/" + std::to_string(rank); }
  const std::vector<PeerAddress>& peers() const { return o_.peers; }

 private:
  void loop();
  bool beat();  // false: the store is gone (stop beating)
  void check_peers(std::chrono::steady_clock::time_point now);
  std::string name(int rank) const;  // "rank 2 (10.0.0.2, host b)"

  TcpStore& main_;
  std::unique_ptr<TcpStore> hb_;
  PeerWatchOptions o_;
  std::string master_;  // host:port of the store
  std::chrono::milliseconds interval_, silence_;
  std::vector<int64_t> last_;  // each peer's last counter (-1: said goodbye)
  std::vector<std::chrono::steady_clock::time_point> seen_;  // when it last changed
  std::vector<int> reported_;                                // the silent ranks last reported
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, exited_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

// The heartbeat rendezvous attached to `store` (nullptr: none, e.g. one rank or
// MINIDL_HEARTBEAT=0).
const PeerWatch* peer_watch_of(const TcpStore& store);

// This process's latest heartbeat diagnosis ("" when none), e.g. "rank 0: no heartbeat for
// 5 s from rank 2 (10.0.0.2, host b): unreachable (link down?), hung or dead".
std::string peer_watch_report();

}  // namespace minidl::dist
