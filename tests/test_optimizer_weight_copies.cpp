// Fused AdamW on the CPU writes autocast's 16-bit weight copies in its update pass
// (amp::weight_copies_wanted / provide_weight_copies): the next region takes them instead of
// casting in its foreach_copy_, and training is bitwise the same; a weight changed after the step
// is cast again; MINIDL_UNFUSED=optimizer_weight_copies turns it off. The fused_adam op's copies
// hold the parameters also when found_inf skips the step, and bad copies are refused by name.
#include <doctest/doctest.h>

#include <functional>

#include "optim/adam.h"
#include "optim/fused.h"
#include "tensor/profiler.h"
#include "tensor/variants.h"
#include "test_util.h"
#include "two_layer_mlp.h"

using namespace minidl;
using namespace testutil;

namespace {

struct Run {
  std::vector<Tensor> outs, params;
  std::vector<int64_t> forward_dispatches;
};

// `steps` AdamW steps of the MLP with its forward in a bf16 autocast region, under
// MINIDL_UNFUSED=`unfused`; after_step(s, params) runs after optimizer step s.
Run train(int steps, const std::string& unfused,
          const std::function<void(int, std::vector<Tensor>&)>& after_step = {}) {
  ScopedUnfused u(unfused);
  amp::clear_autocast_cache();
  std::vector<Tensor> p = mlp_params(61);
  optim::AdamW opt(p, 1e-2);
  const Tensor x = random_tensor({5, 8}, kFloat32, 60);
  Run r;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor out;
    r.forward_dispatches.push_back(dispatches_of([&] {
      amp::autocast ac(DeviceType::cpu);
      out = mlp(p, x);
    }));
    sum(out.to(kFloat32)).backward();
    opt.step();
    if (after_step) after_step(s, p);
    r.outs.push_back(out);
  }
  for (const Tensor& t : p) r.params.push_back(t.detach().clone());
  amp::clear_autocast_cache();
  return r;
}

void check_same_training(const Run& a, const Run& b) {
  REQUIRE(a.outs.size() == b.outs.size());
  for (size_t s = 0; s < a.outs.size(); ++s) {
    CAPTURE(s);
    CHECK(bitwise_equal(a.outs[s], b.outs[s]));
  }
  for (size_t i = 0; i < a.params.size(); ++i) CHECK(bitwise_equal(a.params[i], b.params[i]));
}

FusedAdamArgs adam_args(const std::vector<Tensor>& params) {
  FusedAdamArgs a;
  a.hyper = optim::fused::make_hyper([] {
    return optim::fused::HyperValues{1e-2, 0.9, 0.999, 1e-8, 0.01};
  });
  a.decoupled = true;
  for (const Tensor& p : params) {
    a.params.push_back(p);
    a.grads.push_back(random_tensor(p.shape(), kFloat32, 70 + a.params.size()));
    a.exp_avg.push_back(zeros(p.shape()));
    a.exp_avg_sq.push_back(zeros(p.shape()));
    a.steps.push_back(zeros({}, kFloat64));
  }
  return a;
}

}  // namespace

TEST_CASE("optimizer weight copies: AdamW writes the next region's bf16 copies, same training") {
  const Run fused = train(5, "");
  const Run unfused = train(5, "optimizer_weight_copies");
  check_same_training(fused, unfused);
  // region 0 casts each weight at its first use in both; from region 1 on, the unfused region
  // casts them in one foreach_copy_ and the fused one takes the optimizer's copies
  CHECK(fused.forward_dispatches[0] == unfused.forward_dispatches[0]);
  for (size_t s = 1; s < fused.forward_dispatches.size(); ++s) {
    CAPTURE(s);
    CHECK(fused.forward_dispatches[s] == unfused.forward_dispatches[s] - 1);
  }
  // the copies are of the stepped weights: against per-weight casts with nothing batched
  const Run per_weight = train(5, "autocast_weight_copies");
  check_same_training(fused, per_weight);
}

TEST_CASE("optimizer weight copies: a weight changed after the step is cast again") {
  // after step 2, w1 is scaled in place (a version bump): region 3 must not take its copy
  auto scale_w1 = [](int s, std::vector<Tensor>& p) {
    if (s != 2) return;
    NoGradGuard no_grad;
    p[0].mul_(1.5);
  };
  const Run fused = train(5, "", scale_w1);
  const Run unfused = train(5, "optimizer_weight_copies", scale_w1);
  check_same_training(fused, unfused);
  // region 3 casts the changed w1 in a foreach_copy_ (like the unfused region), the rest taken
  CHECK(fused.forward_dispatches[3] == unfused.forward_dispatches[3]);
  CHECK(fused.forward_dispatches[4] == unfused.forward_dispatches[4] - 1);
}

TEST_CASE("optimizer weight copies: wanted only for weights the last region cast") {
  amp::clear_autocast_cache();
  std::vector<Tensor> p = mlp_params(80);
  const Tensor x = random_tensor({3, 8}, kFloat32, 81);
  CHECK(amp::weight_copies_wanted(p).empty());  // no region yet
  {
    amp::autocast ac(DeviceType::cpu);
    (void)linear(x, p[0], p[1]);                  // the first layer only
    CHECK(amp::weight_copies_wanted(p).empty());  // inside a region
  }
  const std::vector<Tensor> wanted = amp::weight_copies_wanted(p);
  REQUIRE(wanted.size() == 4);
  for (int i : {0, 1}) {
    CHECK(wanted[i].defined());
    CHECK(wanted[i].dtype() == kBFloat16);
    CHECK(wanted[i].shape() == p[i].shape());
  }
  CHECK_FALSE(wanted[2].defined());
  CHECK_FALSE(wanted[3].defined());
  {
    ScopedUnfused u("optimizer_weight_copies");
    CHECK(amp::weight_copies_wanted(p).empty());
  }
  CHECK_THROWS_WITH_AS(amp::provide_weight_copies(p, {wanted[0]}),
                       doctest::Contains("1 copies for 4 parameter(s)"), Error);
  CHECK_THROWS_WITH_AS(amp::provide_weight_copies({p[1]}, {wanted[0]}),
                       doctest::Contains("copy 0 is [16, 8] bfloat16"), Error);
  amp::clear_autocast_cache();
  CHECK(amp::weight_copies_wanted(p).empty());
}

TEST_CASE("fused_adam: param_copies hold the parameters after the step, also when it is skipped") {
  const std::vector<Tensor> params = {random_tensor({4, 5}, kFloat32, 90),
                                      random_tensor({70001}, kFloat32, 91)};
  std::vector<Tensor> before;
  for (const Tensor& p : params) before.push_back(p.clone());
  FusedAdamArgs a = adam_args(params);
  // a flat bf16 copy of the [4,5] weight, no copy of the second
  a.param_copies = {empty({20}, kBFloat16), Tensor()};
  a.amp.grad_scale = full({}, 1.0);
  a.amp.found_inf = full({}, 1.0);
  optim::fused::adam_step(a);  // skipped: inf/NaN found
  CHECK(bitwise_equal(params[0], before[0]));
  CHECK(bitwise_equal(a.param_copies[0], before[0].to(kBFloat16).reshape({20})));
  a.amp.found_inf = full({}, 0.0);
  a.param_copies = {empty({20}, kFloat16), empty({70001}, kBFloat16)};
  optim::fused::adam_step(a);
  CHECK_FALSE(bitwise_equal(params[0], before[0]));
  CHECK(bitwise_equal(a.param_copies[0], params[0].to(kFloat16).reshape({20})));
  CHECK(bitwise_equal(a.param_copies[1], params[1].to(kBFloat16)));

  a.param_copies = {empty({20}, kBFloat16)};
  CHECK_THROWS_WITH_AS(optim::fused::adam_step(a),
                       doctest::Contains("1 parameter copies for 2 parameter(s)"), Error);
  a.param_copies = {empty({21}, kBFloat16), Tensor()};
  CHECK_THROWS_WITH_AS(
      optim::fused::adam_step(a),
      doctest::Contains("parameter copy 0 must be a contiguous floating tensor of 20 elements"),
      Error);
}

TEST_SUITE("cuda_optim") {
  TEST_CASE("cuda_optim: fused_adam's param_copies hold the parameters, also after a skip") {
    const std::vector<Tensor> host = {random_tensor({4, 5}, kFloat32, 92),
                                      random_tensor({70001}, kFloat32, 93)};
    std::vector<Tensor> params;
    for (const Tensor& h : host) params.push_back(h.to(kCUDA));
    FusedAdamArgs a = adam_args(params);
    for (auto* list : {&a.grads, &a.exp_avg, &a.exp_avg_sq, &a.steps})
      for (Tensor& t : *list) t = t.to(kCUDA);
    a.param_copies = {empty({20}, kBFloat16, kCUDA), Tensor()};
    a.amp.grad_scale = full({}, 1.0).to(kCUDA);
    a.amp.found_inf = full({}, 1.0).to(kCUDA);
    optim::fused::adam_step(a);  // skipped on the device
    CHECK(bitwise_equal(params[0].cpu(), host[0]));
    CHECK(bitwise_equal(a.param_copies[0].cpu(), host[0].to(kBFloat16).reshape({20})));
    a.amp.found_inf = full({}, 0.0).to(kCUDA);
    a.param_copies = {empty({20}, kFloat16, kCUDA), empty({70001}, kBFloat16, kCUDA)};
    optim::fused::adam_step(a);
    CHECK_FALSE(bitwise_equal(params[0].cpu(), host[0]));
    CHECK(bitwise_equal(a.param_copies[0].cpu(), params[0].cpu().to(kFloat16).reshape({20})));
    CHECK(bitwise_equal(a.param_copies[1].cpu(), params[1].cpu().to(kBFloat16)));
  }
}
