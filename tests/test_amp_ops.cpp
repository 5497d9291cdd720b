// The AMP and fused-optimizer ops on the CPU (suite grad_scaler_ops): non_finite_check_and_unscale
// over dtypes, inf/NaN/none, empty lists, zero-size and strided tensors; amp_update_scale; and
// fused_sgd / fused_adam against the per-tensor optimizers, with and without AMP inputs.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "optim/adam.h"
#include "optim/fused.h"
#include "optim/sgd.h"
#include "autograd/ops.h"
#include "test_util.h"

using namespace minidl;

namespace {

float f32(const Tensor& t) {
  return t.item<float>();
}

std::vector<Tensor> make_params(uint64_t seed) {
  return {testutil::random_tensor({5, 3}, kFloat32, seed, -1, 1).requires_grad_(),
          testutil::random_tensor({7}, kFloat32, seed + 1, -1, 1).requires_grad_(),
          testutil::random_tensor({0}, kFloat32, seed + 2, -1, 1).requires_grad_()};
}

void grads_for(std::vector<Tensor>& ps, uint64_t seed, double factor) {
  for (size_t i = 0; i < ps.size(); ++i)
    ps[i].set_grad(mul(testutil::random_tensor(ps[i].shape(), kFloat32, seed + i, -1, 1), factor));
}

// Runs `steps` steps of the optimizer made by make() twice: the plain per-tensor path ("fused"
// = 0) and step_with_scaling through the CPU fused ops with grads scaled by 256; the scaled run
// skips at step `skip_at` (found_inf = 1). Parameters and state must agree bitwise.
template <typename Make>
void compare_fused(Make make, int steps, int skip_at) {
  std::vector<Tensor> a = make_params(1), b = make_params(1);
  auto plain = make(a);
  auto fused = make(b);
  for (auto& g : plain->param_groups()) g.options["fused"] = 0;
  const Tensor scale = full({}, 256.0f, kFloat32);
  for (int t = 0; t < steps; ++t) {
    CAPTURE(t);
    grads_for(a, 100 + t, 1.0);
    grads_for(b, 100 + t, 256.0);
    const Tensor found = full({}, t == skip_at ? 1.0f : 0.0f, kFloat32);
    if (t != skip_at) plain->step();
    fused->step_with_scaling(scale, found);
    for (size_t i = 0; i < a.size(); ++i)
      CHECK(testutil::bitwise_equal(a[i].detach(), b[i].detach()));
    auto sa = plain->state_dict(), sb = fused->state_dict();
    CHECK(sa.size() == sb.size());
    for (auto& [k, v] : sa) {
      if (k.ends_with(".fused")) continue;  // set differently above
      CAPTURE(k);
      REQUIRE(sb.count(k));
      CHECK(testutil::bitwise_equal(v, sb.at(k)));
    }
  }
}

}  // namespace

TEST_SUITE("grad_scaler_ops") {
  TEST_CASE("non_finite_check_and_unscale: dtypes, inf/NaN/none, empty, zero-size, strided") {
    const double inf = std::numeric_limits<double>::infinity();
    for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      for (double poison : {0.0, inf, -inf, std::nan("")}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(poison);
        Tensor a = testutil::random_tensor({4, 6}, dt, 3, -4, 4);
        Tensor b = testutil::random_tensor({6, 4}, dt, 4, -4, 4).t();  // strided
        Tensor z = zeros({0, 3}, dt);
        if (poison != 0) b.narrow(0, 1, 1).narrow(1, 2, 1).fill_(poison);
        const Tensor a0 = a.clone(), b0 = b.clone();
        const DType op = dt == kFloat64 ? kFloat64 : kFloat32;  // opmath
        Tensor found = zeros({}, kFloat32);
        amp::non_finite_check_and_unscale_({a, b, z}, found, full({}, 0.25f, kFloat32));
        CHECK(f32(found) == (poison != 0 ? 1.0f : 0.0f));
        CHECK(testutil::bitwise_equal(a, mul(a0.to(op), 0.25).to(dt)));
        if (poison == 0) CHECK(testutil::bitwise_equal(b, mul(b0.to(op), 0.25).to(dt)));
        // inv_scale 1: check only, nothing changes; found_inf is never reset
        Tensor a1 = a.clone();
        amp::non_finite_check_and_unscale_({a}, found, ones({}, kFloat32));
        CHECK(testutil::bitwise_equal(a, a1));
        CHECK(f32(found) == (poison != 0 ? 1.0f : 0.0f));
      }
    }
    Tensor found = zeros({}, kFloat32);
    amp::non_finite_check_and_unscale_({}, found, ones({}, kFloat32));
    CHECK(f32(found) == 0.0f);
    Tensor i = zeros({3}, kInt64);
    CHECK_THROWS_WITH_AS(amp::non_finite_check_and_unscale_({i}, found, ones({}, kFloat32)),
                         doctest::Contains("floating dtype"), Error);
    CHECK_THROWS_WITH_AS(amp::non_finite_check_and_unscale_({}, found, ones({}, kFloat64)),
                         doctest::Contains("inv_scale must be a one-element f32"), Error);
  }

  TEST_CASE("amp_update_scale: backoff, growth at the interval, no growth to inf") {
    Tensor s = full({}, 4.0f, kFloat32), tr = zeros({}, kInt32);
    const Tensor fin = zeros({}, kFloat32), bad = ones({}, kFloat32);
    amp::amp_update_scale_(s, tr, fin, 2.0, 0.5, 2);
    CHECK((f32(s) == 4.0f && tr.item<int64_t>() == 1));
    amp::amp_update_scale_(s, tr, fin, 2.0, 0.5, 2);
    CHECK((f32(s) == 8.0f && tr.item<int64_t>() == 0));
    amp::amp_update_scale_(s, tr, fin, 2.0, 0.5, 2);
    amp::amp_update_scale_(s, tr, bad, 2.0, 0.5, 2);
    CHECK((f32(s) == 4.0f && tr.item<int64_t>() == 0));
    Tensor big = full({}, std::numeric_limits<float>::max(), kFloat32), t2 = zeros({}, kInt32);
    amp::amp_update_scale_(big, t2, fin, 2.0, 0.5, 1);
    CHECK(f32(big) == std::numeric_limits<float>::max());
    CHECK(t2.item<int64_t>() == 0);
  }

  TEST_CASE("fused_sgd CPU kernel equals the per-tensor SGD, found_inf skips bitwise") {
    compare_fused(
        [](std::vector<Tensor>& p) {
          return std::make_unique<optim::SGD>(p, 0.1, 0.9, 0.0, 1e-2, true);
        },
        5, 2);
    compare_fused([](std::vector<Tensor>& p) { return std::make_unique<optim::SGD>(p, 0.05); }, 3,
                  0);
    // dampening != 0: the first step under AMP takes the host path; later steps are fused
    compare_fused(
        [](std::vector<Tensor>& p) { return std::make_unique<optim::SGD>(p, 0.1, 0.8, 0.3); }, 4,
        0);
  }

  TEST_CASE("fused_adam CPU kernel equals the per-tensor Adam/AdamW, found_inf skips bitwise") {
    compare_fused(
        [](std::vector<Tensor>& p) {
          return std::make_unique<optim::Adam>(p, 1e-2, std::make_pair(0.9, 0.99), 1e-8, 1e-2);
        },
        5, 1);
    compare_fused(
        [](std::vector<Tensor>& p) {
          return std::make_unique<optim::AdamW>(p, 1e-2, std::make_pair(0.8, 0.9), 1e-6, 0.1, true);
        },
        5, 3);
  }

  TEST_CASE("fused ops validate their arguments") {
    std::vector<Tensor> ps = make_params(9);
    grads_for(ps, 1, 1.0);
    FusedSgdArgs a;
    a.hyper = optim::fused::make_hyper([] { return optim::fused::HyperValues{0.1}; });
    a.params = {ps[0]};
    a.grads = {ps[1].grad()};
    CHECK_THROWS_WITH_AS(optim::fused::sgd_step(a), doctest::Contains("grad 0 must be"), Error);
    a.grads = {ps[0].grad()};
    a.amp.found_inf = zeros({1, 2});
    CHECK_THROWS_WITH_AS(optim::fused::sgd_step(a), doctest::Contains("found_inf"), Error);
    CHECK(optim::fused::usable({ps[0]}, true));
    CHECK_FALSE(optim::fused::usable({ps[0]}));  // CPU: only with allow_cpu
  }
}
