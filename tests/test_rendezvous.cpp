// Rendezvous: tcp:// with ranks in threads, env:// with a forked rank, the launcher
// variables (torchrun, OpenMPI, Slurm), duplicate / missing ranks and world-size mismatches
// (measured against their bounds), file:// cleanup and stale files, malformed init methods.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <fstream>

#include "dist_test_util.h"
#include "parallel/rendezvous/rendezvous.h"
#include "parallel/store/tcp_store.h"
#include "skip.h"

#if MINIDL_WITH_GLOO
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "parallel/gloo/gloo_store.h"
#endif

using namespace minidl::dist;
using namespace disttest;
using namespace std::chrono_literals;

namespace {

// Clears every launcher variable for the scope of the guard.
void clear_launch_env(EnvGuard& g) {
  for (const char* v : {"RANK",
                        "WORLD_SIZE",
                        "LOCAL_RANK",
                        "LOCAL_WORLD_SIZE",
                        "MASTER_ADDR",
                        "MASTER_PORT",
                        "OMPI_COMM_WORLD_RANK",
                        "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_LOCAL_RANK",
                        "OMPI_COMM_WORLD_LOCAL_SIZE",
                        "SLURM_PROCID",
                        "SLURM_NTASKS",
                        "SLURM_LOCALID",
                        "SLURM_NTASKS_PER_NODE",
                        "SLURM_STEP_ID",
                        "SLURM_STEPID",
                        "SLURM_NODEID",
                        "SLURM_JOB_ID",
                        "SLURM_JOBID",
                        "SLURM_STEP_NODELIST",
                        "SLURM_JOB_NODELIST",
                        "SLURM_NODELIST",
                        "SLURM_STEP_TASKS_PER_NODE",
                        "SLURM_TASKS_PER_NODE",
                        "PMI_RANK",
                        "PMI_SIZE",
                        "MPI_LOCALRANKID",
                        "MPI_LOCALNRANKS"})
    g.set(v, std::nullopt);
}

// Runs rendezvous for each rank in its own thread; returns the info or the error per rank.
struct Outcome {
  std::optional<RendezvousInfo> info;
  std::string error;
  double seconds = 0;
};
std::vector<Outcome> rendezvous_threads(const std::string& url, const std::vector<int>& ranks,
                                        const std::vector<int>& world_sizes,
                                        std::chrono::milliseconds timeout) {
  std::vector<Outcome> out(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i)
    threads.emplace_back([&, i] {
      auto t0 = Clock::now();
      try {
        out[i].info =
            rendezvous(url, {.rank = ranks[i], .world_size = world_sizes[i], .timeout = timeout});
      } catch (const minidl::Error& e) {
        out[i].error = e.what();
      }
      out[i].seconds = seconds_since(t0);
    });
  for (auto& t : threads) t.join();
  return out;
}

std::string temp_path(const std::string& tag) {
  static int counter = 0;
  return "/tmp/minidl_rdzv_" + std::to_string(::getpid()) + "_" + tag + "_" +
         std::to_string(counter++);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

}  // namespace

TEST_CASE("rendezvous: tcp:// joins 3 ranks and shares one store") {
  const std::string url = "tcp://127.0.0.1:" + std::to_string(free_port());
  auto out = rendezvous_threads(url, {2, 0, 1}, {3, 3, 3}, 3000ms);
  for (const Outcome& o : out) {
    REQUIRE_MESSAGE(o.info.has_value(), o.error);
    CHECK(o.info->world_size == 3);
    CHECK(o.info->local_world_size == 3);  // one host
    CHECK(o.info->local_rank == o.info->rank);
    CHECK(o.info->master_addr == "127.0.0.1");
  }
  CHECK(out[0].info->rank == 2);
  CHECK(out[1].info->rank == 0);
  out[0].info->store->set("from2", "x");
  CHECK(out[2].info->store->get_string("from2") == "x");
  // rank 0's store (the server) is destroyed last here
  out[0].info->store.reset();
  out[2].info->store.reset();
}

TEST_CASE("rendezvous: a duplicate rank fails at once on every rank") {
  const std::string url = "tcp://127.0.0.1:" + std::to_string(free_port());
  auto out = rendezvous_threads(url, {0, 1, 1}, {3, 3, 3}, 2000ms);
  int twice = 0;
  for (const Outcome& o : out) {
    CHECK_FALSE(o.info.has_value());
    CHECK(contains(o.error, "rank 1 joined twice"));
    twice += contains(o.error, "failed: rank 1 joined twice");
    MESSAGE("duplicate rank detected after ", o.seconds, " s: ", o.error);
    CHECK(o.seconds < 1.0);
  }
  CHECK(twice == 1);  // the duplicate itself; the others report "failed on another rank"
}

TEST_CASE("rendezvous: a missing rank times out with the list of missing ranks") {
  const std::string url = "tcp://127.0.0.1:" + std::to_string(free_port());
  auto out = rendezvous_threads(url, {0, 1}, {3, 3}, 1000ms);
  for (const Outcome& o : out) {
    CHECK_FALSE(o.info.has_value());
    CHECK(contains(o.error, "timed out after 1 s"));
    CHECK(contains(o.error, "expected 3, joined 2, missing ranks [2]"));
    MESSAGE("missing-rank timeout 1 s fired after ", o.seconds, " s");
    CHECK(o.seconds >= 0.99);
    CHECK(o.seconds < 1.5);
  }
}

TEST_CASE("rendezvous: mismatched world sizes are named") {
  const std::string url = "tcp://127.0.0.1:" + std::to_string(free_port());
  auto out = rendezvous_threads(url, {0, 1}, {2, 3}, 2000ms);
  for (const Outcome& o : out) {
    CHECK_FALSE(o.info.has_value());
    CHECK_MESSAGE(contains(o.error, "world_size"), o.error);
    CHECK(o.seconds < 1.0);
  }
}

TEST_CASE("rendezvous: launcher variables from torchrun, OpenMPI and Slurm") {
  EnvGuard g;
  clear_launch_env(g);
  LaunchEnv e = read_launch_env();
  CHECK(e.source.empty());
  CHECK(e.rank == -1);
  g.set("OMPI_COMM_WORLD_RANK", "3");
  g.set("OMPI_COMM_WORLD_SIZE", "8");
  g.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  g.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  g.set("SLURM_PROCID", "5");
  e = read_launch_env();
  CHECK(e.source == "OpenMPI");
  CHECK((e.rank == 3 && e.world_size == 8 && e.local_rank == 1 && e.local_world_size == 2));
  g.set("OMPI_COMM_WORLD_RANK", std::nullopt);
  g.set("SLURM_NTASKS", "6");
  g.set("SLURM_LOCALID", "0");
  g.set("SLURM_STEP_ID", "0");  // a job step (srun), not the batch script
  e = read_launch_env();
  CHECK(e.source == "Slurm");
  CHECK((e.rank == 5 && e.world_size == 6 && e.local_rank == 0 && e.local_world_size == -1));
  g.set("RANK", "1");
  g.set("WORLD_SIZE", "2");
  g.set("LOCAL_RANK", "1");
  g.set("LOCAL_WORLD_SIZE", "2");
  g.set("MASTER_ADDR", "10.0.0.1");
  g.set("MASTER_PORT", "29500");
  e = read_launch_env();
  CHECK(e.source == "torchrun");  // RANK wins over the MPI / Slurm names
  CHECK((e.rank == 1 && e.world_size == 2 && e.local_rank == 1 && e.local_world_size == 2));
  CHECK((e.master_addr == "10.0.0.1" && e.master_port == 29500));
  g.set("RANK", "one");
  Failure f = expect_error([] { read_launch_env(); });
  CHECK(contains(f.message, "RANK='one' is not an integer"));
}

TEST_CASE("rendezvous: env:// across two processes, and its missing variables") {
  EnvGuard g;
  clear_launch_env(g);
  Failure f = expect_error([] { rendezvous("env://", 500ms); });
  CHECK(contains(f.message, "world size unknown"));
  g.set("RANK", "0");
  g.set("WORLD_SIZE", "2");
  f = expect_error([] { rendezvous("env://", 500ms); });
  CHECK(contains(f.message, "MASTER_ADDR and MASTER_PORT must be set"));
  g.set("MASTER_ADDR", "127.0.0.1");
  g.set("MASTER_PORT", std::to_string(free_port()));
  g.set("LOCAL_RANK", "0");
  g.set("LOCAL_WORLD_SIZE", "1");  // the launcher's word beats the host count
  // Rank 1 is forked before rank 0 hosts the store here: a process with threads must not
  // fork (ThreadSanitizer cannot follow the child's heartbeat thread); rank 1 retries its
  // connection until the store is up.
  const pid_t child = spawn_child([] {
    ::setenv("RANK", "1", 1);
    RendezvousInfo info = rendezvous("env://", 3000ms);
    info.store->set("child", std::to_string(info.rank) + "/" + std::to_string(info.world_size));
    return info.local_rank == 0 && info.store->get_string("parent") == "done";
  });
  RendezvousInfo info;
  std::string from_child;
  try {
    info = rendezvous("env://", 3000ms);
    from_child = info.store->get_string("child");
    info.store->set("parent", "done");
  } catch (const minidl::Error& e) {
    FAIL_CHECK("rank 0: " << e.what());
  }
  CHECK(reap_child(child, Clock::now() + 5000ms) == 0);  // rank 0's store is still up
  CHECK(info.rank == 0);
  CHECK(info.world_size == 2);
  CHECK(info.local_world_size == 1);  // the launcher's word beats the host count
  CHECK(from_child == "1/2");
}

TEST_CASE("rendezvous: file:// joins ranks and removes its file on success and failure") {
  const std::string path = temp_path("ok");
  auto out = rendezvous_threads("file://" + path, {1, 0}, {2, 2}, 3000ms);
  for (const Outcome& o : out) {
    REQUIRE_MESSAGE(o.info.has_value(), o.error);
    CHECK(o.info->world_size == 2);
  }
  CHECK(out[0].info->rank == 1);
  out[0].info->store->set("k", "v");
  CHECK(out[1].info->store->get_string("k") == "v");
  CHECK_FALSE(exists(path));  // rank 0 removed it once everyone joined
  // a failed rendezvous (rank 1 never comes) removes it too
  const std::string lonely = temp_path("fail");
  Failure f = expect_error(
      [&] { rendezvous("file://" + lonely, {.rank = 0, .world_size = 2, .timeout = 300ms}); });
  CHECK(contains(f.message, "missing ranks [1]"));
  CHECK_FALSE(exists(lonely));
}

TEST_CASE("rendezvous: a stale file:// file is reclaimed, a live one is named") {
  // a pid that is surely dead: a child that already exited and was reaped
  const int dead_pid = [] {
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    ::waitpid(pid, nullptr, 0);
    return int(pid);
  }();
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string record = std::string("minidl-rendezvous-v1\n") + host + "\n1\n";

  const std::string stale = temp_path("stale");
  write_file(stale, record + std::to_string(dead_pid) + "\n");
  // a non-zero rank does not connect to the dead job's address; it names the file
  Failure f = expect_error(
      [&] { rendezvous("file://" + stale, {.rank = 1, .world_size = 2, .timeout = 300ms}); });
  MESSAGE("stale file seen by rank 1 for ", f.seconds, " s: ", f.message);
  CHECK(contains(f.message, stale));
  CHECK(contains(f.message, "which is dead"));
  CHECK(f.seconds < 0.8);
  // rank 0 reclaims it and the rendezvous succeeds
  RendezvousInfo info =
      rendezvous("file://" + stale, {.rank = 0, .world_size = 1, .timeout = 1000ms});
  CHECK(info.world_size == 1);
  CHECK_FALSE(exists(stale));

  const std::string live = temp_path("live");
  write_file(live, record + std::to_string(::getpid()) + "\n");
  f = expect_error(
      [&] { rendezvous("file://" + live, {.rank = 0, .world_size = 1, .timeout = 1000ms}); });
  CHECK(contains(f.message, "rendezvous file " + live + " is in use by live pid"));
  CHECK(f.seconds < 0.5);
  CHECK(exists(live));  // another job's file is left alone
  ::unlink(live.c_str());

  const std::string junk = temp_path("junk");
  write_file(junk, "not a rendezvous file");
  f = expect_error(
      [&] { rendezvous("file://" + junk, {.rank = 0, .world_size = 1, .timeout = 1000ms}); });
  CHECK(contains(f.message, junk + " exists and is not a minidl rendezvous file"));
  ::unlink(junk.c_str());
}

TEST_CASE("rendezvous: malformed init methods and ranks are named") {
  EnvGuard g;
  clear_launch_env(g);
  auto msg = [](const std::string& url, int rank, int ws) {
    return expect_error(
               [&] { rendezvous(url, {.rank = rank, .world_size = ws, .timeout = 200ms}); })
        .message;
  };
  CHECK(contains(msg("127.0.0.1:1234", 0, 1), "must be env://, tcp://host:port or file:///path"));
  CHECK(contains(msg("udp://127.0.0.1:1234", 0, 1), "unknown scheme 'udp'"));
  CHECK(contains(msg("tcp://127.0.0.1", 0, 1), "needs host:port"));
  CHECK(contains(msg("tcp://127.0.0.1:99999", 0, 1), "bad host:port"));
  CHECK(contains(msg("tcp://127.0.0.1:1234", 2, 2), "rank 2 is out of range for world size 2"));
  CHECK(contains(msg("tcp://127.0.0.1:1234?world_size=2", -1, -1), "rank unknown"));
  CHECK(contains(msg("tcp://127.0.0.1:1234?rank=x&world_size=2", -1, -1),
                 "rank='x' is not an integer"));
  // query parameters work end to end
  auto info = rendezvous("tcp://127.0.0.1:0?rank=0&world_size=1", 1000ms);
  CHECK(info.master_port > 0);
  CHECK(info.rank == 0);
}

#if MINIDL_WITH_GLOO
TEST_CASE("rendezvous: gloo connects a full mesh through GlooStore and allreduces") {
  const std::string url = "tcp://127.0.0.1:" + std::to_string(free_port());
  constexpr int kWorld = 2, kCount = 1000;
  std::vector<std::vector<float>> results(kWorld);
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      try {
        RendezvousInfo info = rendezvous(url, {.rank = r, .world_size = kWorld, .timeout = 3000ms});
        GlooStore gstore(info.store);
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto device = gloo::transport::tcp::CreateDevice(attr);
        auto context = std::make_shared<gloo::rendezvous::Context>(info.rank, info.world_size);
        context->setTimeout(3000ms);
        context->connectFullMesh(gstore, device);
        std::vector<float> data(kCount);
        for (int i = 0; i < kCount; ++i) data[size_t(i)] = float((r + 1) * i) + 0.5f;
        gloo::AllreduceOptions opts(context);
        opts.setOutput(data.data(), data.size());
        opts.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        gloo::allreduce(opts);
        results[size_t(r)] = data;
        info.store->add("done", 1);  // keep rank 0's server up until both finished
        info.store->wait({"both"}, 3000ms);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  // the last one to finish releases both
  std::thread release([&] {
    TcpStore probe({.host = "127.0.0.1",
                    .port = std::stoi(url.substr(url.rfind(':') + 1)),
                    .timeout = 3000ms,
                    .rank = -1});
    while (probe.add("done", 0) < kWorld) std::this_thread::sleep_for(5ms);
    probe.set("both", "1");
  });
  for (auto& t : threads) t.join();
  release.join();
  for (int r = 0; r < kWorld; ++r) {
    REQUIRE_MESSAGE(errors[size_t(r)].empty(), errors[size_t(r)]);
    REQUIRE(results[size_t(r)].size() == size_t(kCount));
    for (int i = 0; i < kCount; i += 97)
      CHECK(results[size_t(r)][size_t(i)] == doctest::Approx(3.0 * i + 1.0));
  }
}

TEST_CASE("rendezvous: GlooStore forwards keys with a prefix and bounded waits") {
  auto store = std::make_shared<TcpStore>(
      TcpStoreOptions{.port = 0, .is_master = true, .timeout = 300ms, .rank = 0});
  GlooStore g(store, "pg0/");
  g.set("k", {'a', 'b'});
  CHECK(store->get_string("pg0/k") == "ab");
  CHECK(g.get("k") == std::vector<char>{'a', 'b'});
  g.wait({"k"}, gloo::kNoTimeout);
  Failure f = expect_error([&] { g.wait({"k", "absent"}, std::chrono::milliseconds(100)); });
  CHECK(contains(f.message, "missing keys ['pg0/absent']"));
  CHECK(f.seconds < 0.3);
  f = expect_error([&] { g.get("absent"); });  // the wrapped store's 0.3 s timeout
  CHECK(contains(f.message, "get('pg0/absent') timed out after 0.3 s (rank 0)"));
}
#else
TEST_CASE("rendezvous: the Gloo mesh cases need Gloo") {
  MINIDL_SKIP(testutil::kNoGloo);
}
#endif
