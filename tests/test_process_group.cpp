// ProcessGroup (gloo) across forked processes: every collective on 2 and 3 ranks and several
// dtypes, each ReduceOp, uneven allgather, async ordering and sequence numbers, and the failure
// paths: a skipped collective (bounded timeout), a killed peer, debug-mode mismatches, teardown.
#include <doctest/doctest.h>

#include <cmath>

#include "dist_test_util.h"
#include "parallel/distributed.h"
#include "parallel/process_group/process_group.h"
#include "pg_test_util.h"
#include "autograd/ops.h"
#include "skip.h"

using namespace minidl;
using namespace minidl::dist;
using namespace pgtest;
using disttest::contains;

#if MINIDL_WITH_GLOO
namespace {

using StorePtr = std::shared_ptr<Store>;

std::shared_ptr<ProcessGroup> gloo_group(const StorePtr& store, int rank, int world,
                                         std::chrono::milliseconds timeout = 3000ms,
                                         bool debug = false) {
  return make_process_group("gloo", store, rank, world,
                            ProcessGroupOptions{.timeout = timeout, .debug = debug});
}

void require_ok(const std::vector<RankReport>& reports) {
  for (size_t r = 0; r < reports.size(); ++r)
    CHECK_MESSAGE(reports[r].text == "OK", "rank ", r, ": ", reports[r].text);
}

// Rank r holds x_i = (r + 1) * (i - 3) for i in [0, n): negatives exercise floor division.
double value(int r, int64_t i) {
  return double(r + 1) * double(i - 3);
}

double expected(ReduceOp op, int world, int64_t i, bool integral) {
  double sum = 0, mx = -1e300, mn = 1e300;
  for (int r = 0; r < world; ++r) {
    sum += value(r, i);
    mx = std::max(mx, value(r, i));
    mn = std::min(mn, value(r, i));
  }
  switch (op) {
    case ReduceOp::sum:
      return sum;
    case ReduceOp::avg:
      return integral ? std::floor(sum / world) : sum / world;
    case ReduceOp::max:
      return mx;
    case ReduceOp::min:
      return mn;
  }
  return 0;
}

Tensor rank_values(int r, int64_t n, DType dtype) {
  Tensor t = empty({n}, kFloat64);
  for (int64_t i = 0; i < n; ++i) t.data_ptr<double>()[i] = value(r, i);
  return t.to(dtype);
}

std::string check_allreduce(ProcessGroup& pg, DType dtype) {
  Checker c;
  const int64_t n = 11;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
    Tensor t = rank_values(pg.rank(), n, dtype);
    pg.allreduce(t, op)->wait();
    for (int64_t i = 0; i < n; ++i) {
      const double want = expected(op, pg.size(), i, is_integral(dtype));
      const double tol =
          is_floating(dtype) ? 1e-6 + 1e-2 * std::abs(want) * (itemsize(dtype) == 2) : 0;
      c.check(std::abs(t.at({i}) - want) <= tol,
              std::string(dtype_name(dtype)) + " " + reduce_op_name(op) + "[" + std::to_string(i) +
                  "] = " + std::to_string(t.at({i})) + ", want " + std::to_string(want));
    }
  }
  return c.str();
}

}  // namespace

TEST_CASE("process_group: allreduce sum, avg, max, min on 2 and 3 ranks for each dtype") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    require_ok(run_ranks(world, [world](int rank, StorePtr store) {
      auto pg = gloo_group(store, rank, world);
      std::string out;
      for (DType d : {kFloat32, kFloat64, kInt64, kInt32, kFloat16, kBFloat16})
        out += check_allreduce(*pg, d);
      // u8 (non-negative values only)
      Tensor u = full({5}, rank + 1, kUInt8);
      pg->allreduce(u, ReduceOp::sum)->wait();
      if (u.at({4}) != world * (world + 1) / 2) out += "u8 sum wrong; ";
      return out;
    }));
  }
}

TEST_CASE("process_group: broadcast from root 1, uneven allgather, gather, reduce_scatter") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    require_ok(run_ranks(world, [world](int rank, StorePtr store) {
      auto pg = gloo_group(store, rank, world);
      Checker c;
      for (DType d : {kFloat32, kFloat64, kInt64}) {
        const std::string dn(dtype_name(d));
        // broadcast: everyone ends with root 1's values
        Tensor b = rank_values(rank, 7, d).reshape({7, 1});
        pg->broadcast(b, 1)->wait();
        for (int64_t i = 0; i < 7; ++i)
          c.check(b.at({i, 0}) == value(1, i), dn + " broadcast[" + std::to_string(i) + "]");
        // allgather with rank r contributing r + 1 rows of 2
        Tensor in = full({rank + 1, 2}, 10 * rank + 1, d);
        std::vector<Tensor> outs;
        for (int r = 0; r < world; ++r) outs.push_back(full({r + 1, 2}, -1, d));
        pg->allgather(outs, in)->wait();
        for (int r = 0; r < world; ++r)
          c.check(
              outs[size_t(r)].at({r, 1}) == 10 * r + 1 && outs[size_t(r)].at({0, 0}) == 10 * r + 1,
              dn + " allgather from rank " + std::to_string(r));
        // gather to root 0 (equal sizes)
        Tensor g = full({3}, rank + 5, d);
        std::vector<Tensor> gouts;
        if (rank == 0)
          for (int r = 0; r < world; ++r) gouts.push_back(zeros({3}, d));
        pg->gather(gouts, g, 0)->wait();
        for (int r = 0; r < int(gouts.size()); ++r)
          c.check(gouts[size_t(r)].at({2}) == r + 5, dn + " gather from rank " + std::to_string(r));
        // reduce_scatter: input j of rank r is (r + 1) * (j + 1); rank j gets sum_r of that
        std::vector<Tensor> ins;
        for (int j = 0; j < world; ++j) ins.push_back(full({2, 2}, (rank + 1) * (j + 1), d));
        Tensor rs = zeros({2, 2}, d);
        pg->reduce_scatter(rs, ins, ReduceOp::sum)->wait();
        c.check(rs.at({1, 1}) == (rank + 1) * world * (world + 1) / 2, dn + " reduce_scatter");
        // max and avg: rank j gets max_r / mean_r of (r + 1) * (j + 1) (integers: floor)
        pg->reduce_scatter(rs, ins, ReduceOp::max)->wait();
        c.check(rs.at({0, 1}) == world * (rank + 1), dn + " reduce_scatter max");
        pg->reduce_scatter(rs, ins, ReduceOp::avg)->wait();
        const double mean = d == kInt64 ? double((rank + 1) * (world + 1) / 2)  // floor
                                        : (rank + 1) * (world + 1) / 2.0;
        c.check(rs.at({1, 0}) == mean, dn + " reduce_scatter avg");
      }
      {  // outputs / inputs back to back in one buffer (FSDP's): written and read in place
        Tensor buf = full({3 * world}, -1.0, kFloat32);
        std::vector<Tensor> outs, ins;
        for (int r = 0; r < world; ++r) outs.push_back(buf.narrow(0, 3 * r, 3));
        pg->allgather(outs, full({3}, rank + 1.0, kFloat32))->wait();
        for (int r = 0; r < world; ++r)
          c.check(buf.at({3 * r + 2}) == r + 1.0,
                  "back-to-back allgather from rank " + std::to_string(r));
        for (int r = 0; r < world; ++r) ins.push_back(buf.narrow(0, 3 * r, 3));
        Tensor rs = zeros({3}, kFloat32);
        pg->reduce_scatter(rs, ins, ReduceOp::sum)->wait();  // every rank holds buf: world * (j+1)
        c.check(rs.at({1}) == world * (rank + 1.0), "back-to-back reduce_scatter");
      }
      {  // bf16 pieces travel as bf16 and are summed in f32: 1 + j/64 stays exact
        std::vector<Tensor> ins;
        for (int j = 0; j < world; ++j) ins.push_back(full({5}, 1.0 + j / 64.0, kBFloat16));
        Tensor rs = zeros({5}, kBFloat16);
        pg->reduce_scatter(rs, ins, ReduceOp::sum)->wait();
        c.check(rs.at({4}) == world * (1.0 + rank / 64.0), "bf16 reduce_scatter");
      }
      pg->barrier()->wait();
      return c.str();
    }));
  }
}

TEST_CASE("process_group: async allreduces finish in issue order with sequence numbers") {
  require_ok(run_ranks(2, [](int rank, StorePtr store) {
    auto pg = gloo_group(store, rank, 2);
    Checker c;
    c.check(pg->sequence_number() == 0 && pg->backend() == "gloo", "fresh group");
    std::vector<Tensor> ts;
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 6; ++k) {
      ts.push_back(full({1 << 16}, k + rank, kFloat32));
      works.push_back(pg->allreduce(ts.back()));
      c.check(works.back()->sequence_number() == uint64_t(k + 1), "work sequence number");
    }
    c.check(pg->sequence_number() == 6, "group sequence number");
    for (int k = 0; k < 6; ++k) {
      works[size_t(k)]->wait();
      c.check(works[size_t(k)]->is_completed(), "completed after wait");
      c.check(ts[size_t(k)].at({12345}) == 2 * k + 1, "async result " + std::to_string(k));
    }
    return c.str();
  }));
}

TEST_CASE("process_group: a skipped collective fails within its timeout naming op and seq") {
  auto reports = run_ranks(2, [](int rank, StorePtr store) {
    auto pg = gloo_group(store, rank, 2, 1000ms);
    Checker c;
    Tensor t = ones({4});
    pg->allreduce(t)->wait();  // #1 on both
    if (rank == 1) {           // skips #2, waits until rank 0 has seen its error
      store->wait({"rank0_done"}, 5000ms);
      return c.str();
    }
    disttest::Failure f = disttest::expect_error([&] { pg->allreduce(t)->wait(); });
    store->set("rank0_done", "1");
    c.check(contains(f.message, "gloo allreduce #2 (rank 0 of 2) failed: timed out after 1 s"),
            "message: " + f.message);
    c.check(f.seconds >= 0.9 && f.seconds < 2.0, "took " + std::to_string(f.seconds) + " s");
    // the group is unusable afterwards and says why, at once
    disttest::Failure g = disttest::expect_error([&] { pg->barrier()->wait(); });
    c.check(contains(g.message, "gloo barrier #3") &&
                contains(g.message,
                         "after gloo allreduce #2 (rank 0 of 2) failed: timed out after 1 s"),
            "follow-up: " + g.message);
    c.check(g.seconds < 0.5, "follow-up took " + std::to_string(g.seconds) + " s");
    return c.str();
  });
  require_ok(reports);
}

TEST_CASE("process_group: a killed peer makes the collective fail instead of hanging") {
  auto reports = run_ranks(2, [](int rank, StorePtr store) {
    auto pg = gloo_group(store, rank, 2, 3000ms);
    Tensor t = ones({1 << 10});
    pg->allreduce(t)->wait();
    if (rank == 1) ::raise(SIGKILL);
    Checker c;
    disttest::Failure f = disttest::expect_error([&] { pg->allreduce(t)->wait(); });
    c.check(contains(f.message, "gloo allreduce #2 (rank 0 of 2) failed"), f.message);
    c.check(f.seconds < 4.0, "took " + std::to_string(f.seconds) + " s");
    return c.str();
  });
  CHECK_MESSAGE(reports[0].text == "OK", reports[0].text);
  CHECK(reports[1].exit_code == 128 + SIGKILL);
}

TEST_CASE("process_group: debug mode names both sides of a mismatched collective") {
  auto reports = run_ranks(2, [](int rank, StorePtr store) {
    if (rank == 1) ::setenv("MINIDL_DIST_DEBUG", "1", 1);  // the environment switch
    auto pg = gloo_group(store, rank, 2, 2000ms, /*debug=*/rank == 0);
    Tensor ok = ones({8});
    pg->allreduce(ok)->wait();  // #1 matches
    Tensor t = ones({rank == 0 ? 100 : 90});
    disttest::Failure f = disttest::expect_error([&] { pg->allreduce(t)->wait(); });
    Checker c;
    c.check(contains(f.message,
                     "rank 0 called allreduce(f32, 100) but rank 1 called "
                     "allreduce(f32, 90) at collective #2"),
            f.message);
    c.check(contains(f.message, "rank " + std::to_string(rank) + " of 2"), f.message);
    return c.str();
  });
  require_ok(reports);
}

TEST_CASE("process_group: destroying a group fails its queued work and does not hang") {
  require_ok(run_ranks(2, [](int rank, StorePtr store) {
    auto pg = gloo_group(store, rank, 2, 1000ms);
    Checker c;
    std::vector<std::shared_ptr<Work>> works;
    Tensor t = ones({16});
    if (rank == 0)  // rank 1 never joins: the first blocks until its timeout
      for (int k = 0; k < 4; ++k) works.push_back(pg->allreduce(t));
    std::this_thread::sleep_for(200ms);  // the first one is running by now
    if (rank == 1) {                     // keeps its end open until rank 0 is done
      store->wait({"rank0_done"}, 5000ms);
      return c.str();
    }
    auto t0 = disttest::Clock::now();
    pg.reset();
    c.check(disttest::seconds_since(t0) < 2.0, "destroy took too long");
    for (size_t k = 0; k < works.size(); ++k) {
      c.check(works[k]->is_completed(), "work not completed after destroy");
      disttest::Failure f = disttest::expect_error([&] { works[k]->wait(); });
      c.check(k == 0 ? contains(f.message, "timed out") : contains(f.message, "destroyed"),
              f.message);
    }
    store->set("rank0_done", "1");
    return c.str();
  }));
}

TEST_CASE("process_group: bad arguments are named before anything is sent") {
  CHECK(contains(
      disttest::expect_error([] {
        make_process_group(
            "mpi", std::make_shared<TcpStore>(TcpStoreOptions{.port = 0, .is_master = true}), 0, 1);
      }).message,
      "unknown backend 'mpi'"));
  if (!cuda_is_available()) {  // no GPU (or no NCCL build): a clear error, not a crash
    auto store = std::make_shared<TcpStore>(TcpStoreOptions{.port = 0, .is_master = true});
    const std::string m =
        disttest::expect_error([&] { make_process_group("nccl", store, 0, 1); }).message;
    CHECK_MESSAGE((contains(m, "built without CUDA/NCCL") || contains(m, "CUDA call")), m);
  }
  require_ok(run_ranks(1, [](int rank, StorePtr store) {
    auto pg = gloo_group(store, rank, 1);
    Checker c;
    Tensor nc = zeros({4, 3}).t();
    auto msg = [&](const std::function<void()>& fn) { return disttest::expect_error(fn).message; };
    c.check(contains(msg([&] { pg->allreduce(nc); }), "must be contiguous"), "contiguous");
    Tensor t = ones({3});
    c.check(contains(msg([&] { pg->broadcast(t, 1); }), "root 1 is not a rank"), "root");
    std::vector<Tensor> two{ones({3}), ones({3})};
    c.check(contains(msg([&] { pg->allgather(two, t); }), "expected 1 output tensors"), "outs");
    Tensor b = ones({2}, kBool);
    c.check(contains(msg([&] { pg->allreduce(b); }), "bool tensors are not supported"), "bool");
    pg->allreduce(t, ReduceOp::avg)->wait();  // a group of one works
    c.check(t.at({2}) == 1.0, "world-1 allreduce");
    return c.str();
  }));
}
#else
TEST_CASE("process_group: the gloo process group cases need Gloo") {
  MINIDL_SKIP(testutil::kNoGloo);
}
#endif  // MINIDL_WITH_GLOO
