// Launcher (minidl-run) units: flag stripping for self-launch, free ports, wait-status text,
// visible GPUs and the device plan, per-rank environments, the console line splitter, and
// launch() in-process (exit codes, fail-fast timing, bad options). End-to-end: app/launcher_test.sh
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "parallel/launch/launcher.h"
#include "tensor/error.h"

using namespace minidl::dist;

namespace {

// Sets an environment variable for one scope and restores the old value.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    value ? ::setenv(name.c_str(), value, 1) : ::unsetenv(name.c_str());
  }
  ~ScopedEnv() { old ? ::setenv(name.c_str(), old->c_str(), 1) : ::unsetenv(name.c_str()); }
};

int status_of_child(void (*body)()) {
  pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

std::string value_of(const std::vector<std::string>& env, const std::string& name) {
  std::string found = "<unset>";
  int count = 0;
  for (const std::string& kv : env) {
    if (kv.rfind(name + "=", 0) == 0) found = kv.substr(name.size() + 1), ++count;
  }
  return count <= 1 ? found : "<duplicated>";
}

}  // namespace

TEST_CASE("launcher restart_argv appends --resume auto only where it can resume") {
  using V = std::vector<std::string>;
  const V args{"app", "--checkpoint-dir", "ck", "--resume", "old", "--epochs", "3"};
  CHECK(restart_argv(args, true) ==
        V{"app", "--checkpoint-dir", "ck", "--epochs", "3", "--resume", "auto"});
  CHECK(restart_argv(V{"app", "--checkpoint-dir=ck"}, true) ==
        V{"app", "--checkpoint-dir=ck", "--resume", "auto"});
  CHECK(restart_argv(args, false) == args);  // the program has no --resume
  CHECK(restart_argv(V{"app", "--epochs", "3"}, true) == V{"app", "--epochs", "3"});  // no dir
}

TEST_CASE("launcher strip_flags removes -n and its value in every spelling") {
  using V = std::vector<std::string>;
  const V drop{"-n", "--nproc"};
  CHECK(strip_flags(V{"-n", "2", "--epochs", "1"}, drop) == V{"--epochs", "1"});
  CHECK(strip_flags(V{"--epochs", "1", "-n2"}, drop) == V{"--epochs", "1"});
  CHECK(strip_flags(V{"--nproc=4", "--lr", "0.1"}, drop) == V{"--lr", "0.1"});
  CHECK(strip_flags(V{"-n=3", "x"}, drop) == V{"x"});
  // Similar but different flags stay; after "--" nothing is touched.
  CHECK(strip_flags(V{"--nprocs", "2", "-nx"}, V{"--nproc"}) == V{"--nprocs", "2", "-nx"});
  CHECK(strip_flags(V{"a", "--", "-n", "2"}, drop) == V{"a", "--", "-n", "2"});
  CHECK(strip_flags(V{"-n"}, drop).empty());  // a trailing flag without value
}

TEST_CASE("launcher pick_free_port returns a bindable nonzero port") {
  int port = pick_free_port();
  CHECK(port > 0);
  CHECK(port <= 65535);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);  // it was released
  ::close(fd);
}

TEST_CASE("launcher describe_wait_status and exit_code_of") {
  int exited = status_of_child([] { ::_exit(3); });
  CHECK(describe_wait_status(exited) == "exited with code 3");
  CHECK(exit_code_of(exited) == 3);
  int killed = status_of_child([] { ::kill(::getpid(), SIGKILL); });
  CHECK(describe_wait_status(killed) == "killed by signal 9 (SIGKILL)");
  CHECK(exit_code_of(killed) == 137);
  int segv = status_of_child([] {
    ::signal(SIGSEGV, SIG_DFL);
    ::raise(SIGSEGV);
  });
  CHECK(describe_wait_status(segv).find("signal 11 (SIGSEGV)") != std::string::npos);
}

TEST_CASE("launcher visible_gpus follows CUDA_VISIBLE_DEVICES like CUDA") {
  {
    ScopedEnv env("CUDA_VISIBLE_DEVICES", "3,1");
    CHECK(visible_gpus() == std::vector<std::string>{"3", "1"});
  }
  {
    ScopedEnv env("CUDA_VISIBLE_DEVICES", "0,bad,2");  // CUDA stops at the first invalid id
    CHECK(visible_gpus() == std::vector<std::string>{"0"});
  }
  {
    ScopedEnv env("CUDA_VISIBLE_DEVICES", "");
    CHECK(visible_gpus().empty());
  }
}

TEST_CASE("launcher device_plan maps local ranks to visible GPUs or cpu") {
  LaunchOptions o;
  o.nproc_per_node = 2;
  o.nnodes = 2;
  o.node_rank = 1;
  CHECK(device_plan(o, {"3", "1"}) ==
        std::vector<std::string>{"rank 2 -> cuda:0 (physical 3)", "rank 3 -> cuda:1 (physical 1)"});
  CHECK(device_plan(o, {}) == std::vector<std::string>{"rank 2 -> cpu", "rank 3 -> cpu"});
  o.nproc_per_node = 3;
  auto shared = device_plan(o, {"0", "1"});  // gloo may share GPUs round-robin
  CHECK(shared[2] == "rank 5 -> cuda:0 (physical 0)");
  o.backend = "nccl";
  ScopedEnv env("CUDA_VISIBLE_DEVICES", "0,1");
  CHECK_THROWS_WITH_AS(device_plan(o, {"0", "1"}),
                       doctest::Contains("3 ranks per node were asked for and 2 GPU(s)"),
                       minidl::Error);
  o.nproc_per_node = 2;
  CHECK(device_plan(o, {"0", "1"}).size() == 2);
}

TEST_CASE("launcher rank_env sets the torchrun contract and keeps OMP_NUM_THREADS") {
  LaunchOptions o;
  o.nproc_per_node = 4;
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_addr = "10.0.0.7";
  std::vector<std::string> base{"PATH=/bin", "RANK=99", "HOME=/root",
                                "TORCHELASTIC_USE_AGENT_STORE=True"};
  auto env = rank_env(base, o, 2, 29501, 3);
  CHECK(value_of(env, "TORCHELASTIC_USE_AGENT_STORE") == "False");  // minidl-run's own store
  CHECK(value_of(env, "RANK") == "6");
  CHECK(value_of(env, "WORLD_SIZE") == "8");
  CHECK(value_of(env, "LOCAL_RANK") == "2");
  CHECK(value_of(env, "LOCAL_WORLD_SIZE") == "4");
  CHECK(value_of(env, "MASTER_ADDR") == "10.0.0.7");
  CHECK(value_of(env, "MASTER_PORT") == "29501");
  CHECK(value_of(env, "MINIDL_LAUNCHER") == "1");
  CHECK(value_of(env, "OMP_NUM_THREADS") == "3");
  CHECK(value_of(env, "PATH") == "/bin");
  base.push_back("OMP_NUM_THREADS=7");
  CHECK(value_of(rank_env(base, o, 0, 1, 3), "OMP_NUM_THREADS") == "7");
  CHECK(value_of(rank_env({}, o, 0, 1, 0), "OMP_NUM_THREADS") == "1");
}

TEST_CASE("launcher LineSplitter handles newlines, progress CRs and chunk boundaries") {
  LineSplitter s(8);
  auto a = s.feed("ab\ncd", 5);
  REQUIRE(a.size() == 1);
  CHECK(a[0].text == "ab");
  CHECK_FALSE(a[0].cr);
  auto b = s.feed("e\r", 2);  // '\r' at a chunk end: wait to see if '\n' follows
  CHECK(b.empty());
  auto c = s.feed("\n 50%\r 60%\r", 11);  // "\r\n" is one plain line end
  REQUIRE(c.size() == 2);
  CHECK(c[0].text == "cde");
  CHECK_FALSE(c[0].cr);
  CHECK(c[1].text == " 50%");
  CHECK(c[1].cr);
  auto d = s.feed("x", 1);
  REQUIRE(d.size() == 1);
  CHECK(d[0].text == " 60%");
  CHECK(d[0].cr);
  auto e = s.feed("1234567890", 10);  // cut at max_line = 8
  REQUIRE(e.size() == 1);
  CHECK(e[0].text == "x1234567");
  LineSplitter::Line rest;
  REQUIRE(s.flush(rest));
  CHECK(rest.text == "890");
  CHECK_FALSE(s.flush(rest));
}

TEST_CASE("launcher LineTail keeps the last lines") {
  LineTail t(3);
  for (int i = 0; i < 10; ++i) t.push(std::to_string(i));
  CHECK(std::vector<std::string>(t.lines().begin(), t.lines().end()) ==
        std::vector<std::string>{"7", "8", "9"});
}

TEST_CASE("launcher launch returns the failed rank's code within the stop bound") {
  LaunchOptions o;
  o.nproc_per_node = 3;
  o.log_dir = "none";
  o.verbose = false;
  o.timeout_stop_s = 2;
  auto t0 = std::chrono::steady_clock::now();
  // Rank 1 exits 5; the others would sleep 30 s (SIGTERM stops them).
  int rc = launch(o, {"/bin/sh", "-c", "[ \"$RANK\" = 1 ] && exit 5; exec sleep 30"});
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(rc == 5);
  CHECK(s < 5.0);
  // A rank that ignores SIGTERM is SIGKILLed after the grace period.
  o.timeout_stop_s = 0.5;
  t0 = std::chrono::steady_clock::now();
  rc = launch(o, {"/bin/sh", "-c",
                  "if [ \"$RANK\" = 2 ]; then sleep 0.3; kill -9 $$; fi; trap '' TERM; "
                  "while :; do sleep 0.1; done"});
  s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(rc == 128 + SIGKILL);
  CHECK(s < 4.0);
  CHECK(launch(o, {"/bin/sh", "-c", "exit 0"}) == 0);
}

TEST_CASE("launcher per-rank logs: a temp dir removed on success unless --log-dir asks") {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/launcher_logs.XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const fs::path dir = tmpl;
  ScopedEnv tmpdir("TMPDIR", tmpl);
  ScopedEnv unset("MINIDL_LOG_DIR", nullptr);
  auto entries = [&] {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
    return out;
  };
  auto read = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  LaunchOptions o;
  o.nproc_per_node = 2;
  o.verbose = false;
  o.quiet_ranks = true;
  // Default: logs in $TMPDIR/minidl-run-XXXXXX, gone after a successful run (nothing in the cwd).
  CHECK(launch(o, {"/bin/sh", "-c", "echo out$RANK"}) == 0);
  CHECK(entries().empty());
  // A failed run keeps them.
  CHECK(launch(o, {"/bin/sh", "-c", "echo oops$RANK >&2; [ \"$RANK\" = 1 ] && exit 3; exit 0"}) ==
        3);
  auto kept = entries();
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].filename().string().rfind("minidl-run-", 0) == 0);
  CHECK(read(kept[0] / "rank1.err") == "oops1\n");
  fs::remove_all(kept[0]);
  {  // An error before any rank ran (nccl with more ranks than GPUs) leaves nothing either.
    ScopedEnv no_gpus("CUDA_VISIBLE_DEVICES", "");
    LaunchOptions nccl = o;
    nccl.backend = "nccl";
    CHECK_THROWS_AS(launch(nccl, {"/bin/sh", "-c", "exit 0"}), minidl::Error);
    CHECK(entries().empty());
  }
  // MINIDL_LOG_DIR (as --log-dir) keeps them after success; --log-dir none beats it.
  {
    ScopedEnv env("MINIDL_LOG_DIR", (dir / "mine").c_str());
    CHECK(launch(o, {"/bin/sh", "-c", "echo out$RANK"}) == 0);
    CHECK(read(dir / "mine" / "rank1.out") == "out1\n");
    fs::remove_all(dir / "mine");
    o.log_dir = "none";
    CHECK(launch(o, {"/bin/sh", "-c", "echo out$RANK"}) == 0);
    CHECK(entries().empty());
  }
  o.log_dir = (dir / "flag").string();
  CHECK(launch(o, {"/bin/sh", "-c", "echo out$RANK"}) == 0);
  CHECK(read(dir / "flag" / "rank0.out") == "out0\n");
  fs::remove_all(dir);
}

TEST_CASE("launcher launch rejects bad options before spawning") {
  LaunchOptions o;
  o.log_dir = "none";
  o.nproc_per_node = 0;
  CHECK_THROWS_WITH_AS(launch(o, {"/bin/true"}), doctest::Contains("--nproc-per-node"),
                       minidl::Error);
  o.nproc_per_node = 1;
  CHECK_THROWS_WITH_AS(launch(o, {}), doctest::Contains("no program"), minidl::Error);
  CHECK_THROWS_WITH_AS(launch(o, {"no-such-program-xyz"}), doctest::Contains("not found"),
                       minidl::Error);
  CHECK_THROWS_WITH_AS(launch(o, {"/etc/passwd"}), doctest::Contains("not an executable"),
                       minidl::Error);
  o.nnodes = 2;
  CHECK_THROWS_WITH_AS(launch(o, {"/bin/true"}), doctest::Contains("--master-port"), minidl::Error);
  o.master_port = 29400;
  o.node_rank = 2;
  CHECK_THROWS_WITH_AS(launch(o, {"/bin/true"}), doctest::Contains("--node-rank 2"), minidl::Error);
}

TEST_CASE("launcher self_launch re-executes this binary once per rank") {
  if (launched_by_launcher()) {  // this process is one of the ranks: leave a mark and stop
    const char* dir = std::getenv("LAUNCHER_SELF_TEST_DIR");
    REQUIRE(dir != nullptr);
    std::ofstream(std::string(dir) + "/rank" + std::getenv("RANK")) << std::getenv("WORLD_SIZE");
    return;
  }
  char tmpl[] = "/tmp/launcher_self.XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  ScopedEnv env("LAUNCHER_SELF_TEST_DIR", dir.c_str());
  std::string a0 = "minidl_tests", a1 = "-n", a2 = "2", a3 = "-tc=launcher self_launch*";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), nullptr};
  LaunchOptions o;
  o.log_dir = "none";
  o.verbose = false;
  o.quiet_ranks = true;
  CHECK(self_launch(2, 4, argv, {"-n"}, o) == 0);
  for (int r = 0; r < 2; ++r) {
    std::ifstream in(dir + "/rank" + std::to_string(r));
    std::string world;
    in >> world;
    CHECK_MESSAGE(world == "2", "rank ", r, " did not run with WORLD_SIZE=2");
  }
  std::filesystem::remove_all(dir);
  ScopedEnv launched("MINIDL_LAUNCHER", "1");  // nested launches are refused
  CHECK_THROWS_WITH_AS(self_launch(2, 4, argv, {"-n"}, o), doctest::Contains("already running"),
                       minidl::Error);
}

TEST_CASE("launcher failure summary repeats a heartbeat diagnosis from another rank") {
  char path[] = "/tmp/launcher_diag.XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const int saved = ::dup(2);  // the summary goes to stderr: capture it
  ::dup2(fd, 2);
  LaunchOptions o;
  o.nproc_per_node = 2;
  o.log_dir = "none";
  o.verbose = false;
  o.timeout_stop_s = 1;
  // Rank 0 names a silent peer and keeps running; rank 1 fails first (its stderr is empty).
  int rc = launch(o, {"/bin/sh", "-c",
                      "if [ \"$RANK\" = 0 ]; then echo 'minidl: rank 0: no heartbeat for 5 s from "
                      "rank 1 (10.9.9.9): unreachable (link down?), hung or dead' >&2; exec sleep "
                      "30; fi; sleep 0.5; exit 3"});
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fd);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  CHECK(rc == 3);
  CHECK_MESSAGE(text.find("rank 1 (pid") != std::string::npos, text);
  CHECK_MESSAGE(text.find("heartbeat diagnosis: [rank 0] minidl: rank 0: no heartbeat for 5 s "
                          "from rank 1 (10.9.9.9)") != std::string::npos,
                text);
}
