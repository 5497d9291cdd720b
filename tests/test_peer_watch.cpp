// Heartbeats (parallel/rendezvous/peer_watch.h): rendezvous records every rank's address and starts
// a watch; a silent peer is named with rank and address within the silence limit; a store that
// stops answering aborts the main client so a blocked request fails then, not at its timeout.
#include <doctest/doctest.h>

#include <thread>

#include "dist_test_util.h"
#include "parallel/rendezvous/peer_watch.h"
#include "parallel/rendezvous/rendezvous.h"
#include "parallel/store/tcp_store.h"

using namespace minidl::dist;
using namespace disttest;
using namespace std::chrono_literals;

namespace {

// Two ranks joined over tcp:// in threads.
std::vector<RendezvousInfo> join_two(std::chrono::milliseconds timeout) {
  const std::string url = "tcp://127.0.0.1:" + std::to_string(free_port());
  std::vector<RendezvousInfo> out(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      out[size_t(r)] = rendezvous(url, {.rank = r, .world_size = 2, .timeout = timeout});
    });
  for (auto& t : threads) t.join();
  return out;
}

TcpStore& store_of(const RendezvousInfo& info) {
  auto* s = dynamic_cast<TcpStore*>(info.store.get());
  REQUIRE(s != nullptr);
  return *s;
}

// Polls peer_watch_report() until it contains `part` or `limit` passes; returns the seconds.
double wait_for_report(const std::string& part, std::chrono::milliseconds limit) {
  auto t0 = Clock::now();
  while (!contains(peer_watch_report(), part) && Clock::now() - t0 < limit)
    std::this_thread::sleep_for(20ms);
  return seconds_since(t0);
}

}  // namespace

TEST_CASE("peer watch: limits follow the timeout") {
  CHECK(PeerWatch::interval_for(10000ms) == 1000ms);
  CHECK(PeerWatch::interval_for(300ms) == 100ms);
  CHECK(PeerWatch::silence_limit(10000ms) == 5000ms);
  CHECK(PeerWatch::silence_limit(1000ms) == 3000ms);
  CHECK(PeerWatch::silence_limit(300000ms) == 10000ms);
}

TEST_CASE("peer watch: rendezvous records addresses and names a silent peer") {
  EnvGuard g;
  g.set("MINIDL_HEARTBEAT", std::nullopt);
  auto infos = join_two(3000ms);
  for (const RendezvousInfo& info : infos) {
    const PeerWatch* w = peer_watch_of(store_of(info));
    REQUIRE(w != nullptr);
    REQUIRE(w->peers().size() == 2);
    CHECK(w->peers()[0].address == "127.0.0.1");
    CHECK(w->peers()[1].address == "127.0.0.1");
    CHECK_FALSE(w->peers()[0].host.empty());
  }
  // A third watch (rank 2 of a world that also has a rank 3 which never beats): ranks 0 and 1
  // beat through their own watches, rank 3 stays silent and is the only one named.
  auto peers = peer_watch_of(store_of(infos[0]))->peers();
  peers.push_back(PeerAddress{"me", "127.0.0.1"});
  peers.push_back(PeerAddress{"ghost", "10.9.9.9"});
  TcpStore& store = store_of(infos[0]);
  PeerWatch watch(store, PeerWatchOptions{.rank = 2, .peers = peers, .timeout = 3000ms});
  const double s = wait_for_report("rank 2: no heartbeat for 3 s from rank 3", 6000ms);
  const std::string report = peer_watch_report();
  MESSAGE("silent rank named after ", s, " s: ", report);
  CHECK(s >= 2.9);
  CHECK(s < 4.5);
  CHECK(contains(report, "from rank 3 (10.9.9.9, host ghost): unreachable"));
  CHECK_FALSE(contains(report, "rank 0 ("));
  CHECK_FALSE(contains(report, "rank 1 ("));
  // a clean goodbye: the key says -1 and the others stop expecting beats
  store_of(infos[1]).set_companion(nullptr);
  CHECK(store.get_string(PeerWatch::key(1)) == "-1");

  g.set("MINIDL_HEARTBEAT", "0");
  auto off = join_two(3000ms);
  CHECK(peer_watch_of(store_of(off[0])) == nullptr);
  CHECK(peer_watch_of(store_of(off[1])) == nullptr);
}

TEST_CASE("peer watch: a store that stops answering fails the main client at once") {
  // A listener that never accepts: the store host is "unreachable" (nothing answers).
  int port = 0;
  net::Fd silent = net::listen_tcp("127.0.0.1", 0, &port);
  auto main = std::make_unique<TcpStore>(
      TcpStoreOptions{.host = "127.0.0.1", .port = port, .timeout = 8000ms, .rank = 1});
  const std::vector<PeerAddress> peers{{"host0", "10.1.1.1"}, {"host1", "10.1.1.2"}};
  auto t0 = Clock::now();
  auto watch = std::make_unique<PeerWatch>(
      *main, PeerWatchOptions{.rank = 1, .peers = peers, .timeout = 4000ms});
  Failure f = expect_error([&] { main->get("never"); });  // would wait 8 s + grace
  MESSAGE("blocked get failed after ", f.seconds, " s (silence limit 3 s): ", f.message);
  CHECK(f.seconds >= 2.8);
  CHECK(f.seconds < 4.0);
  CHECK(contains(f.message, "rank 1: the store at 127.0.0.1:" + std::to_string(port) +
                                " (hosted by rank 0 (10.1.1.1, host host0)) answered no "
                                "heartbeat for 3 s"));
  CHECK(contains(f.message, "rank 0 (10.1.1.1, host host0) is unreachable"));
  CHECK(contains(peer_watch_report(), "answered no heartbeat"));
  Failure again = expect_error([&] { main->set("k", "v"); });
  CHECK(again.seconds < 0.1);
  watch.reset();  // bounded teardown: the beat thread has already stopped
  CHECK(seconds_since(t0) < 5.0);
}
