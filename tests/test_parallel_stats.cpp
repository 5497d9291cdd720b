// DataParallel::stats() and DistributedDataParallel::stats() (the numbers minidl-compare
// reports): counts, timings that add up within the measured wall time, bucket bytes that match
// the parameters, no_sync steps left out, world size 1, and reset_stats().
#include <doctest/doctest.h>

#include <chrono>
#include <numeric>

#include "ddp_test_util.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/ddp/ddp.h"
#include "parallel_test_models.h"
#include "skip.h"

using namespace minidl;
using namespace ptest;
using dist::DataParallel;
using dist::DataParallelStats;

namespace {

// x:[B,16] -> Linear(16,32) -> ReLU -> Linear(32,4)
std::shared_ptr<nn::Sequential> small_mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(16, 32), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(32, 4)});
}

double dp_seconds(const DataParallelStats& s) {
  return s.replicate_seconds + s.scatter_seconds + s.parallel_apply_seconds + s.gather_seconds +
         s.reduce_seconds;
}

}  // namespace

TEST_CASE("data_parallel: stats count steps and time every phase") {
  manual_seed(3);
  auto src = small_mlp();
  DataParallel dp(src, {kCPU, kCPU});
  DataParallelStats s = dp.stats();
  CHECK(s.forwards == 0);
  CHECK(dp_seconds(s) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < 3; ++step) {
    Tensor x = testutil::random_tensor({8, 16}, kFloat32, 10 + uint64_t(step));
    Tensor y = testutil::random_tensor({8}, kInt64, 20 + uint64_t(step), 0, 4);
    nn::functional::cross_entropy(dp.forward(x), y).backward();
    sgd_step(*src);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s = dp.stats();
  CHECK(s.forwards == 3);
  CHECK(s.backwards == 3);
  CHECK(s.replicas == 2);
  CHECK(s.replicate_seconds > 0);
  CHECK(s.scatter_seconds > 0);
  CHECK(s.parallel_apply_seconds > 0);
  CHECK(s.gather_seconds > 0);
  CHECK(s.reduce_seconds > 0);
  CHECK(dp_seconds(s) <= wall);
  MESSAGE("DataParallel {cpu,cpu}, 3 steps of a small MLP: "
          << wall * 1e3 << " ms wall; replicate " << s.replicate_seconds * 1e3 << ", scatter "
          << s.scatter_seconds * 1e3 << ", apply " << s.parallel_apply_seconds * 1e3 << ", gather "
          << s.gather_seconds * 1e3 << ", reduce " << s.reduce_seconds * 1e3 << " ms");

  dp.reset_stats();
  s = dp.stats();
  CHECK(s.forwards == 0);
  CHECK(s.backwards == 0);
  CHECK(s.replicas == 0);
  CHECK(dp_seconds(s) == 0);

  {  // a forward without grad is counted, no backward reduction runs; one row: one replica
    NoGradGuard no_grad;
    dp.forward(testutil::random_tensor({1, 16}, kFloat32, 30));
  }
  s = dp.stats();
  CHECK(s.forwards == 1);
  CHECK(s.backwards == 0);
  CHECK(s.replicas == 1);
  CHECK(s.reduce_seconds == 0);
}

#if MINIDL_WITH_GLOO

namespace {

using namespace ddptest;

int64_t param_bytes(nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return 4 * n;  // f32
}

}  // namespace

TEST_CASE("ddp: stats sum synchronised steps, bucket bytes match the parameters") {
  run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    manual_seed(9);
    auto model = std::make_shared<SmallNet>(/*batch_norm=*/true);  // buffers are broadcast
    DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 0.002, .first_bucket_mb = 0.0005});
    auto step = [&](int s) {
      loss_of(ddp, batch_x(s, 4).narrow(0, rank * 2, 2), batch_y(s, 4).narrow(0, rank * 2, 2))
          .backward();
    };
    double comm_sum = 0, exposed_sum = 0;  // of the reducer's per-step numbers
    for (int s = 0; s < 4; ++s) {
      if (s == 1) {
        auto guard = ddp.no_sync();
        step(s);  // not a synchronised step
        continue;
      }
      step(s);
      comm_sum += ddp.reducer_stats().comm_seconds;
      exposed_sum += ddp.reducer_stats().exposed_seconds;
      sgd_step(ddp);
    }
    DDPStats st = ddp.stats();
    const int64_t bytes = param_bytes(*model);
    bool ok = report(rank, st.steps == 3, "steps " + std::to_string(st.steps));
    ok = report(rank,
                st.num_buckets >= 2 && size_t(st.num_buckets) == st.bucket_bytes.size() &&
                    size_t(st.num_buckets) == ddp.bucket_indices().size(),
                "buckets " + std::to_string(st.num_buckets)) &&
         ok;
    const int64_t summed =
        std::accumulate(st.bucket_bytes.begin(), st.bucket_bytes.end(), int64_t(0));
    ok = report(rank, summed == st.bytes_per_step && st.bytes_per_step == bytes,
                "bytes " + std::to_string(summed) + " / " + std::to_string(st.bytes_per_step) +
                    " / " + std::to_string(bytes)) &&
         ok;
    ok = report(rank,
                st.comm_seconds > 0 && st.exposed_seconds >= 0 &&
                    st.exposed_seconds <= st.comm_seconds,
                "comm " + std::to_string(st.comm_seconds) + " exposed " +
                    std::to_string(st.exposed_seconds)) &&
         ok;
    ok = report(rank, st.comm_seconds == comm_sum && st.exposed_seconds == exposed_sum,
                "totals are the sums of the per-step numbers") &&
         ok;
    ok = report(rank, st.broadcast_seconds > 0, "buffer broadcasts timed") && ok;
    if (rank == 0) {
      shared_doubles()[0] = st.comm_seconds;
      shared_doubles()[1] = st.hidden_fraction();
    }

    ddp.reset_stats();
    st = ddp.stats();
    ok = report(rank,
                st.steps == 0 && st.comm_seconds == 0 && st.exposed_seconds == 0 &&
                    st.broadcast_seconds == 0 && st.bytes_per_step == bytes,
                "reset zeroes the totals, keeps the layout") &&
         ok;
    step(5);
    return report(rank, ddp.stats().steps == 1 && ddp.stats().comm_seconds > 0,
                  "counting resumes after reset") &&
           ok;
  });
  MESSAGE("DDP 2 ranks, 3 steps of SmallNet: comm "
          << shared_doubles()[0] * 1e3 << " ms, hidden fraction " << shared_doubles()[1]);
}

TEST_CASE("ddp: stats at world size 1 count steps and nothing communicated") {
  run_ranks(1, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    DistributedDataParallel ddp(std::make_shared<SmallNet>(true), pg);
    for (int s = 0; s < 3; ++s) loss_of(ddp, batch_x(s, 4), batch_y(s, 4)).backward();
    const DDPStats st = ddp.stats();
    return report(rank,
                  st.steps == 3 && st.num_buckets == 0 && st.bucket_bytes.empty() &&
                      st.bytes_per_step == 0 && st.comm_seconds == 0 && st.exposed_seconds == 0 &&
                      st.broadcast_seconds == 0 && st.hidden_fraction() == 0,
                  "world size 1 stats");
  });
}

#else
TEST_CASE("ddp: the DDP stats cases need Gloo") {
  MINIDL_SKIP(testutil::kNoGloo);
}
#endif  // MINIDL_WITH_GLOO
