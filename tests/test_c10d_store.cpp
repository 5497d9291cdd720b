// C10dStore (parallel/store/c10d_store.h) against a real c10d TCPStore hosted by PyTorch in a child
// `python3 -c` (Debian 12's python3-torch is 1.13; MINIDL_TORCH_PYTHON names another
// interpreter, e.g. PyTorch 2.6's, to test the 2.x protocol by hand). Skipped with the reason
// when no interpreter imports torch. Every operation, a bounded wait timeout after which the
// connection still works, a get woken by another client's set, and errors naming host:port.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "dist_test_util.h"
#include "parallel/store/c10d_store.h"
#include "skip.h"

using namespace minidl::dist;
using namespace disttest;
using namespace std::chrono_literals;

namespace {

// Hosts a TCPStore on argv[1] until stdin closes (Debian's 2.6 lacks libuv: retry without).
constexpr const char* kHostScript = R"(import sys, torch, torch.distributed as d
port = int(sys.argv[1])
try:
    s = d.TCPStore('127.0.0.1', port, is_master=True, wait_for_workers=False)
except RuntimeError as e:
    if 'libuv' not in str(e): raise
    s = d.TCPStore('127.0.0.1', port, is_master=True, wait_for_workers=False, use_libuv=False)
print('ready', torch.__version__, flush=True)
sys.stdin.read()
)";

// The interpreters to try: MINIDL_TORCH_PYTHON, else python3 and Debian's /usr/bin/python3.
std::vector<std::string> torch_pythons() {
  if (const char* p = std::getenv("MINIDL_TORCH_PYTHON"); p && *p) return {p};
  return {"python3", "/usr/bin/python3"};
}

// A PyTorch TCPStore server in a child process; gone when this object is.
struct TorchStoreServer {
  pid_t pid = -1;
  int stdin_fd = -1;
  int port = 0;
  std::string version;  // torch.__version__ ("" when it did not start)

  explicit TorchStoreServer(const std::string& python) {
    port = free_port();
    int in[2], out[2];
    REQUIRE(::pipe(in) == 0);
    REQUIRE(::pipe(out) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::close(in[1]);
      ::close(out[0]);
      const std::string port_text = std::to_string(port);
      ::close(2);  // an interpreter without torch fails quietly: the next is tried
      ::execlp(python.c_str(), python.c_str(), "-c", kHostScript, port_text.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_fd = in[1];
    FILE* f = ::fdopen(out[0], "r");
    char line[256] = {};
    if (f && std::fgets(line, sizeof(line), f) && std::string(line).rfind("ready ", 0) == 0) {
      version = std::string(line + 6);
      while (!version.empty() && version.back() == '\n') version.pop_back();
    }
    if (f) std::fclose(f);
  }
  ~TorchStoreServer() {
    if (stdin_fd >= 0) ::close(stdin_fd);
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
  }
  C10dProtocol expected_protocol() const {
    return version.rfind("1.", 0) == 0 ? C10dProtocol::v1_13 : C10dProtocol::v2;
  }
};

C10dStore connect(int port, std::chrono::milliseconds timeout = 5000ms, int rank = 1) {
  return C10dStore(
      {.host = "127.0.0.1", .port = port, .timeout = timeout, .rank = rank, .key_prefix = "/t/"});
}

}  // namespace

TEST_CASE("c10d store: every operation against PyTorch's TCPStore") {
  std::unique_ptr<TorchStoreServer> hosted;
  for (const std::string& python : torch_pythons()) {
    hosted = std::make_unique<TorchStoreServer>(python);
    if (!hosted->version.empty()) break;
  }
  if (hosted->version.empty())
    MINIDL_SKIP(
        "no python3 imports torch to host a TCPStore (Debian: apt-get install "
        "python3-torch; or set MINIDL_TORCH_PYTHON)");
  TorchStoreServer& server = *hosted;
  MESSAGE("PyTorch ", server.version, " on port ", server.port);
  C10dStore a = connect(server.port, 5000ms, 0);
  C10dStore b = connect(server.port, 5000ms, 1);
  CHECK(a.protocol() == server.expected_protocol());

  a.set("k", "v");
  CHECK(b.get_string("k") == "v");
  CHECK(b.add("n", 5) == 5);
  CHECK(a.add("n", -2) == 3);
  CHECK(a.get_string("n") == "3");
  CHECK(a.compare_set("k", "v", "w") == "w");       // matches: swapped
  CHECK(a.compare_set("k", "x", "y") == "w");       // no match: the current value
  CHECK(a.compare_set("fresh", "", "z") == "z");    // missing + empty expected: set
  CHECK(a.compare_set("absent", "e", "d") == "e");  // missing: `expected` back, nothing set
  CHECK_FALSE(a.check({"absent"}));
  CHECK(a.check({"k", "fresh"}));
  CHECK_FALSE(a.check({"k", "absent"}));
  a.wait({"k", "fresh"}, 1000ms);
  CHECK(a.num_keys() >= 3);
  CHECK(a.delete_key("fresh"));
  CHECK_FALSE(a.delete_key("fresh"));
  CHECK_FALSE(a.check({"fresh"}));
  a.set("bin", Bytes{0, 1, 255});
  CHECK(b.get("bin") == Bytes{0, 1, 255});

  // A wait times out within its bound, names the keys and the store, and the client still works.
  Failure f = expect_error([&] { b.wait({"never"}, 300ms); });
  CHECK(f.seconds >= 0.25);
  CHECK(f.seconds < 2.0);
  CHECK(contains(f.message, "wait(['never']) timed out after 0.3 s (rank 1)"));
  CHECK(contains(f.message, "127.0.0.1:" + std::to_string(server.port)));
  b.set("after", "ok");
  CHECK(a.get_string("after") == "ok");

  // A blocking get is woken by another client's set.
  std::thread setter([&] {
    std::this_thread::sleep_for(200ms);
    a.set("late", "here");
  });
  const auto t0 = Clock::now();
  CHECK(b.get_string("late") == "here");
  setter.join();
  CHECK(seconds_since(t0) < 2.0);

  // A second connection (the stall inspector's) shares keys and the detected protocol.
  auto c = a.connect_another();
  CHECK(c->protocol() == a.protocol());
  CHECK(c->get_string("after") == "ok");

  // A blocking get is bounded by the store's timeout.
  C10dStore quick = connect(server.port, 300ms, 2);
  f = expect_error([&] { quick.get("never"); });
  CHECK(f.seconds < 2.0);
  CHECK(contains(f.message, "get('never') timed out after 0.3 s (rank 2)"));

  // The server going away under a waiting client fails the wait at once, naming the store.
  const auto kill_at = Clock::now();
  std::thread killer([&] {
    std::this_thread::sleep_for(200ms);
    ::kill(server.pid, SIGKILL);
  });
  f = expect_error([&] { b.wait({"never"}, 20000ms); });
  killer.join();
  CHECK(seconds_since(kill_at) < 5.0);
  CHECK(contains(f.message, "closed the connection"));
  CHECK(contains(f.message, "rank 1"));
}

TEST_CASE("c10d store: an unreachable store fails in time, naming host:port and rank") {
  const int port = free_port();  // nobody listens
  Failure f = expect_error([&] { connect(port, 500ms, 3); });
  CHECK(f.seconds < 3.0);
  CHECK(contains(f.message, "127.0.0.1:" + std::to_string(port)));
  CHECK(contains(f.message, "rank 3"));
  CHECK(contains(f.message, "torchrun's agent store"));
}

TEST_CASE("c10d store: TORCHELASTIC_USE_AGENT_STORE and the per-attempt key prefix") {
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  CHECK(use_agent_store());
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "TRUE", 1);
  CHECK(use_agent_store());
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
  CHECK_FALSE(use_agent_store());
  ::unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  CHECK_FALSE(use_agent_store());
  ::setenv("TORCHELASTIC_RESTART_COUNT", "2", 1);
  CHECK(agent_store_key_prefix() == "/minidl/attempt_2/");
  ::unsetenv("TORCHELASTIC_RESTART_COUNT");
  CHECK(agent_store_key_prefix() == "/minidl/attempt_0/");
}
