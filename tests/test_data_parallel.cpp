// DataParallel on CPU device lists: training equals single-device training (2 replicas, and 3
// with an uneven scatter), BatchNorm buffers come from replica 0, grad mode reaches the worker
// threads, replica errors are named, and the wrapper's names carry no "module." prefix.
#include <doctest/doctest.h>

#include "parallel/data_parallel/data_parallel.h"
#include "parallel_test_models.h"

using namespace minidl;
using namespace ptest;
using dist::DataParallel;

namespace {

// Trains `steps` SGD steps of DataParallel(devices) and of a plain copy on the same global
// batches; returns the largest relative parameter difference.
double dp_vs_single(size_t n_devices, int64_t rows, int steps) {
  manual_seed(7);
  auto src = std::make_shared<SmallNet>();
  auto ref = src->clone();
  DataParallel dp(src, std::vector<Device>(n_devices, kCPU));
  for (int s = 0; s < steps; ++s) {
    Tensor x = batch_x(s, rows), y = batch_y(s, rows);
    Tensor out = dp.forward(x);
    REQUIRE(out.shape() == Shape{rows, 10});
    nn::functional::cross_entropy(out, y).backward();
    for (size_t k = 1; k < n_devices; ++k)
      for (const Tensor& p : dp.replica(k).parameters()) CHECK_FALSE(p.grad().defined());
    sgd_step(*src);
    loss_of(*ref, x, y).backward();
    sgd_step(*ref);
  }
  return max_rel_diff(src->state_dict(), ref->state_dict());
}

}  // namespace

TEST_CASE("data_parallel: two CPU replicas train like one device") {
  double err = dp_vs_single(2, 8, 5);
  MESSAGE("DataParallel {cpu,cpu} vs single device, 5 steps: max rel param error " << err);
  CHECK(err <= 1e-5);
  CHECK(err > 0);  // the replicas really computed partial sums in a different order
}

TEST_CASE("data_parallel: three replicas with an uneven scatter") {
  double err = dp_vs_single(3, 7, 4);  // chunks 3, 3, 1
  MESSAGE("DataParallel 3 x cpu, batch 7: max rel param error " << err);
  CHECK(err <= 1e-5);
  CHECK(dp_vs_single(3, 2, 2) <= 1e-5);  // batch 2 < 3 devices: two replicas used
}

TEST_CASE("data_parallel: BatchNorm buffers come from replica 0, once per step") {
  manual_seed(3);
  auto src = std::make_shared<SmallNet>(/*batch_norm=*/true);
  auto ref = src->clone();
  DataParallel dp(src, {kCPU, kCPU});
  for (int s = 0; s < 2; ++s) {
    Tensor x = batch_x(s, 8);
    dp.forward(x);
    ref->forward(x.narrow(0, 0, 4));  // replica 0 saw rows 0..3
  }
  auto got = src->state_dict(), want = ref->state_dict();
  CHECK(got.at("bn.num_batches_tracked").item<int64_t>() == 2);
  CHECK(max_rel_diff({{"m", got.at("bn.running_mean")}, {"v", got.at("bn.running_var")}},
                     {{"m", want.at("bn.running_mean")}, {"v", want.at("bn.running_var")}}) <=
        1e-6);
  // The next forward copies the source buffers into replica 1.
  dp.forward(batch_x(5, 8));
  auto r1 = dp.replica(1).state_dict();
  CHECK(r1.at("bn.num_batches_tracked").item<int64_t>() == 3);  // 2 copied + its own step
}

TEST_CASE("data_parallel: grad mode of the caller reaches the replica threads") {
  auto dp = DataParallel(std::make_shared<SmallNet>(), {kCPU, kCPU});
  {
    NoGradGuard no_grad;
    CHECK_FALSE(dp.forward(batch_x(0, 4)).requires_grad());
  }
  CHECK(dp.forward(batch_x(0, 4)).requires_grad());
}

TEST_CASE("data_parallel: names, errors") {
  auto src = std::make_shared<SmallNet>();
  DataParallel dp(src, {kCPU, kCPU});
  auto a = dp.state_dict(), b = src->state_dict();
  REQUIRE(a.size() == b.size());
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib)
    CHECK(ia->first == ib->first);
  CHECK(dp.named_parameters().size() == src->named_parameters().size());

  try {
    dp.forward(testutil::random_tensor({4, 3, 8, 8}));  // 3 channels for a 1-channel conv
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("DataParallel: replica") != std::string::npos);
  }
  CHECK_THROWS_AS(DataParallel(src, {}), Error);
  CHECK_THROWS_AS(dp.forward(scalar_tensor(1.0, kFloat32)), Error);
}

TEST_CASE("data_parallel: peak memory is reported once per distinct device") {
  manual_seed(4);
  auto src = std::make_shared<SmallNet>();
  DataParallel dp(src, {kCPU, kCPU});
  reset_peak_memory_stats(kCPU);
  const int64_t before = memory_stats(kCPU).allocated;
  Tensor out = dp.forward(batch_x(0, 8));
  auto mem = dp.memory_per_device();
  REQUIRE(mem.size() == 1);  // both replicas are on the CPU
  CHECK(mem[0].first == kCPU);
  CHECK(mem[0].second.peak >= before + int64_t(out.nbytes()));
  CHECK(mem[0].second.allocated <= mem[0].second.peak);
}
