// ReduceLROnPlateau (lr trajectories, state), AveragedModel (SWA/EMA values, buffers,
// n_averaged, deep copy) and update_bn against PyTorch 1.13 (tests/data/golden_layers_extra.json).
#include <doctest/doctest.h>

#include "data/dataloader.h"
#include "data/dataset.h"
#include "golden.h"
#include "nn/activation.h"
#include "optim/plateau.h"
#include "optim/swa_utils.h"

using namespace minidl;
using namespace testutil;

namespace {

const json& G() {
  return golden("golden_layers_extra.json");
}

optim::PlateauOptions options_of(const json& c) {
  optim::PlateauOptions o;
  o.mode = c["mode"].get<std::string>();
  o.factor = c["factor"].get<double>();
  o.patience = c["patience"].get<int64_t>();
  o.threshold = c["threshold"].get<double>();
  o.threshold_mode = c["threshold_mode"].get<std::string>();
  o.cooldown = c["cooldown"].get<int64_t>();
  o.min_lr = c["min_lr"].is_array() ? c["min_lr"].get<std::vector<double>>()
                                    : std::vector<double>{c["min_lr"].get<double>()};
  o.eps = c["eps"].get<double>();
  return o;
}

// Two groups (lr 0.1 and 0.05), as the golden's SGD.
struct TwoGroups {
  Tensor p1 = zeros({2}), p2 = zeros({3});
  std::unique_ptr<optim::SGD> opt;
  TwoGroups() {
    p1.requires_grad_();
    p2.requires_grad_();
    opt = std::make_unique<optim::SGD>(
        std::vector<optim::ParamGroup>{optim::ParamGroup({p1}),
                                       optim::ParamGroup({p2}, {{"lr", 0.05}})},
        0.1);
  }
};

std::shared_ptr<nn::Sequential> small_model() {
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 2), std::make_shared<nn::BatchNorm1d>(2)});
  m->to(kFloat64);
  return m;
}

nn::StateDict state_of(const json& j, const nn::StateDict& like) {
  nn::StateDict sd;
  for (auto& [k, v] : j.items()) sd[k] = golden_tensor(v, like.at(k).dtype());
  return sd;
}

}  // namespace

TEST_CASE(
    "ReduceLROnPlateau: lr trajectories match PyTorch (min/max, rel/abs, cooldown, min_lr, eps)") {
  int n = 0;
  for (const json& c : G()["plateau"]) {
    INFO("config ", c["config"].dump());
    TwoGroups tg;
    optim::ReduceLROnPlateau s(*tg.opt, options_of(c["config"]));
    const auto metrics = c["metrics"].get<std::vector<double>>();
    const json& traj = c["trajectory"];
    for (size_t i = 0; i < metrics.size(); ++i) {
      CAPTURE(i);
      s.step(metrics[i]);
      const auto lr = traj[i]["lr"].get<std::vector<double>>();
      CHECK(tg.opt->param_groups()[0].lr() == lr[0]);  // same arithmetic: exact
      CHECK(tg.opt->param_groups()[1].lr() == lr[1]);
      CHECK(s.get_last_lr() == lr);
      CHECK(s.best() == traj[i]["best"].get<double>());
      CHECK(s.num_bad_epochs() == traj[i]["num_bad_epochs"].get<int64_t>());
      CHECK(s.cooldown_counter() == traj[i]["cooldown_counter"].get<int64_t>());
      CHECK(s.last_epoch() == traj[i]["last_epoch"].get<int64_t>());
    }
    ++n;
  }
  CHECK(n == 8);
}

TEST_CASE("ReduceLROnPlateau: state_dict round trip resumes the same trajectory, errors") {
  const json& c = G()["plateau"][2];  // patience 1, cooldown 2
  const auto metrics = c["metrics"].get<std::vector<double>>();
  TwoGroups a, b;
  optim::ReduceLROnPlateau sa(*a.opt, options_of(c["config"]));
  for (size_t i = 0; i < 8; ++i) sa.step(metrics[i]);
  optim::ReduceLROnPlateau sb(*b.opt);  // defaults, replaced by the loaded state
  b.opt->load_state_dict(a.opt->state_dict());
  sb.load_state_dict(sa.state_dict());
  CHECK(sb.options().patience == 1);
  CHECK(sb.options().cooldown == 2);
  CHECK(sb.best() == sa.best());
  for (size_t i = 8; i < metrics.size(); ++i) {
    sa.step(metrics[i]);
    sb.step(metrics[i]);
    CHECK(b.opt->param_groups()[0].lr() == a.opt->param_groups()[0].lr());
    CHECK(b.opt->param_groups()[1].lr() == a.opt->param_groups()[1].lr());
    CHECK(sb.cooldown_counter() == sa.cooldown_counter());
  }
  auto sd = sa.state_dict();
  sd.erase("best");
  CHECK_THROWS_WITH_AS(sb.load_state_dict(sd), doctest::Contains("missing key `best`"), Error);
  TwoGroups t;
  CHECK_THROWS_WITH_AS(optim::ReduceLROnPlateau(*t.opt, {.factor = 1.0}),
                       doctest::Contains("Factor should be < 1.0"), Error);
  CHECK_THROWS_WITH_AS(optim::ReduceLROnPlateau(*t.opt, {.mode = "mean"}),
                       doctest::Contains("mode mean is unknown"), Error);
  CHECK_THROWS_WITH_AS(optim::ReduceLROnPlateau(*t.opt, {.min_lr = {0.1, 0.2, 0.3}}),
                       doctest::Contains("expected 2 min_lrs, got 3"), Error);
}

TEST_CASE("AveragedModel: SWA and EMA values, buffers and n_averaged match PyTorch") {
  const json& g = G()["averaged_model"];
  for (const json& r : g["results"]) {
    const std::string name = r["name"].get<std::string>();
    const bool use_buffers = r["use_buffers"].get<bool>();
    CAPTURE(name);
    auto model = small_model();
    model->load_state_dict(state_of(g["init"], model->state_dict()));
    optim::AvgFn fn =
        name.rfind("ema", 0) == 0 ? optim::ema_avg(g["decay"].get<double>()) : optim::AvgFn{};
    optim::AveragedModel avg(*model, fn, use_buffers);
    for (size_t u = 0; u < g["updates"].size(); ++u) {
      CAPTURE(u);
      model->load_state_dict(state_of(g["updates"][u], model->state_dict()));
      avg.update_parameters(*model);
      const json& want = r["after"][u];
      auto sd = avg.state_dict();
      CHECK(sd.size() == want.size());
      for (auto& [k, v] : want.items()) {
        CAPTURE(k);
        REQUIRE(sd.count(k));
        CHECK(sd.at(k).shape() == v["shape"].get<Shape>());
        check_close(sd.at(k), golden_values(v), 1e-15, 1e-15);
      }
    }
  }
}

TEST_CASE("AveragedModel: deep copy, forward, device/dtype, clone and errors") {
  auto model = small_model();
  optim::AveragedModel avg(*model, optim::ema_avg(0.5));
  CHECK(avg.n_averaged.dtype() == kInt64);
  CHECK(avg.n_averaged.item<int64_t>() == 0);
  auto names = avg.state_dict();
  CHECK(names.count("n_averaged") == 1);
  CHECK(names.count("module.0.weight") == 1);
  CHECK(names.count("module.1.running_mean") == 1);
  // a deep copy: the averaged parameters are not the model's
  for (size_t i = 0; i < model->parameters().size(); ++i)
    CHECK_FALSE(avg.parameters()[i].shares_storage(model->parameters()[i]));
  model->eval();
  avg.eval();
  Tensor x = random_tensor({4, 3}, kFloat64, 3);
  check_close(avg(x), (*model)(x), 0, 0);
  // first update copies, the second averages with decay 0.5
  std::vector<Tensor> before;
  for (const Tensor& p : model->parameters()) before.push_back(p.detach().clone());
  avg.update_parameters(*model);
  {
    NoGradGuard ng;
    for (Tensor p : model->parameters()) add_(p, Scalar(1.0));
  }
  avg.update_parameters(*model);
  CHECK(avg.n_averaged.item<int64_t>() == 2);
  for (size_t i = 0; i < before.size(); ++i)
    check_close(avg.parameters()[i], to_f64(add(before[i], Scalar(0.5))), 1e-15, 1e-15);
  auto copy = std::dynamic_pointer_cast<optim::AveragedModel>(avg.clone());
  REQUIRE(copy);
  CHECK(copy->n_averaged.item<int64_t>() == 2);
  CHECK_FALSE(copy->parameters()[0].shares_storage(avg.parameters()[0]));
  auto other = std::make_shared<nn::Linear>(3, 2);
  CHECK_THROWS_WITH_AS(avg.update_parameters(*other), doctest::Contains("has 4 parameters"), Error);
}

namespace {
// The golden's update_bn model: Linear(3,4), BatchNorm1d(4), ReLU, Linear(4,2),
// BatchNorm1d(2, momentum 0.3), in f64, loaded with the golden's stale state, in eval mode.
std::shared_ptr<nn::Sequential> bn_model(const json& g) {
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::BatchNorm1d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(4, 2),
      std::make_shared<nn::BatchNorm1d>(2, nn::BatchNormOptions{.momentum = 0.3})});
  m->to(kFloat64);
  m->load_state_dict(state_of(g["init"], m->state_dict()));
  m->eval();
  return m;
}

void check_bn_state(nn::Module& m, const json& g) {
  auto sd = m.state_dict();
  for (auto& [k, v] : g["after"].items()) {
    CAPTURE(k);
    REQUIRE(sd.count(k));
    check_close(sd.at(k), golden_values(v), 1e-12, 1e-12);
  }
  CHECK_FALSE(m.is_training());
  CHECK(*std::dynamic_pointer_cast<nn::BatchNorm1d>(m.children()[1])->opt.momentum == 0.1);
  CHECK(*std::dynamic_pointer_cast<nn::BatchNorm1d>(m.children()[4])->opt.momentum == 0.3);
}
}  // namespace

TEST_CASE("update_bn: recomputed BatchNorm statistics match PyTorch for every batch form") {
  const json& g = G()["update_bn"];
  std::vector<Tensor> inputs;
  for (const json& b : g["batches"]) inputs.push_back(golden_tensor(b, kFloat64));
  REQUIRE(inputs.size() == 3);
  SUBCASE("(input, target) pairs") {
    std::vector<std::pair<Tensor, Tensor>> batches;
    for (const Tensor& x : inputs) batches.emplace_back(x, zeros({x.size(0)}, kInt64));
    auto m = bn_model(g);
    optim::update_bn(batches, *m);
    check_bn_state(*m, g);
  }
  SUBCASE("tensors") {
    auto m = bn_model(g);
    optim::update_bn(inputs, *m);
    check_bn_state(*m, g);
  }
  SUBCASE("Examples (what a DataLoader yields)") {
    std::vector<data::Example> batches;
    for (const Tensor& x : inputs) batches.push_back({x, zeros({x.size(0)}, kInt64)});
    auto m = bn_model(g);
    optim::update_bn(batches, *m);
    check_bn_state(*m, g);
  }
  SUBCASE("a DataLoader's epoch (13 rows in batches of 5, 5, 3, one worker)") {
    auto ds = std::make_shared<data::TensorDataset>(cat(inputs, 0), zeros({13}, kInt64));
    data::DataLoader loader(ds, {.batch_size = 5, .num_workers = 1});
    auto m = bn_model(g);
    optim::update_bn(loader.epoch(0), *m);
    check_bn_state(*m, g);
  }
}

TEST_CASE("update_bn: no BatchNorm reads nothing, a failing forward restores momenta and mode") {
  const json& g = G()["update_bn"];
  std::vector<Tensor> wrong{zeros({2, 7}, kFloat64)};  // Linear(3, ...) rejects 7 features
  auto plain = std::make_shared<nn::Linear>(3, 2);
  plain->eval();
  CHECK_NOTHROW(optim::update_bn(wrong, *plain));  // not read: no BatchNorm
  CHECK_FALSE(plain->is_training());
  auto m = bn_model(g);
  CHECK_THROWS_AS(optim::update_bn(wrong, *m), Error);
  CHECK_FALSE(m->is_training());
  auto bn = std::dynamic_pointer_cast<nn::BatchNorm1d>(m->children()[4]);
  CHECK(*bn->opt.momentum == 0.3);
  // the statistics were reset before the pass (torch's reset_running_stats)
  CHECK(bn->num_batches_tracked.item<int64_t>() == 0);
  check_close(bn->running_var, ones({2}, kFloat64), 0, 0);
}
