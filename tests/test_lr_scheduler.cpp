// LR scheduler tests: lr (and OneCycleLR momentum) sequences vs PyTorch golden values over 30+
// steps, state_dict round trips, chaining/sequencing and error cases.
#include <cmath>
#include <functional>

#include "golden.h"

using namespace minidl;
using namespace testutil;
namespace optim = minidl::optim;

namespace {

const json& G() {
  return golden("golden_optim.json")["schedulers"];
}

// Two groups like the generator: lr 0.1 (default) and 0.5.
struct Setup {
  Tensor a = from_f64({0}, {1}).requires_grad_();
  Tensor b = from_f64({0}, {1}).requires_grad_();
  std::unique_ptr<optim::Optimizer> opt;
  explicit Setup(bool adam = false, double momentum = 0) {
    std::vector<optim::ParamGroup> groups = {optim::ParamGroup({a}),
                                             optim::ParamGroup({b}, {{"lr", 0.5}})};
    if (adam)
      opt = std::make_unique<optim::Adam>(groups, 0.1);
    else
      opt = std::make_unique<optim::SGD>(groups, 0.1, momentum);
  }
};

using Make = std::function<std::shared_ptr<optim::LRScheduler>(optim::Optimizer&)>;

struct Case {
  std::string name;
  Make make;
  bool adam = false;
  double momentum = 0;
};

std::vector<Case> cases() {
  using std::make_shared;
  return {
      {"step", [](auto& o) { return make_shared<optim::StepLR>(o, 4, 0.5); }},
      {"multistep",
       [](auto& o) {
         return make_shared<optim::MultiStepLR>(o, std::vector<int64_t>{3, 7, 7, 20}, 0.3);
       }},
      {"exponential", [](auto& o) { return make_shared<optim::ExponentialLR>(o, 0.9); }},
      {"cosine", [](auto& o) { return make_shared<optim::CosineAnnealingLR>(o, 10, 0.001); }},
      {"linear", [](auto& o) { return make_shared<optim::LinearLR>(o); }},
      {"linear2", [](auto& o) { return make_shared<optim::LinearLR>(o, 0.5, 0.1, 8); }},
      {"onecycle_sgd", [](auto& o) { return make_shared<optim::OneCycleLR>(o, 1.0, 30); }, false,
       0.9},
      {"onecycle_adam", [](auto& o) { return make_shared<optim::OneCycleLR>(o, 0.2, 30); }, true},
      {"sequential",
       [](auto& o) {
         std::vector<std::shared_ptr<optim::LRScheduler>> s = {
             make_shared<optim::LinearLR>(o, 0.2, 1.0, 4),
             make_shared<optim::CosineAnnealingLR>(o, 12), make_shared<optim::StepLR>(o, 3, 0.5)};
         return make_shared<optim::SequentialLR>(o, s, std::vector<int64_t>{5, 17});
       }},
      {"chained",
       [](auto& o) {
         std::vector<std::shared_ptr<optim::LRScheduler>> s = {
             make_shared<optim::ExponentialLR>(o, 0.95),
             make_shared<optim::MultiStepLR>(o, std::vector<int64_t>{10, 20}, 0.5)};
         return make_shared<optim::ChainedScheduler>(s);
       }},
  };
}

void check_step(const Case& c, Setup& s, size_t i) {
  const json& want = G()[c.name];
  const std::string mkey = c.adam ? "beta1" : "momentum";
  for (size_t g = 0; g < 2; ++g) {
    const double lr = s.opt->param_groups()[g].lr();
    const double w = want["lr"][i][g].get<double>();
    CHECK_MESSAGE(std::abs(lr - w) <= 1e-12 * std::abs(w), c.name, " step ", i, " group ", g,
                  ": lr ", lr, " vs ", w);
    const double m = s.opt->param_groups()[g].get(mkey);
    const double wm = want["momentum"][i][g].get<double>();
    CHECK_MESSAGE(std::abs(m - wm) <= 1e-12, c.name, " step ", i, ": momentum ", m, " vs ", wm);
  }
}

}  // namespace

TEST_CASE("lr_scheduler: sequences match PyTorch") {
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    Setup s(c.adam, c.momentum);
    auto sched = c.make(*s.opt);
    const size_t n = G()[c.name]["lr"].size();
    REQUIRE(n >= 30);
    for (size_t i = 0; i < n; ++i) {
      check_step(c, s, i);
      CHECK(sched->get_last_lr()[1] == s.opt->param_groups()[1].lr());
      s.opt->step();
      sched->step();
    }
  }
}

TEST_CASE("lr_scheduler: state_dict round trip resumes identically") {
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    Setup s(c.adam, c.momentum);
    auto sched = c.make(*s.opt);
    for (int i = 0; i < 12; ++i) sched->step();
    auto osd = load_safetensors_bytes(save_safetensors_bytes(s.opt->state_dict()));
    auto ssd = load_safetensors_bytes(save_safetensors_bytes(sched->state_dict()));
    CHECK(ssd.at("last_epoch").item<double>() == 12);
    Setup s2(c.adam, c.momentum);
    auto sched2 = c.make(*s2.opt);
    s2.opt->load_state_dict(osd);
    sched2->load_state_dict(ssd);
    CHECK(sched2->get_last_lr() == sched->get_last_lr());
    for (size_t i = 12; i < G()[c.name]["lr"].size(); ++i) {
      check_step(c, s2, i);
      sched2->step();
    }
  }
}

TEST_CASE("lr_scheduler: hand-worked values and initial_lr") {
  Setup s;
  optim::StepLR sched(*s.opt, 2, 0.1);
  CHECK(s.opt->param_groups()[0].get("initial_lr") == 0.1);
  CHECK(sched.get_last_lr() == std::vector<double>{0.1, 0.5});
  sched.step();
  CHECK(sched.last_epoch() == 1);
  CHECK(sched.get_last_lr()[1] == 0.5);
  sched.step();
  CHECK(sched.get_last_lr()[1] == doctest::Approx(0.05).epsilon(1e-15));
  // ExponentialLR closed form via step_to (PyTorch's step(epoch))
  Setup s2;
  optim::ExponentialLR e(*s2.opt, 0.5);
  e.step_to(3);
  CHECK(e.get_last_lr()[0] == doctest::Approx(0.1 * 0.125).epsilon(1e-15));
}

TEST_CASE("lr_scheduler: errors") {
  Setup s;
  CHECK_THROWS_WITH_AS(optim::StepLR(*s.opt, 0), doctest::Contains("step_size"), Error);
  CHECK_THROWS_WITH_AS(optim::LinearLR(*s.opt, 0.0), doctest::Contains("Starting"), Error);
  CHECK_THROWS_WITH_AS(optim::CosineAnnealingLR(*s.opt, 0), doctest::Contains("T_max"), Error);
  CHECK_THROWS_WITH_AS(optim::OneCycleLR(*s.opt, 1.0, 0), doctest::Contains("total_steps"), Error);
  CHECK_THROWS_WITH_AS(optim::OneCycleLR(*s.opt, 1.0, 10, 1.5), doctest::Contains("pct_start"),
                       Error);
  {
    Setup t;
    optim::OneCycleLR oc(*t.opt, 1.0, 3);
    oc.step();
    oc.step();
    oc.step();
    CHECK_THROWS_WITH_AS(oc.step(), doctest::Contains("Tried to step 5 times"), Error);
  }
  Setup other;
  auto a = std::make_shared<optim::ExponentialLR>(*s.opt, 0.9);
  auto b = std::make_shared<optim::ExponentialLR>(*other.opt, 0.9);
  CHECK_THROWS_WITH_AS(optim::SequentialLR(*s.opt, {a, b}, {3}),
                       doctest::Contains("same optimizer"), Error);
  CHECK_THROWS_WITH_AS(optim::SequentialLR(*s.opt, {a, a}, {3, 4}),
                       doctest::Contains("number of milestone"), Error);
  CHECK_THROWS_WITH_AS(optim::ChainedScheduler({a, b}), doctest::Contains("same optimizer"), Error);
  auto sd = a->state_dict();
  sd.erase("base_lrs.1");
  CHECK_THROWS_WITH_AS(a->load_state_dict(sd), doctest::Contains("base_lrs.1"), Error);
}
