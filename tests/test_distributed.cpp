// torch.distributed-style helpers: init_process_group over env:// in forked ranks, rank
// queries, weighted all_reduce_mean, gather_for_metrics dropping sampler padding, rank-0
// printing and save_on_main, DDP step counts in the default store, and the single-process
// fallbacks and rank_seed.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "dist_test_util.h"
#include "parallel/ddp/ddp.h"
#include "parallel/distributed.h"
#include "parallel_test_models.h"
#include "pg_test_util.h"
#include "autograd/ops.h"
#include "skip.h"

using namespace minidl;
using namespace minidl::dist;
using namespace pgtest;
using disttest::contains;

namespace {

using StorePtr = std::shared_ptr<Store>;

void require_ok(const std::vector<RankReport>& reports) {
  for (size_t r = 0; r < reports.size(); ++r)
    CHECK_MESSAGE(reports[r].text == "OK", "rank ", r, ": ", reports[r].text);
}

// Runs fn in `world` env://-initialised ranks (gloo), destroying the group afterwards.
std::vector<RankReport> run_initialised(int world, const std::function<std::string(int)>& fn) {
  const std::string port = std::to_string(disttest::free_port());
  return run_ranks(world, [&](int rank, StorePtr) {
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", port.c_str(), 1);
    ::setenv("RANK", std::to_string(rank).c_str(), 1);
    ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
    ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
    ::setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
    init_process_group({.backend = "gloo", .timeout = 3000ms});
    std::string out = fn(rank);
    barrier();  // rank 0 hosts the store: keep it up until everyone is done
    destroy_process_group();
    return out;
  });
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What fn prints on stdout (fd 1 redirected to a temporary file).
std::string capture_stdout(const std::function<void()>& fn) {
  const std::string path = "/tmp/minidl_stdout_" + std::to_string(::getpid());
  std::fflush(stdout);
  const int saved = ::dup(1);
  FILE* f = std::fopen(path.c_str(), "w");
  ::dup2(::fileno(f), 1);
  fn();
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
  std::fclose(f);
  std::string out = read_file(path);
  std::remove(path.c_str());
  return out;
}

}  // namespace

#if MINIDL_WITH_GLOO
TEST_CASE("distributed: print_main and printf_main print on rank 0 only") {
  require_ok(run_initialised(2, [](int rank) {
    const std::string out = capture_stdout([] {
      print_main("epoch 1");
      printf_main("loss=%.2f on %d ranks\n", 0.25, get_world_size());
    });
    Checker c;
    c.check(out == (rank == 0 ? "epoch 1\nloss=0.25 on 2 ranks\n" : ""), "printed '" + out + "'");
    return c.str();
  }));
}

TEST_CASE("distributed: save_on_main writes once and is a barrier") {
  const std::string path = "/tmp/minidl_save_on_main_" + std::to_string(::getpid());
  std::remove(path.c_str());
  require_ok(run_initialised(2, [&](int rank) {
    save_on_main([&] {
      std::this_thread::sleep_for(200ms);  // a slow write: the other rank must wait for it
      std::ofstream(path, std::ios::app) << "checkpoint from rank " << get_rank() << "\n";
    });
    Checker c;
    const std::string content = read_file(path);  // complete on every rank once it returns
    c.check(content == "checkpoint from rank 0\n",
            "rank " + std::to_string(rank) + " sees '" + content + "'");
    return c.str();
  }));
  CHECK(read_file(path) == "checkpoint from rank 0\n");  // one write in all
  std::remove(path.c_str());
}

TEST_CASE("distributed: a failing save_on_main throws on every rank") {
  require_ok(run_initialised(2, [](int rank) {
    int writes = 0;
    const auto failure = disttest::expect_error([&] {
      save_on_main([&] {
        ++writes;
        MINIDL_FAIL("cannot open /nonexistent/ckpt.bin for writing");
      });
    });
    Checker c;
    c.check(writes == (rank == 0 ? 1 : 0), "writes " + std::to_string(writes));
    c.check(contains(failure.message, "cannot open /nonexistent/ckpt.bin for writing"),
            "message '" + failure.message + "'");
    if (rank == 1)
      c.check(contains(failure.message, "rank 0 failed"), "names rank 0: " + failure.message);
    c.check(all_reduce_sum(1.0) == 2.0, "the group still works afterwards");
    return c.str();
  }));
}

TEST_CASE("distributed: DDP on the default group publishes step counts in its store") {
  require_ok(run_initialised(2, [](int rank) {
    manual_seed(3);
    {
      DistributedDataParallel ddp(std::make_shared<ptest::SmallNet>());
      for (int s = 0; s < 4; ++s)
        ptest::loss_of(ddp, ptest::batch_x(s, 4), ptest::batch_y(s, 4)).backward();
    }  // the destructor flushes the last count
    barrier();
    Store& store = *rendezvous_info().store;
    Checker c;
    for (int r = 0; r < 2; ++r) {
      const std::string key = "ddp/1/steps/" + std::to_string(r);
      c.check(store.check({key}) && store.get_string(key) == "4",
              "rank " + std::to_string(rank) + " reads " + key);
    }
    return c.str();
  }));
}

TEST_CASE("distributed: init_process_group over env:// with rank queries and reductions") {
  require_ok(run_initialised(3, [](int rank) {
    Checker c;
    c.check(is_initialized() && get_rank() == rank && get_world_size() == 3, "rank/world");
    c.check(get_local_rank() == rank, "local rank");
    c.check(is_main_process() == (rank == 0), "main process");
    c.check(default_group().backend() == "gloo", "backend");
    c.check(rendezvous_info().world_size == 3, "rendezvous info");
    c.check(
        contains(disttest::expect_error([] { init_process_group({.backend = "gloo"}); }).message,
                 "already initialised"),
        "double init");
    // weighted mean: rank r reports mean r+1 over r+1 samples -> (1 + 4 + 9) / 6
    const double mean = all_reduce_mean(rank + 1.0, rank + 1.0);
    c.check(std::abs(mean - 14.0 / 6.0) < 1e-12, "weighted mean " + std::to_string(mean));
    c.check(std::abs(all_reduce_mean(rank * 2.0) - 2.0) < 1e-12, "unweighted mean");
    c.check(all_reduce_sum(rank + 0.5) == 4.5, "sum");
    return c.str();
  }));
}

TEST_CASE("distributed: gather_for_metrics restores dataset order and drops padding") {
  require_ok(run_initialised(3, [](int rank) {
    // DistributedSampler(10 samples, 3 ranks, shuffle=false): 4 per rank, rank r's i-th sample
    // is index (3i + r) % 10 (indices 10 and 11 wrap around as padding).
    Tensor mine = empty({4, 2}, kFloat32);
    for (int64_t i = 0; i < 4; ++i) {
      const int64_t idx = (3 * i + rank) % 10;
      mine.data_ptr<float>()[2 * i] = float(idx);
      mine.data_ptr<float>()[2 * i + 1] = float(100 + idx);
    }
    Tensor all = gather_for_metrics(mine, 10);
    Checker c;
    c.check(all.shape() == Shape{10, 2}, "shape " + all.shape_str());
    for (int64_t p = 0; p < 10 && all.numel() == 20; ++p)
      c.check(all.at({p, 0}) == double(p) && all.at({p, 1}) == double(100 + p),
              "row " + std::to_string(p));
    // uneven inputs (last batch short on rank 2): 3+3+2 samples for 8 indices
    Tensor part = full({rank == 2 ? 2 : 3}, rank, kInt64);
    Tensor g = gather_for_metrics(part, 8);
    for (int64_t p = 0; p < 8 && g.numel() == 8; ++p)
      c.check(g.at({p}) == double(p % 3), "uneven row " + std::to_string(p));
    Tensor flags = gather_for_metrics(eq(part, 1), 8);  // bool: rows where rank 1 put them
    c.check(flags.dtype() == kBool && flags.numel() == 8, "bool gather " + flags.shape_str());
    for (int64_t p = 0; p < 8 && flags.numel() == 8; ++p)
      c.check(flags.at({p}) == double(p % 3 == 1), "bool row " + std::to_string(p));
    c.check(contains(disttest::expect_error([&] { gather_for_metrics(part, 9); }).message,
                     "dataset index 8 should be sample 2 of rank 2"),
            "too short");
    return c.str();
  }));
}
#else
TEST_CASE("distributed: the multi-process cases need Gloo") {
  MINIDL_SKIP(testutil::kNoGloo);
}
#endif

TEST_CASE("distributed: single-process fallbacks and rank seeds") {
  REQUIRE_FALSE(is_initialized());
  CHECK(get_rank() == 0);
  CHECK(get_world_size() == 1);
  CHECK(is_main_process());
  barrier();  // no-op
  CHECK(all_reduce_mean(2.5, 4) == 2.5);
  CHECK(all_reduce_sum(3.0) == 3.0);
  Tensor t = arange(12, kFloat32).reshape({6, 2});
  Tensor g = gather_for_metrics(t, 4);
  CHECK(g.shape() == Shape{4, 2});
  CHECK(g.at({3, 1}) == 7.0);
  CHECK(contains(disttest::expect_error([] { default_group(); }).message, "not initialised"));
  destroy_process_group();  // harmless without a group
  std::set<uint64_t> seeds;
  for (int rank = 0; rank < 16; ++rank)
    for (int worker = 0; worker < 4; ++worker) seeds.insert(rank_seed(42, rank, worker));
  CHECK(seeds.size() == 64);
  CHECK(rank_seed(42, 3, 1) == rank_seed(42, 3, 1));
  CHECK(rank_seed(42, 0) != rank_seed(43, 0));
}
