// The gpt app's model (apps/gpt/model.h) against PyTorch 1.13 (tools/golden/gen_gpt.py): a
// 2-layer GPT's logits, loss and every gradient (f64 to 1e-10, f32 to 1e-5) and a 20-step
// AdamW trajectory with weight-decay groups, clipping and the warm-up + cosine schedule; plus
// KV-cached decoding equal to the full forward, and tied-weight handling.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "apps/gpt/model.h"
#include "golden.h"
#include "minidl.h"

using namespace minidl;
using namespace testutil;

namespace {

std::shared_ptr<gpt::GPT> golden_model(DType dt) {
  const json& g = golden("golden_gpt.json");
  const json& c = g["config"];
  gpt::GPTConfig cfg;
  cfg.vocab_size = c["vocab_size"], cfg.block_size = c["block_size"];
  cfg.n_embd = c["n_embd"], cfg.n_head = c["n_head"], cfg.n_layer = c["n_layer"];
  auto m = std::make_shared<gpt::GPT>(cfg);
  m->to(dt);
  nn::StateDict sd;
  for (auto& [name, t] : g["state_dict"].items()) sd[name] = golden_tensor(t, dt);
  m->load_state_dict(sd, true);
  return m;
}

Tensor lm_loss(const Tensor& logits, const Tensor& y) {
  return nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
}

}  // namespace

TEST_CASE("gpt model: logits, loss and gradients match PyTorch (f64 and f32)") {
  const json& g = golden("golden_gpt.json");
  for (DType dt : {kFloat64, kFloat32}) {
    CAPTURE(dtype_name(dt));
    auto m = golden_model(dt);
    // The head is tied to the token embedding: one tensor, listed once.
    CHECK(m->lm_head->weight.is_same(m->wte->weight));
    int64_t tied = 0;
    for (const auto& p : m->parameters()) tied += p.is_same(m->wte->weight);
    CHECK(tied == 1);
    Tensor x = golden_tensor(g["x"], kInt64), y = golden_tensor(g["y"], kInt64);
    Tensor logits = m->forward(x);
    check_close(logits, golden_values(g["logits"]));
    Tensor loss = lm_loss(logits, y);
    check_close(loss, std::vector<double>{g["loss"].get<double>()});
    loss.backward();
    auto params = m->named_parameters();
    CHECK(params.size() == g["grads"].size());
    for (const auto& [name, p] : params) {
      CAPTURE(name);
      REQUIRE(g["grads"].contains(name));
      REQUIRE(p.grad().defined());
      check_close(p.grad(), golden_values(g["grads"][name]));
    }
  }
}

TEST_CASE("gpt model: a 20-step AdamW trajectory with clipping and schedule matches PyTorch") {
  const json& g = golden("golden_gpt.json");
  const json& tr = g["trajectory"];
  auto m = golden_model(kFloat64);
  optim::AdamW opt(optim::weight_decay_groups(*m, 0.1), tr["lr"].get<double>(), {0.9, 0.99}, 1e-8,
                   0.1);
  Tensor xs = golden_tensor(tr["xs"], kInt64), ys = golden_tensor(tr["ys"], kInt64);
  const double lr = tr["lr"], min_lr = tr["min_lr"];
  const int64_t warm = tr["warmup"], decay = tr["decay"];
  auto losses = tr["losses"].get<std::vector<double>>();
  auto norms = tr["grad_norms"].get<std::vector<double>>();
  for (int64_t it = 0; it < int64_t(losses.size()); ++it) {
    CAPTURE(it);
    double r = double(it - warm) / double(decay - warm);
    double step_lr = it < warm
                         ? lr * double(it + 1) / double(warm + 1)
                         : min_lr + 0.5 * (1 + std::cos(std::numbers::pi * r)) * (lr - min_lr);
    for (auto& group : opt.param_groups()) group.lr() = step_lr;
    opt.zero_grad();
    Tensor loss = lm_loss(m->forward(xs.select(0, it)), ys.select(0, it));
    loss.backward();
    double norm = optim::clip_grad_norm_(m->parameters(), 1.0).item<double>();
    opt.step();
    CHECK(loss.item<double>() == doctest::Approx(losses[size_t(it)]).epsilon(1e-10));
    CHECK(norm == doctest::Approx(norms[size_t(it)]).epsilon(1e-9));
  }
  auto sd = m->state_dict();
  for (auto& [name, t] : tr["final_state"].items()) {
    CAPTURE(name);
    REQUIRE(sd.count(name));
    check_close(sd[name], golden_values(t), 1e-8, 1e-10);
  }
}

TEST_CASE("gpt model: KV-cached decoding equals the full forward, token by token") {
  auto m = golden_model(kFloat64);
  m->eval();
  NoGradGuard no_grad;
  Tensor x = golden_tensor(golden("golden_gpt.json")["x"], kInt64).slice(0, 0, 1);  // [1,7]
  Tensor full = m->forward(x);                                                      // [1,7,V]
  std::vector<nn::KVCache> caches;
  Tensor first = m->forward(x.slice(1, 0, 3), caches);  // a 3-token prompt, then one at a time
  check_close(first, full.slice(1, 0, 3), 1e-12, 1e-12);
  for (int64_t t = 3; t < x.size(1); ++t) {
    CAPTURE(t);
    Tensor step = m->forward(x.slice(1, t, t + 1), caches);
    check_close(step, full.slice(1, t, t + 1), 1e-12, 1e-12);
  }
  CHECK(caches[0].k.size(2) == x.size(1));
}

TEST_CASE("gpt model: generation is deterministic per seed and slides past block_size") {
  auto m = golden_model(kFloat32);
  Tensor prompt = tensor(std::vector<int64_t>{1, 2, 3}).reshape({1, 3});
  Generator g1(7), g2(7), g3(8);
  Tensor a = gpt::generate(*m, prompt, 20, 1.0, 0, g1);  // 23 tokens > block 8
  Tensor b = gpt::generate(*m, prompt, 20, 1.0, 0, g2);
  Tensor c = gpt::generate(*m, prompt, 20, 1.0, 3, g3);
  CHECK(a.shape() == Shape{1, 23});
  CHECK(bitwise_equal(a, b));
  CHECK_FALSE(bitwise_equal(a, c));
  CHECK(bitwise_equal(a.slice(1, 0, 3), prompt));
  CHECK_THROWS_WITH_AS(m->forward(tensor(std::vector<int64_t>(9, 0)).reshape({1, 9})),
                       doctest::Contains("longer than block_size 8"), Error);
}
