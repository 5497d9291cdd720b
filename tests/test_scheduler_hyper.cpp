// LR schedulers keep their constructor's hyper-parameters in state_dict (as PyTorch does): a
// scheduler resumed with other constructor values follows the saved schedule, and says which
// constructed values the state dict replaced.
#include <doctest/doctest.h>

#include "optim/lr_scheduler.h"
#include "optim/plateau.h"
#include "optim/sgd.h"
#include "tensor/warning.h"
#include "test_util.h"

using namespace minidl;
using namespace minidl::optim;

namespace {
struct Run {
  Tensor w = zeros({2});
  SGD opt{std::vector<Tensor>{w}, 0.5};
};

// The lrs of `steps` more steps.
std::vector<double> lrs(LRScheduler& s, int steps) {
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) {
    s.step();
    out.push_back(s.get_last_lr()[0]);
  }
  return out;
}
}  // namespace

TEST_CASE("CosineAnnealingLR: T_max and eta_min are saved and restored, with a warning") {
  Run a;
  CosineAnnealingLR saved(a.opt, 10, 0.01);
  lrs(saved, 4);
  const auto sd = saved.state_dict();
  REQUIRE(sd.count("T_max") == 1);
  CHECK(sd.at("T_max").item<double>() == 10);
  CHECK(sd.at("eta_min").item<double>() == 0.01);
  const std::vector<double> expected = lrs(saved, 8);

  Run b;
  CosineAnnealingLR resumed(b.opt, 50);  // built with other values
  WarningCapture w;
  resumed.load_state_dict(sd);
  b.opt.param_groups()[0].lr() = sd.at("last_lr.0").item<double>();
  CHECK(
      w.contains("CosineAnnealingLR.load_state_dict: T_max = 10 from the state dict replaces "
                 "the constructed 50"));
  CHECK(w.contains("eta_min = 0.01 from the state dict replaces the constructed 0"));
  const std::vector<double> got = lrs(resumed, 8);
  for (size_t i = 0; i < got.size(); ++i)
    CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-14));
}

TEST_CASE("StepLR, MultiStepLR, ExponentialLR, LinearLR and OneCycleLR save their arguments") {
  Run a;
  CHECK(StepLR(a.opt, 3, 0.5).state_dict().at("step_size").item<double>() == 3);
  CHECK(ExponentialLR(a.opt, 0.9).state_dict().at("gamma").item<double>() == 0.9);
  auto lin = LinearLR(a.opt, 0.25, 1.0, 7).state_dict();
  CHECK(lin.at("start_factor").item<double>() == 0.25);
  CHECK(lin.at("total_iters").item<double>() == 7);
  CHECK(OneCycleLR(a.opt, 1.0, 20).state_dict().at("total_steps").item<double>() == 20);

  Run m;
  MultiStepLR saved(m.opt, {2, 5, 5}, 0.5);
  const auto sd = saved.state_dict();
  const Tensor ms = sd.at("milestones");
  REQUIRE(ms.numel() == 3);
  CHECK(ms.dtype() == kInt64);
  CHECK(ms.data_ptr<int64_t>()[2] == 5);  // repeats kept
  Run n;
  MultiStepLR resumed(n.opt, {100}, 0.5);
  WarningCapture w;
  resumed.load_state_dict(sd);
  CHECK(w.contains("milestones = [2, 5, 5] from the state dict replace the constructed [100]"));
  const auto want = lrs(saved, 6), got = lrs(resumed, 6);
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]));
}

TEST_CASE("scheduler state: equal values load silently, an older dict keeps the constructed ones") {
  Run a;
  StepLR s(a.opt, 3, 0.5);
  auto sd = s.state_dict();
  {
    WarningCapture w;
    s.load_state_dict(sd);
    CHECK(w.messages().empty());
  }
  sd.erase("step_size");
  sd.erase("gamma");
  Run b;
  StepLR t(b.opt, 4, 0.1);
  WarningCapture w;
  t.load_state_dict(sd);  // saved before hyper-parameters were recorded
  CHECK(w.messages().empty());
  CHECK(t.state_dict().at("step_size").item<double>() == 4);
  sd["step_size"] = full({2, 1}, 2.0, kFloat64);
  CHECK_THROWS_WITH_AS(t.load_state_dict(sd), doctest::Contains("step_size"), Error);
}

TEST_CASE("ReduceLROnPlateau says which constructed values its state dict replaces") {
  Run a;
  ReduceLROnPlateau saved(a.opt, {.factor = 0.5, .patience = 2});
  Run b;
  ReduceLROnPlateau resumed(b.opt, {.factor = 0.1, .patience = 2});
  WarningCapture w;
  resumed.load_state_dict(saved.state_dict());
  CHECK(
      w.contains("ReduceLROnPlateau.load_state_dict: the state dict replaces constructed "
                 "values: factor 0.1 -> 0.5"));
  CHECK_FALSE(w.contains("patience"));
  CHECK(resumed.options().factor == 0.5);
}
