// Optimizer tests: SGD/Adam/AdamW trajectories vs PyTorch golden values (f64), state_dict round
// trips, param groups, zero_grad, gradient clipping and error cases.
#include <cmath>

#include "golden.h"

using namespace minidl;
using namespace testutil;
namespace optim = minidl::optim;

namespace {

const json& G() {
  return golden("golden_optim.json");
}

std::vector<Tensor> initial_params(DType dt = kFloat64) {
  std::vector<Tensor> ps;
  for (const auto& p : G()["params"]) ps.push_back(golden_tensor(p, dt).requires_grad_());
  return ps;
}

void set_grads(std::vector<Tensor>& ps, int step, DType dt = kFloat64) {
  for (size_t i = 0; i < ps.size(); ++i) ps[i].set_grad(golden_tensor(G()["grads"][step][i], dt));
}

void check_params(const std::vector<Tensor>& ps, const json& expected, double rtol,
                  const std::string& what) {
  for (size_t i = 0; i < ps.size(); ++i) {
    std::vector<double> got = to_f64(ps[i]), want = golden_values(expected[i]);
    REQUIRE(got.size() == want.size());
    for (size_t k = 0; k < got.size(); ++k)
      CHECK_MESSAGE(std::abs(got[k] - want[k]) <= rtol * std::abs(want[k]) + 1e-12, what, " param ",
                    i, "[", k, "]: ", got[k], " vs ", want[k]);
  }
}

std::unique_ptr<optim::Optimizer> make(const std::string& name, std::vector<Tensor> ps) {
  if (name == "sgd_plain") return std::make_unique<optim::SGD>(ps, 0.1);
  if (name == "sgd_momentum") return std::make_unique<optim::SGD>(ps, 0.05, 0.9, 0.2, 0.01);
  if (name == "sgd_nesterov") return std::make_unique<optim::SGD>(ps, 0.05, 0.8, 0.0, 0.1, true);
  if (name == "adam") return std::make_unique<optim::Adam>(ps, 0.01);
  if (name == "adam_amsgrad_wd")
    return std::make_unique<optim::Adam>(ps, 0.02, std::pair{0.8, 0.99}, 1e-6, 0.1, true);
  if (name == "adamw")
    return std::make_unique<optim::AdamW>(ps, 0.01, std::pair{0.9, 0.999}, 1e-8, 0.05);
  if (name == "adamw_amsgrad")
    return std::make_unique<optim::AdamW>(ps, 0.03, std::pair{0.9, 0.999}, 1e-8, 1e-2, true);
  FAIL("unknown optimizer ", name);
  return nullptr;
}

const std::vector<std::string> kConfigs = {"sgd_plain",    "sgd_momentum",    "sgd_nesterov",
                                           "adam",         "adam_amsgrad_wd", "adamw",
                                           "adamw_amsgrad"};

}  // namespace

TEST_CASE("optim: trajectories match PyTorch (f64, 5 steps)") {
  for (const std::string& name : kConfigs) {
    CAPTURE(name);
    std::vector<Tensor> ps = initial_params();
    auto opt = make(name, ps);
    for (int s = 0; s < 5; ++s) {
      set_grads(ps, s);
      opt->step();
      check_params(ps, G()["trajectories"][name][s], 1e-6, name + " step " + std::to_string(s));
    }
  }
}

TEST_CASE("optim: f32 parameters follow the f64 trajectory") {
  for (std::string name : {"sgd_momentum", "adam_amsgrad_wd", "adamw"}) {
    CAPTURE(name);
    std::vector<Tensor> ps = initial_params(kFloat32);
    auto opt = make(name, ps);
    for (int s = 0; s < 5; ++s) {
      set_grads(ps, s, kFloat32);
      opt->step();
      CHECK(ps[0].dtype() == kFloat32);
      check_params(ps, G()["trajectories"][name][s], 1e-4, name);
    }
  }
}

TEST_CASE("optim: state_dict round trip through safetensors continues identically") {
  for (const std::string& name : kConfigs) {
    CAPTURE(name);
    std::vector<Tensor> ps = initial_params();
    auto opt = make(name, ps);
    for (int s = 0; s < 2; ++s) {
      set_grads(ps, s);
      opt->step();
    }
    auto sd = opt->state_dict();
    CHECK(sd.count("param_groups.0.lr") == 1);
    CHECK(sd.at("param_groups.0.params").numel() == 2);
    if (name.rfind("adam", 0) == 0) {
      CHECK(sd.at("state.1.step").item<double>() == 2);
      CHECK(sd.at("state.1.exp_avg").shape() == Shape{4});
      CHECK(sd.count("state.0.max_exp_avg_sq") == (name.find("amsgrad") != std::string::npos));
    }
    if (name == "sgd_momentum") CHECK(sd.count("state.0.momentum_buffer") == 1);
    auto loaded = load_safetensors_bytes(save_safetensors_bytes(sd));
    // fresh parameters holding the step-2 values, fresh optimizer with other hyper-parameters
    std::vector<Tensor> ps2;
    for (const Tensor& p : ps) ps2.push_back(p.detach().clone().requires_grad_());
    auto opt2 = make(name, ps2);
    opt2->param_groups()[0].lr() = 123.0;  // overwritten by the load
    opt2->load_state_dict(loaded);
    CHECK(opt2->param_groups()[0].lr() == opt->param_groups()[0].lr());
    for (int s = 2; s < 5; ++s) {
      set_grads(ps2, s);
      opt2->step();
      check_params(ps2, G()["trajectories"][name][s], 1e-6, name + " resumed");
    }
  }
}

TEST_CASE("optim: param groups override options, inherit the rest") {
  Tensor a = from_f64({1, 2}, {2}, kFloat64).requires_grad_();
  Tensor b = from_f64({3}, {1}, kFloat64).requires_grad_();
  optim::SGD opt({optim::ParamGroup({a}), optim::ParamGroup({b}, {{"lr", 0.5}})}, 0.1, 0.9);
  CHECK(opt.param_groups()[1].get("momentum") == 0.9);
  CHECK(opt.param_groups()[1].lr() == 0.5);
  a.set_grad(from_f64({1, -1}, {2}, kFloat64));
  b.set_grad(from_f64({2}, {1}, kFloat64));
  opt.step();
  CHECK(to_f64(a) == std::vector<double>{1 - 0.1, 2 + 0.1});
  CHECK(to_f64(b) == std::vector<double>{3 - 0.5 * 2});
  // second step uses the momentum buffer (= first grad): buf = 0.9*g + g
  opt.step();
  CHECK(to_f64(b)[0] == doctest::Approx(2 - 0.5 * 1.9 * 2).epsilon(1e-14));
  Tensor c = from_f64({0}, {1}, kFloat64).requires_grad_();
  opt.add_param_group(optim::ParamGroup({c}, {{"momentum", 0.0}}));
  CHECK(opt.param_groups()[2].lr() == 0.1);
  CHECK_THROWS_WITH_AS(opt.add_param_group(optim::ParamGroup({a})),
                       doctest::Contains("more than one parameter group"), Error);
}

TEST_CASE("optim: zero_grad and skipped parameters") {
  Tensor a = from_f64({1, 2}, {2}, kFloat64).requires_grad_();
  Tensor b = from_f64({3}, {1}, kFloat64).requires_grad_();
  optim::Adam opt({a, b}, 0.1);
  a.set_grad(from_f64({1, 1}, {2}, kFloat64));
  opt.step();  // b has no grad: untouched, no state
  CHECK(to_f64(b) == std::vector<double>{3});
  CHECK(opt.state(1).empty());
  CHECK(opt.state(0).count("exp_avg") == 1);
  // Adam's first step moves each element by lr (m/sqrt(v) = sign(g))
  CHECK(to_f64(a)[0] == doctest::Approx(0.9).epsilon(1e-7));
  opt.zero_grad(false);
  REQUIRE(a.grad().defined());
  CHECK(to_f64(a.grad()) == std::vector<double>{0, 0});
  CHECK_FALSE(b.grad().defined());
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("optim: parameters updated by autograd backward") {
  Tensor w = from_f64({1, -2, 3}, {3}, kFloat32).requires_grad_();
  optim::SGD opt({w}, 0.25);
  Tensor loss = sum(mul(w, w));  // grad = 2w
  loss.backward();
  opt.step();
  CHECK(to_f64(w) == std::vector<double>{0.5, -1, 1.5});
  CHECK_FALSE(w.grad_fn());
}

TEST_CASE("optim: clip_grad_norm_ matches PyTorch") {
  for (const auto& [key, c] : G()["clip"].items()) {
    CAPTURE(key);
    std::vector<Tensor> ps = initial_params();
    set_grads(ps, 0);
    double nt = c["norm_type"].get<double>();
    if (nt < 0) nt = INFINITY;
    double total = optim::clip_grad_norm_(ps, c["max_norm"].get<double>(), nt).item<double>();
    CHECK(total == doctest::Approx(c["total"].get<double>()).epsilon(1e-12));
    for (size_t i = 0; i < ps.size(); ++i) {
      std::vector<double> got = to_f64(ps[i].grad()), want = golden_values(c["grads"][i]);
      for (size_t k = 0; k < got.size(); ++k)
        CHECK(got[k] == doctest::Approx(want[k]).epsilon(1e-12));
    }
  }
}

TEST_CASE("optim: clip_grad_norm_ hand cases, clip_grad_value_") {
  Tensor a = from_f64({0, 0}, {2}, kFloat32).requires_grad_();
  Tensor b = from_f64({0}, {1}, kFloat32).requires_grad_();
  Tensor c = from_f64({0}, {1}, kFloat32).requires_grad_();  // no grad: ignored
  a.set_grad(from_f64({3, 0}, {2}));
  b.set_grad(from_f64({-4}, {1}));
  CHECK(optim::clip_grad_norm_({a, b, c}, 10.0).item<double>() == doctest::Approx(5.0));
  CHECK(to_f64(a.grad())[0] == 3);  // below max_norm: unchanged
  CHECK(optim::clip_grad_norm_({a, b, c}, 1.0).item<double>() == doctest::Approx(5.0));
  CHECK(to_f64(a.grad())[0] == doctest::Approx(3.0 / (5 + 1e-6)).epsilon(1e-6));
  CHECK(to_f64(b.grad())[0] == doctest::Approx(-4.0 / (5 + 1e-6)).epsilon(1e-6));
  CHECK(optim::clip_grad_norm_({c}, 1.0).item<double>() == 0.0);
  b.set_grad(from_f64({INFINITY}, {1}));
  CHECK_THROWS_WITH_AS(optim::clip_grad_norm_({a, b}, 1.0, 2.0, true),
                       doctest::Contains("non-finite"), Error);
  CHECK(std::isinf(optim::clip_grad_norm_({a, b}, 1.0, INFINITY).item<double>()));
  CHECK_THROWS_WITH_AS(optim::clip_grad_norm_({a}, 1.0, -1.0), doctest::Contains("norm_type"),
                       Error);
  a.set_grad(from_f64({-3, 0.5}, {2}));
  optim::clip_grad_value_({a, c}, 1.0);
  CHECK(to_f64(a.grad()) == std::vector<double>{-1, 0.5});
}

TEST_CASE("optim: errors") {
  Tensor a = from_f64({1, 2}, {2}, kFloat64).requires_grad_();
  CHECK_THROWS_WITH_AS(optim::SGD({a}, -0.1), doctest::Contains("Invalid learning rate"), Error);
  CHECK_THROWS_WITH_AS(optim::SGD({a}, 0.1, 0.0, 0.0, 0.0, true), doctest::Contains("Nesterov"),
                       Error);
  CHECK_THROWS_WITH_AS(optim::SGD({a}, 0.1, 0.9, 0.1, 0.0, true), doctest::Contains("dampening"),
                       Error);
  CHECK_THROWS_WITH_AS(optim::SGD({a}, 0.1, -0.9), doctest::Contains("momentum"), Error);
  CHECK_THROWS_WITH_AS(optim::Adam({a}, 1e-3, {1.0, 0.999}),
                       doctest::Contains("beta parameter at index 0"), Error);
  CHECK_THROWS_WITH_AS(optim::AdamW({a}, 1e-3, {0.9, -0.1}),
                       doctest::Contains("beta parameter at index 1"), Error);
  CHECK_THROWS_WITH_AS(optim::Adam({a}, 1e-3, {0.9, 0.999}, -1.0), doctest::Contains("epsilon"),
                       Error);
  CHECK_THROWS_WITH_AS(optim::Adam({optim::ParamGroup({a}, {{"lr", -1.0}})}),
                       doctest::Contains("Invalid learning rate"), Error);

  optim::Adam opt({a}, 0.1);
  a.set_grad(from_f64({1, 1}, {2}, kFloat64));
  opt.step();
  auto sd = opt.state_dict();
  Tensor b = from_f64({1, 2, 3}, {3}, kFloat64).requires_grad_();
  optim::Adam other({b}, 0.1);
  CHECK_THROWS_WITH_AS(other.load_state_dict(sd),
                       doctest::Contains("`state.0.exp_avg` has shape [2] but parameter 0 has "
                                         "shape [3]"),
                       Error);
  CHECK(other.state(0).empty());  // nothing changed
  optim::Adam two({a, b}, 0.1);
  CHECK_THROWS_WITH_AS(two.load_state_dict(sd), doctest::Contains("param_groups.0.params"), Error);
  optim::Adam groups({optim::ParamGroup({a}), optim::ParamGroup({b})}, 0.1);
  CHECK_THROWS_WITH_AS(groups.load_state_dict(sd), doctest::Contains("1 param group(s)"), Error);
  auto bad = sd;
  bad["param_groups.0.lr"] = scalar_tensor(-1.0, kFloat64);
  CHECK_THROWS_WITH_AS(opt.load_state_dict(bad), doctest::Contains("Invalid learning rate"), Error);
  bad = sd;
  bad["state.5.exp_avg"] = sd.at("state.0.exp_avg");
  CHECK_THROWS_WITH_AS(opt.load_state_dict(bad), doctest::Contains("state.5.exp_avg"), Error);
}
