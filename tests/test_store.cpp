// TCP store: operations, blocking get woken by set, timeouts (measured), many clients in
// threads and in a forked process, busy-port and unreachable-store errors, garbage on the
// socket, a server that goes away under a blocked client; the sockets' SIGPIPE guard.
#include <doctest/doctest.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <random>
#include <vector>

#include "dist_test_util.h"
#include "parallel/store/socket.h"
#include "parallel/store/tcp_store.h"

using namespace minidl::dist;
using namespace disttest;
using namespace std::chrono_literals;

namespace {

TcpStore make_master(std::chrono::milliseconds timeout = 2000ms) {
  return TcpStore(
      {.host = "127.0.0.1", .port = 0, .is_master = true, .timeout = timeout, .rank = 0});
}

std::unique_ptr<TcpStore> make_client(int port, std::chrono::milliseconds timeout = 2000ms,
                                      int rank = 1) {
  return std::make_unique<TcpStore>(
      TcpStoreOptions{.host = "127.0.0.1", .port = port, .timeout = timeout, .rank = rank});
}

int count_open_fds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  while (::readdir(d)) ++n;
  ::closedir(d);
  return n;
}

// A raw TCP connection to the store, for sending garbage.
int raw_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  return fd;
}

}  // namespace

TEST_CASE("store: set get add compare_set check delete num_keys") {
  TcpStore s = make_master();
  CHECK(s.port() > 0);
  CHECK(s.is_master());
  CHECK(s.num_keys() == 0);
  s.set("a", "hello");
  const Bytes blob = {0, 1, 255, 0, 7};
  s.set("bin", blob);
  CHECK(s.get_string("a") == "hello");
  CHECK(s.get("bin") == blob);
  s.set("a", "");
  CHECK(s.get("a").empty());
  CHECK(s.add("n", 5) == 5);
  CHECK(s.add("n", -7) == -2);
  CHECK(s.get_string("n") == "-2");
  // add on a non-integer value is an error naming the key
  Failure f = expect_error([&] { s.add("bin", 1); });
  CHECK(contains(f.message, "add('bin')"));
  // compare_set: missing + empty expected sets; mismatch keeps; match swaps
  CHECK(s.compare_set("c", "", "v1") == "v1");
  CHECK(s.compare_set("c", "zzz", "v2") == "v1");
  CHECK(s.compare_set("c", "v1", "v2") == "v2");
  CHECK(s.compare_set("missing", "x", "y") == "x");
  CHECK_FALSE(s.check({"missing"}));
  CHECK(s.check({"a", "c", "n"}));
  CHECK_FALSE(s.check({"a", "missing"}));
  CHECK(s.num_keys() == 4);
  CHECK(s.delete_key("c"));
  CHECK_FALSE(s.delete_key("c"));
  CHECK(s.num_keys() == 3);
  s.wait({"a", "n"}, 100ms);  // present: returns at once
  // a large value round-trips
  Bytes big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 31);
  s.set("big", big);
  CHECK(make_client(s.port())->get("big") == big);
}

TEST_CASE("store: blocking get is woken by a later set from another client") {
  TcpStore s = make_master();
  auto c = make_client(s.port());
  std::thread writer([&] {
    std::this_thread::sleep_for(200ms);
    c->set("late", "value");
  });
  auto t0 = Clock::now();
  CHECK(s.get_string("late") == "value");
  double dt = seconds_since(t0);
  writer.join();
  CHECK(dt >= 0.19);
  CHECK(dt < 0.6);
  // wait() on several keys is woken by add() too
  std::thread adder([&] {
    std::this_thread::sleep_for(100ms);
    c->set("k1", "1");
    c->add("k2", 1);
  });
  s.wait({"k1", "k2"}, 2000ms);
  adder.join();
  CHECK(s.get_string("k2") == "1");
}

TEST_CASE("store: get and wait time out within bounds with named keys and rank") {
  TcpStore s = make_master(300ms);
  Failure f = expect_error([&] { s.get("never"); });
  MESSAGE("get timeout 0.3 s fired after ", f.seconds, " s");
  CHECK(contains(f.message, "store get('never') timed out after 0.3 s (rank 0)"));
  CHECK(f.seconds >= 0.29);
  CHECK(f.seconds < 0.6);
  s.set("here", "1");
  f = expect_error([&] { s.wait({"here", "absent"}, 200ms); });
  MESSAGE("wait timeout 0.2 s fired after ", f.seconds, " s");
  CHECK(contains(f.message, "timed out after 0.2 s (rank 0); missing keys ['absent']"));
  CHECK(f.seconds >= 0.19);
  CHECK(f.seconds < 0.5);
  // the connection is still usable after a timeout
  CHECK(s.get_string("here") == "1");
}

TEST_CASE("store: concurrent adds from many client threads are atomic") {
  TcpStore s = make_master();
  constexpr int kThreads = 8, kAdds = 100;
  auto shared = make_client(s.port());  // one client shared by threads: its mutex serialises
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      auto own = make_client(s.port(), 2000ms, t);
      for (int i = 0; i < kAdds; ++i) {
        own->add("counter", 1);
        shared->add("shared", 2);
      }
    });
  for (auto& t : threads) t.join();
  CHECK(s.add("counter", 0) == kThreads * kAdds);
  CHECK(s.add("shared", 0) == 2 * kThreads * kAdds);
}

TEST_CASE("store: a forked child process talks to the store as a client") {
  TcpStore s = make_master();
  s.set("from_parent", "ping");
  const int port = s.port();
  // the parent answers the child's key from a thread while it waits for the child
  std::thread answer([&] {
    if (s.get_string("from_child") == "pong") s.set("reply", "ok");
  });
  int code = run_child(
      [port] {
        TcpStore c({.host = "127.0.0.1", .port = port, .timeout = 2000ms, .rank = 1});
        if (c.get_string("from_parent") != "ping") return false;
        c.set("from_child", "pong");
        return c.add("joined", 1) == 1 && c.get_string("reply") == "ok";
      },
      5000ms);
  answer.join();
  CHECK(code == 0);
  CHECK(s.add("joined", 0) == 1);
}

TEST_CASE("store: busy explicit port fails fast naming host and port") {
  TcpStore s = make_master();
  Failure f = expect_error([&] {
    TcpStore second({.host = "127.0.0.1", .port = s.port(), .is_master = true, .timeout = 2000ms});
  });
  MESSAGE("busy-port error after ", f.seconds, " s: ", f.message);
  CHECK(contains(f.message, "address 127.0.0.1:" + std::to_string(s.port()) + " already in use"));
  CHECK(f.seconds < 2.0);
}

TEST_CASE("store: an unreachable store fails after the connect timeout") {
  int port = 0;
  {
    TcpStore probe = make_master();
    port = probe.port();
  }  // a port nobody listens on now
  Failure f = expect_error([&] { make_client(port, 300ms); });
  MESSAGE("connect timeout 0.3 s fired after ", f.seconds, " s");
  CHECK(contains(f.message,
                 "could not reach store at 127.0.0.1:" + std::to_string(port) + " within 0.3 s"));
  CHECK(f.seconds >= 0.25);
  CHECK(f.seconds < 1.0);
  // a client started before the server is retried until the server appears
  std::unique_ptr<TcpStore> master;
  std::thread late([&] {
    std::this_thread::sleep_for(150ms);
    master = std::make_unique<TcpStore>(
        TcpStoreOptions{.host = "127.0.0.1", .port = port, .is_master = true});
  });
  auto c = make_client(port, 3000ms);
  late.join();
  c->set("x", "1");
  CHECK(master->get_string("x") == "1");
}

TEST_CASE("store: garbage on the socket drops only that client") {
  TcpStore s = make_master();
  s.set("keep", "1");
  std::mt19937 rng(7);
  const std::vector<std::vector<uint8_t>> attacks = {
      {0xff, 0xff, 0xff, 0xff, 1, 2, 3},        // frame length 4 GiB
      {0, 0, 0, 0},                             // empty frame
      {5, 0, 0, 0, 99, 1, 2, 3, 4},             // unknown command
      {9, 0, 0, 0, 1, 0xff, 0xff, 0, 0, 1, 2},  // set with an oversized key length
      {6, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0x7f},  // wait with 2^31 keys
      {100, 0, 0, 0, 1, 2},                     // truncated frame, then close
  };
  for (const auto& bytes : attacks) {
    int fd = raw_connect(s.port());
    CHECK(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size()));
    ::close(fd);
  }
  for (int round = 0; round < 20; ++round) {
    std::vector<uint8_t> junk(size_t(rng() % 200 + 1));
    for (auto& b : junk) b = uint8_t(rng());
    int fd = raw_connect(s.port());
    ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    ::close(fd);
  }
  // a malformed request on a live connection closes it (the server replies nothing)
  int fd = raw_connect(s.port());
  const uint8_t bad[] = {2, 0, 0, 0, 42, 42};
  ::send(fd, bad, sizeof(bad), MSG_NOSIGNAL);
  char c;
  CHECK(::recv(fd, &c, 1, 0) == 0);
  ::close(fd);
  auto client = make_client(s.port());
  CHECK(client->get_string("keep") == "1");
  CHECK(client->num_keys() == 1);
}

TEST_CASE("store: clients see the server go away instead of hanging") {
  auto master = std::make_unique<TcpStore>(TcpStoreOptions{.port = 0, .is_master = true});
  auto c = make_client(master->port(), 10000ms);
  std::string message;
  double seconds = 0;
  std::thread blocked([&] {
    Failure f = expect_error([&] { c->get("never"); });
    message = f.message;
    seconds = f.seconds;
  });
  std::this_thread::sleep_for(100ms);
  auto t0 = Clock::now();
  master.reset();  // a connected, blocked client must not stall the destructor
  double destroy = seconds_since(t0);
  blocked.join();
  MESSAGE("server destroyed in ", destroy, " s; blocked client failed after ", seconds, " s");
  CHECK(destroy < 0.5);
  CHECK(seconds < 1.0);
  CHECK(contains(message, "closed the connection"));
  // the client is now broken and says so
  Failure again = expect_error([&] { c->set("x", "1"); });
  CHECK(contains(again.message, "connection unusable"));
}

TEST_CASE("socket: threads started under SigpipeBlocked get EPIPE from a gone peer") {
  // In a child: SIGPIPE's default action (what gloo's writev would meet) kills it, not ctest's
  // process. The guard's thread and the guard's caller both write, as gloo's threads do.
  const int code = run_child(
      [] {
        int fds[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return false;
        ::close(fds[1]);  // the peer has gone
        const char byte = 'x';
        int thread_err = 0, caller_err = 0;
        {
          net::SigpipeBlocked guard;
          std::thread writer([&] {
            if (::write(fds[0], &byte, 1) < 0) thread_err = errno;
          });
          writer.join();
          if (::write(fds[0], &byte, 1) < 0) caller_err = errno;  // its SIGPIPE is discarded
        }
        sigset_t mask;
        ::pthread_sigmask(SIG_BLOCK, nullptr, &mask);
        return thread_err == EPIPE && caller_err == EPIPE && !sigismember(&mask, SIGPIPE);
      },
      5000ms);
  CHECK(code == 0);
}

TEST_CASE("store: no file descriptors leak across store lifetimes") {
  { TcpStore warm = make_master(); }
  int before = count_open_fds();
  for (int i = 0; i < 5; ++i) {
    TcpStore s = make_master();
    auto c = make_client(s.port());
    c->set("k", "v");
    (void)expect_error([&] { make_client(s.port())->wait({"z"}, 10ms); });
  }
  CHECK(count_open_fds() == before);
}

TEST_CASE("store: abort() fails a blocked get at once, and every later request") {
  TcpStore s = make_master(10000ms);
  auto c = make_client(s.port(), 10000ms);
  std::string message;
  double seconds = 0;
  std::thread blocked([&] {
    Failure f = expect_error([&] { c->get("never"); });
    message = f.message;
    seconds = f.seconds;
  });
  std::this_thread::sleep_for(100ms);
  c->abort("the link to rank 0 is down (test)");
  blocked.join();
  MESSAGE("blocked get failed ", seconds, " s after it started (abort at 0.1 s)");
  CHECK(seconds < 1.0);
  CHECK(contains(message, "store get('never') at 127.0.0.1:"));
  CHECK(contains(message, "the link to rank 0 is down (test)"));
  CHECK(c->broken_reason() == "the link to rank 0 is down (test)");
  Failure again = expect_error([&] { c->add("n", 1); });
  CHECK(again.seconds < 0.1);
  CHECK(contains(again.message, "connection unusable: the link to rank 0 is down (test)"));
  s.set("still", "fine");  // other clients are untouched
  CHECK(make_client(s.port())->get_string("still") == "fine");
}

TEST_CASE("store: a silent server fails requests at the timeout, not later") {
  // A listener that never accepts: connects complete in its backlog, nothing ever answers.
  int port = 0;
  net::Fd silent = net::listen_tcp("127.0.0.1", 0, &port);
  auto c = make_client(port, 500ms, 3);
  Failure f = expect_error([&] { c->set("k", "v"); });
  MESSAGE("set to a silent server failed after ", f.seconds, " s (timeout 0.5 s)");
  CHECK(f.seconds >= 0.45);
  CHECK(f.seconds < 0.9);
  CHECK(contains(f.message, "store set('k') at 127.0.0.1:" + std::to_string(port) + " (rank 3)"));
  CHECK(contains(f.message, "did not answer within 0.5 s"));
  // A blocking get may be held by the server for its timeout; a short grace on top, no more.
  auto g = make_client(port, 500ms, 3);
  f = expect_error([&] { g->get("k"); });
  MESSAGE("get from a silent server failed after ", f.seconds, " s (timeout 0.5 s)");
  CHECK(f.seconds >= 0.45);
  CHECK(f.seconds < 1.1);
}
