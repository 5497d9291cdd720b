// GradScaler (optim/grad_scaler.h): PyTorch golden trajectory (tools/golden/gen_grad_scaler.py),
// the state machine and its errors, skip semantics, clipping, state_dict, bf16/disabled modes,
// warnings, and the CPU kernels of the AMP and fused-optimizer ops.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <sstream>

#include "golden.h"
#include "optim/adam.h"
#include "optim/fused.h"
#include "optim/grad_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"
#include "autograd/ops.h"
#include "test_util.h"

using namespace minidl;
using amp::GradScaler;
using amp::GradScalerOptions;

namespace {

// Captures std::cerr for its lifetime.
struct CerrCapture {
  std::ostringstream buf;
  std::streambuf* old = std::cerr.rdbuf(buf.rdbuf());
  ~CerrCapture() { std::cerr.rdbuf(old); }
  std::string str() const { return buf.str(); }
};

Tensor param(const Shape& s, uint64_t seed) {
  return testutil::random_tensor(s, kFloat32, seed, -1, 1).requires_grad_();
}

// Sets every parameter's grad to base * factor (seeded values), inf at element 0 of the first
// when poison != 0.
void set_grads(std::vector<Tensor>& ps, uint64_t seed, double factor, double poison = 0) {
  for (size_t i = 0; i < ps.size(); ++i) {
    Tensor g = mul(testutil::random_tensor(ps[i].shape(), kFloat32, seed + i, -1, 1), factor);
    if (i == 0 && poison != 0) g.view({-1}).narrow(0, 0, 1).fill_(poison);
    ps[i].set_grad(g);
  }
}

std::map<std::string, Tensor> clone_state(const optim::Optimizer& o) {
  std::map<std::string, Tensor> out;
  for (auto& [k, v] : o.state_dict()) out[k] = v.cpu().clone();
  return out;
}

bool same_state(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (auto& [k, v] : a)
    if (!b.count(k) || !testutil::bitwise_equal(v, b.at(k))) return false;
  return true;
}

}  // namespace

TEST_SUITE("grad_scaler") {
  TEST_CASE("golden: PyTorch's scale, growth tracker, skips and SGD params over 30 steps") {
    const auto& g = testutil::golden("grad_scaler_golden.json");
    const auto& o = g["options"];
    GradScalerOptions opts;
    opts.init_scale = o["init_scale"];
    opts.growth_factor = o["growth_factor"];
    opts.backoff_factor = o["backoff_factor"];
    opts.growth_interval = o["growth_interval"];
    GradScaler scaler(opts);
    Tensor w = testutil::from_f64(g["init"]["w"].get<std::vector<double>>(), {3, 4});
    Tensor b = testutil::from_f64(g["init"]["b"].get<std::vector<double>>(), {3});
    w.requires_grad_();
    b.requires_grad_();
    optim::SGD opt({w, b}, o["lr"].get<double>(), o["momentum"].get<double>());
    const auto& steps = g["steps"];
    for (size_t t = 0; t < steps.size(); ++t) {
      CAPTURE(t + 1);
      // Stand-in for backward of scale(loss): the raw grads times the current scale.
      Tensor one = ones({}, kFloat32);
      Tensor scaled_one = scaler.scale(one);
      Tensor gw = mul(testutil::from_f64(g["grads"][t]["w"].get<std::vector<double>>(), {3, 4}),
                      scaled_one);
      Tensor gb =
          mul(testutil::from_f64(g["grads"][t]["b"].get<std::vector<double>>(), {3}), scaled_one);
      const std::string key = std::to_string(t + 1);
      if (g["inf_steps"].contains(key)) {
        const std::string kind = g["inf_steps"][key];
        const double v = kind == "nan"    ? std::nan("")
                         : kind == "-inf" ? -std::numeric_limits<double>::infinity()
                                          : std::numeric_limits<double>::infinity();
        gw.view({-1}).narrow(0, 6, 1).fill_(v);  // [1, 2]
      }
      w.set_grad(gw);
      b.set_grad(gb);
      const bool applied = scaler.step(opt);
      scaler.update();
      const auto& s = steps[t];
      CHECK(applied == !s["skipped"].get<bool>());
      CHECK(scaler.last_step_skipped() == s["skipped"].get<bool>());
      CHECK(scaler.get_scale() == s["scale"].get<double>());
      CHECK(scaler.growth_tracker() == s["growth_tracker"].get<int64_t>());
      testutil::check_close(w.detach(), s["w"].get<std::vector<double>>(), 1e-6, 1e-7);
      testutil::check_close(b.detach(), s["b"].get<std::vector<double>>(), 1e-6, 1e-7);
    }
    CHECK(scaler.steps() == 30);
    CHECK(scaler.skipped_steps() == 6);
  }

  TEST_CASE("a skipped step leaves params, optimizer state and a checked scheduler unchanged") {
    for (int which = 0; which < 3; ++which) {
      CAPTURE(which);
      std::vector<Tensor> ps = {param({4, 3}, 1), param({3}, 2)};
      std::unique_ptr<optim::Optimizer> opt;
      if (which == 0) opt = std::make_unique<optim::SGD>(ps, 0.1, 0.9, 0.0, 1e-2, true);
      if (which == 1) opt = std::make_unique<optim::Adam>(ps, 1e-2);
      if (which == 2)
        opt = std::make_unique<optim::AdamW>(ps, 1e-2, std::make_pair(0.9, 0.99), 1e-8, 0.1, true);
      optim::StepLR sched(*opt, 1, 0.5);
      GradScaler scaler;
      for (int t = 0; t < 3; ++t) {  // some state first
        scaler.scale(ones({}));
        set_grads(ps, 10 + t, scaler.get_scale());
        if (scaler.step(*opt)) sched.step();
        scaler.update();
      }
      const auto state = clone_state(*opt);
      const Tensor p0 = ps[0].detach().clone(), p1 = ps[1].detach().clone();
      const double lr = opt->param_groups()[0].lr();
      scaler.scale(ones({}));
      set_grads(ps, 99, scaler.get_scale(), std::nan(""));
      const bool applied = scaler.step(*opt);
      if (applied) sched.step();
      scaler.update();
      CHECK_FALSE(applied);
      CHECK(testutil::bitwise_equal(ps[0].detach(), p0));
      CHECK(testutil::bitwise_equal(ps[1].detach(), p1));
      CHECK(same_state(state, clone_state(*opt)));
      CHECK(opt->param_groups()[0].lr() == lr);
      CHECK(scaler.skipped_steps() == 1);
      CHECK(scaler.consecutive_skips() == 1);
    }
  }

  TEST_CASE("state machine: unscale_ twice, unscale_ after step, step twice, fp16 grads") {
    std::vector<Tensor> ps = {param({2, 2}, 3)};
    optim::SGD opt(ps, 0.1);
    GradScaler scaler;
    CHECK_THROWS_WITH_AS(scaler.unscale_(opt), doctest::Contains("_scale is None"), Error);
    scaler.scale(ones({}));
    set_grads(ps, 4, scaler.get_scale());
    scaler.unscale_(opt);
    CHECK_THROWS_WITH_AS(scaler.unscale_(opt), doctest::Contains("already been called"), Error);
    CHECK(scaler.step(opt));
    CHECK_THROWS_WITH_AS(scaler.unscale_(opt), doctest::Contains("after step()"), Error);
    CHECK_THROWS_WITH_AS(scaler.step(opt), doctest::Contains("step() has already been called"),
                         Error);
    CHECK_THROWS_WITH_AS(scaler.clip_grad_norm_(opt, 1.0), doctest::Contains("after step()"),
                         Error);
    scaler.update();
    // a new iteration starts READY again
    scaler.scale(ones({}));
    ps[0].set_grad(ones({2, 2}, kFloat16));
    CHECK_THROWS_WITH_AS(scaler.unscale_(opt),
                         doctest::Contains("Attempting to unscale FP16 gradients."), Error);
    CHECK_THROWS_WITH_AS(GradScaler({.growth_factor = 1.0}), doctest::Contains("growth factor"),
                         Error);
    GradScaler fresh;
    CHECK_THROWS_WITH_AS(fresh.update(), doctest::Contains("_scale is None"), Error);
    fresh.scale(ones({}));
    CHECK_THROWS_WITH_AS(fresh.update(), doctest::Contains("No inf checks"), Error);
  }

  TEST_CASE("clip_grad_norm_ unscales once: the norm equals the fp32 reference norm") {
    std::vector<Tensor> ps = {param({5, 4}, 5), param({4}, 6)};
    std::vector<Tensor> ref = {ps[0].detach().clone().requires_grad_(),
                               ps[1].detach().clone().requires_grad_()};
    set_grads(ref, 20, 3.0);
    const double want = optim::clip_grad_norm_(ref, 0.5).item<double>();
    optim::SGD opt(ps, 0.1);
    GradScaler scaler;
    scaler.scale(ones({}));
    set_grads(ps, 20, 3.0 * scaler.get_scale());
    const double got = scaler.clip_grad_norm_(opt, 0.5).item<double>();
    CHECK(got == doctest::Approx(want).epsilon(1e-6));
    for (size_t i = 0; i < ps.size(); ++i)
      testutil::check_close(ps[i].grad(), ref[i].grad(), 1e-6, 1e-7);
    CHECK(scaler.step(opt));  // no second unscale
    scaler.update();
    CHECK(scaler.growth_tracker() == 1);
  }

  TEST_CASE("state_dict round trip restores scale, tracker and counters exactly") {
    std::vector<Tensor> ps = {param({3}, 7)};
    optim::SGD opt(ps, 0.1);
    GradScaler a({.init_scale = 1024.0, .growth_interval = 4});
    for (int t = 0; t < 7; ++t) {
      a.scale(ones({}));
      set_grads(ps, 30 + t, a.get_scale(), t == 2 ? INFINITY : 0);
      a.step(opt);
      a.update();
    }
    auto sd = a.state_dict();
    for (const char* k : {"scale", "growth_factor", "backoff_factor", "growth_interval",
                          "_growth_tracker", "minidl.skipped_steps"})
      CHECK(sd.count(k) == 1);
    CHECK(sd["scale"].dim() == 0);
    GradScaler b;  // defaults differ: everything comes from the dict
    b.load_state_dict(sd);
    CHECK(b.get_scale() == a.get_scale());
    CHECK(b.growth_tracker() == a.growth_tracker());
    CHECK(b.skipped_steps() == 1);
    CHECK(b.steps() == 7);
    for (int t = 0; t < 5; ++t) {  // both evolve identically
      for (GradScaler* s : {&a, &b}) {
        s->scale(ones({}));
        set_grads(ps, 50 + t, s->get_scale());
        s->step(opt);
        s->update();
      }
      CHECK(b.get_scale() == a.get_scale());
      CHECK(b.growth_tracker() == a.growth_tracker());
    }
    GradScaler off({.enabled = false});
    CHECK(off.state_dict().empty());
    CHECK_THROWS_WITH_AS(b.load_state_dict({}), doctest::Contains("disabled instance"), Error);
  }

  TEST_CASE("disabled and bf16 scalers are pass-throughs at scale 1") {
    for (GradScaler s : {GradScaler({.enabled = false}), GradScaler::for_dtype(kBFloat16),
                         GradScaler::for_dtype(kFloat32)}) {
      std::vector<Tensor> ps = {param({3}, 8)};
      optim::SGD opt(ps, 0.1);
      Tensor loss = full({}, 2.5);
      CHECK(s.scale(loss).is_same(loss));
      CHECK(s.get_scale() == 1.0);
      CHECK_FALSE(s.is_enabled());
      set_grads(ps, 9, 1.0, INFINITY);
      const Tensor before = ps[0].detach().clone();
      CHECK(s.step(opt));  // steps even with inf: nothing is checked
      s.update();
      CHECK_FALSE(testutil::bitwise_equal(ps[0].detach(), before));
    }
    CHECK(GradScaler::for_dtype(kFloat16).is_enabled());
    CHECK(GradScaler::needs_scaler(kFloat16));
    CHECK_FALSE(GradScaler::needs_scaler(kBFloat16));
    CerrCapture cap;
    amp::warn_fp16_without_scaler("test");
    amp::warn_fp16_without_scaler("test");
    const std::string out = cap.str();
    const auto first = out.find("without a GradScaler");
    CHECK((first == std::string::npos || out.find("without a GradScaler", first + 1) ==
                                             std::string::npos));  // at most once per process
  }

  TEST_CASE("consecutive skips warn once per streak, the scale below min_scale is an error") {
    std::vector<Tensor> ps = {param({3}, 11)};
    optim::SGD opt(ps, 0.1);
    GradScaler s({.init_scale = 8.0, .min_scale = 0.2, .warn_consecutive_skips = 3, .rank = 2});
    CerrCapture cap;
    for (int t = 0; t < 5; ++t) {
      s.scale(ones({}));
      set_grads(ps, 60, 1.0, INFINITY);
      CHECK_FALSE(s.step(opt));
      s.update();  // 8 -> 4 -> 2 -> 1 -> 0.5 -> 0.25
    }
    const std::string out = cap.str();
    CHECK(out.find("3 consecutive optimizer steps skipped") != std::string::npos);
    CHECK(out.find("step 3 (rank 2)") != std::string::npos);
    CHECK(out.find("consecutive optimizer steps skipped", out.find("skipped") + 1) ==
          std::string::npos);
    CHECK(s.consecutive_skips() == 5);
    s.scale(ones({}));
    set_grads(ps, 60, 1.0, INFINITY);
    s.step(opt);
    CHECK_THROWS_WITH_AS(s.update(), doctest::Contains("below min_scale"), Error);
    CHECK(s.get_scale() == 0.125);
  }

  TEST_CASE("a non-finite loss is reported with step and rank when the step is skipped") {
    std::vector<Tensor> ps = {param({3}, 12)};
    optim::SGD opt(ps, 0.1);
    GradScaler s({.rank = 0});
    CerrCapture cap;
    Tensor scaled = s.scale(full({}, std::nan("")));
    set_grads(ps, 61, 1.0, std::nan(""));
    CHECK_FALSE(s.step(opt));
    s.update();
    CHECK(cap.str().find("loss passed to scale() is inf/NaN at step 1 (rank 0)") !=
          std::string::npos);
    s.scale(full({}, 1.0));  // finite again: no report
    set_grads(ps, 62, 1.0);
    CHECK(s.step(opt));
    s.update();
    CHECK(cap.str().find("step 2") == std::string::npos);
  }
}
