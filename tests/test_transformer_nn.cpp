// GPT building blocks (nn/transformer.h, RMSNorm): gradcheck in f64, KV-cache equivalence
// (all at once = one by one = in chunks), masks, a nanoGPT-style block against PyTorch
// (tools/golden/gen_transformer_block.py), nanoGPT names, weight-decay groups, errors.
#include <doctest/doctest.h>

#include <cfloat>

#include "autograd/gradcheck.h"
#include "golden.h"
#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/transformer.h"
#include "optim/param_groups.h"

using namespace minidl;
using namespace testutil;

namespace {
// gradcheck of f(x) w.r.t. x and every parameter of m (gradcheck perturbs its inputs in place,
// so the module's own parameter tensors are the inputs).
void check_gradcheck(nn::Module& m, const Tensor& x,
                     const std::function<Tensor(const Tensor&)>& f) {
  m.to(kFloat64);
  std::vector<Tensor> inputs{x};
  for (auto& p : m.parameters()) inputs.push_back(p);
  auto res = autograd::gradcheck([&](const std::vector<Tensor>&) { return f(inputs[0]); }, inputs);
  INFO(res.message);
  CHECK(res.ok);
}
}  // namespace

TEST_CASE("RMSNorm: values, default eps, names, gradcheck") {
  nn::RMSNorm n(4);
  CHECK(n.named_parameters().size() == 1);
  CHECK(n.named_parameters()[0].first == "weight");
  CHECK(n.repr() == "RMSNorm((4,), eps=None, elementwise_affine=True)");
  Tensor x = from_f64({1, 2, 3, 4, -1, 0, 0, 1}, {2, 4}, kFloat64);
  n.to(kFloat64);
  Tensor y = n(x);
  // row 0: mean square 7.5; row 1: 0.5 (eps = DBL_EPSILON for f64)
  std::vector<double> expect;
  for (double v : {1., 2., 3., 4.}) expect.push_back(v / std::sqrt(7.5 + DBL_EPSILON));
  for (double v : {-1., 0., 0., 1.}) expect.push_back(v / std::sqrt(0.5 + DBL_EPSILON));
  check_close(y, expect, 1e-14, 1e-15);
  // f32 default eps is FLT_EPSILON: visible on a zero row (0 / sqrt(eps) = 0), a tiny row
  nn::RMSNorm n32(2);
  Tensor tiny = from_f64({1e-4, 1e-4}, {1, 2}, kFloat32);
  check_close(n32(tiny),
              {1e-4 / std::sqrt(1e-8 + FLT_EPSILON), 1e-4 / std::sqrt(1e-8 + FLT_EPSILON)}, 1e-5,
              0);
  nn::RMSNorm with_eps(Shape{2, 2}, 0.5, false);
  CHECK(with_eps.parameters().empty());
  Tensor z = from_f64({1, 1, 1, 1}, {1, 2, 2}, kFloat64);
  check_close(with_eps(z), std::vector<double>(4, 1 / std::sqrt(1.5)), 1e-14, 0);
  CHECK_THROWS_WITH_AS(n(from_f64({1, 2, 3}, {3})), doctest::Contains("normalized_shape"), Error);

  nn::RMSNorm g(Shape{3});
  g.to(kFloat64);
  {
    NoGradGuard ng;
    g.weight.copy_(from_f64({0.5, -1.5, 2}, {3}, kFloat64));
  }
  check_gradcheck(g, leaf({2, 2, 3}, 11), [&](const Tensor& in) { return g(in); });
}

TEST_CASE("CausalSelfAttention: nanoGPT names, causality, gradcheck") {
  manual_seed(1);
  auto a = std::make_shared<nn::CausalSelfAttention>(8, 2);
  std::vector<std::string> names;
  for (auto& [n, p] : a->named_parameters()) names.push_back(n);
  CHECK(names ==
        std::vector<std::string>{"c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias"});
  CHECK(a->c_attn->weight.shape() == Shape{24, 8});
  a->to(kFloat64);
  // Causal: changing the last position leaves the earlier outputs unchanged.
  Tensor x = random_tensor({2, 4, 8}, kFloat64, 3);
  Tensor y = (*a)(x);
  Tensor x2 = x.clone();
  x2.narrow(1, 3, 1).fill_(5.0);
  Tensor y2 = (*a)(x2);
  CHECK(bitwise_equal(y.narrow(1, 0, 3).contiguous(), y2.narrow(1, 0, 3).contiguous()));
  CHECK_FALSE(bitwise_equal(y.narrow(1, 3, 1).contiguous(), y2.narrow(1, 3, 1).contiguous()));
  auto small = std::make_shared<nn::CausalSelfAttention>(4, 2);
  check_gradcheck(*small, leaf({2, 3, 4}, 12), [&](const Tensor& in) { return (*small)(in); });
  CHECK_THROWS_WITH_AS(nn::CausalSelfAttention(6, 4), doctest::Contains("multiple of n_head"),
                       Error);
  CHECK_THROWS_WITH_AS((*a)(random_tensor({2, 4, 6}, kFloat64)), doctest::Contains("[B, T, 8]"),
                       Error);
}

TEST_CASE("TransformerBlock: names match nanoGPT, bias=false, gradcheck") {
  manual_seed(2);
  nn::TransformerBlock b(8, 2);
  std::vector<std::string> names;
  for (auto& [n, p] : b.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{
                     "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                     "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                     "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"});
  nn::TransformerBlock nb(8, 2, 0.0, false);
  CHECK(nb.state_dict().size() == 6);
  for (auto& [n, p] : nb.named_parameters()) CHECK(n.find("bias") == std::string::npos);
  auto g = std::make_shared<nn::TransformerBlock>(4, 2);
  g->to(kFloat64);
  {
    NoGradGuard ng;  // non-trivial norm parameters
    g->ln_1->weight.copy_(from_f64({0.7, 1.2, -0.9, 1.1}, {4}, kFloat64));
    g->ln_2->bias.copy_(from_f64({0.1, -0.2, 0.3, 0.05}, {4}, kFloat64));
  }
  check_gradcheck(*g, leaf({2, 3, 4}, 13), [&](const Tensor& in) { return (*g)(in); });
}

TEST_CASE("CausalSelfAttention: KV cache one token at a time equals the full sequence") {
  for (DType dt : {kFloat64, kFloat32}) {
    INFO(dtype_name(dt));
    manual_seed(3);
    nn::TransformerBlock b(8, 2);
    b.to(dt);
    b.eval();
    const int64_t T = 6;
    Tensor x = random_tensor({2, T, 8}, dt, 21);
    NoGradGuard ng;
    Tensor full = b(x);
    const double tol = dt == kFloat64 ? 1e-12 : 1e-6;
    // one by one
    nn::KVCache cache;
    std::vector<Tensor> steps;
    for (int64_t t = 0; t < T; ++t) {
      steps.push_back(b(x.narrow(1, t, 1), {.cache = &cache}));
      CHECK(cache.size() == t + 1);
    }
    CHECK(cache.k.shape() == Shape{2, 2, T, 4});
    check_close(cat(steps, 1), full, tol, tol);
    // a prompt of 2, then chunks of 3 and 1 (bottom-right causal alignment inside a chunk)
    nn::KVCache c2;
    Tensor y = cat({b(x.narrow(1, 0, 2), {.cache = &c2}), b(x.narrow(1, 2, 3), {.cache = &c2}),
                    b(x.narrow(1, 5, 1), {.cache = &c2})},
                   1);
    check_close(y, full, tol, tol);
    c2.reset();
    CHECK(c2.size() == 0);
  }
}

TEST_CASE("CausalSelfAttention: attn_mask combines with the causal mask, gradcheck with a cache") {
  manual_seed(4);
  auto a = std::make_shared<nn::CausalSelfAttention>(4, 2);
  a->to(kFloat64);
  Tensor x = random_tensor({1, 3, 4}, kFloat64, 5);
  // An all-true bool mask (true = attend) and an all-zero float mask change nothing.
  Tensor y = (*a)(x);
  check_close((*a)(x, {.attn_mask = full({3, 3}, true, kBool)}), y, 1e-14, 1e-15);
  check_close((*a)(x, {.attn_mask = zeros({3, 3}, kFloat64)}), y, 1e-14, 1e-15);
  // Masking key 0 for the last query (bool false / float -inf) matches dropping position 0
  // from what that query sees: compare with the cached run of positions 1..2 only.
  Tensor m = full({3, 3}, true, kBool);
  m.narrow(0, 2, 1).narrow(1, 0, 1).fill_(false);
  Tensor ym = (*a)(x, {.attn_mask = m});
  check_close(ym.narrow(1, 0, 2), y.narrow(1, 0, 2), 1e-14, 1e-15);
  Tensor y12 = (*a)(x.narrow(1, 1, 2));
  check_close(ym.narrow(1, 2, 1), y12.narrow(1, 1, 1), 1e-12, 1e-14);
  Tensor fm = zeros({3, 3}, kFloat64);
  fm.narrow(0, 2, 1).narrow(1, 0, 1).fill_(-INFINITY);
  check_close((*a)(x, {.attn_mask = fm}), ym, 1e-14, 1e-15);
  // gradcheck through a cache filled from a leaf: gradients flow into the cached keys/values
  Tensor prefix = leaf({1, 2, 4}, 31), step = leaf({1, 2, 4}, 32);
  std::vector<Tensor> inputs{prefix, step};
  for (auto& p : a->parameters()) inputs.push_back(p);
  auto res = autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        nn::KVCache c;
        (*a)(in[0], {.cache = &c});
        return (*a)(in[1], {.cache = &c});
      },
      inputs);
  INFO(res.message);
  CHECK(res.ok);
}

TEST_CASE("TransformerBlock: golden vs PyTorch (nanoGPT block), output and every gradient") {
  const json& g = golden("golden_transformer_block.json");
  const json& cfg = g["config"];
  for (const char* variant : {"bias", "no_bias"})
    for (DType dt : {kFloat64, kFloat32}) {
      const json& c = g[variant];
      const json& r = c[dt == kFloat64 ? "f64" : "f32"];
      INFO(variant << " " << dtype_name(dt));
      nn::TransformerBlock b(cfg["C"].get<int64_t>(), cfg["H"].get<int64_t>(), 0.0,
                             std::string(variant) == "bias");
      nn::StateDict sd;
      for (auto it = c["state"].begin(); it != c["state"].end(); ++it)
        sd[it.key()] = golden_tensor(it.value(), kFloat64).to(dt);
      b.to(dt);
      auto res = b.load_state_dict(sd);
      CHECK(res.missing_keys.empty());
      b.eval();
      Tensor x = golden_tensor(c["x"], dt);
      x.requires_grad_();
      Tensor y = b(x);
      sum(y * golden_tensor(c["gout"], dt)).backward();
      const double tol = dt == kFloat64 ? 1e-10 : 1e-5;
      check_close(y, golden_values(r["out"]), tol, tol);
      check_close(x.grad(), golden_values(r["grad_x"]), tol, tol);
      size_t n = 0;
      for (auto& [name, p] : b.named_parameters()) {
        INFO(name);
        REQUIRE(r["grads"].contains(name));
        check_close(p.grad(), golden_values(r["grads"][name]), tol, tol);
        ++n;
      }
      CHECK(n == r["grads"].size());
    }
}

TEST_CASE("TransformerEncoderLayer: activation gelu_tanh") {
  manual_seed(5);
  nn::TransformerEncoderLayer l(4, 2,
                                {.dim_feedforward = 8, .dropout = 0.0, .activation = "gelu_tanh"});
  nn::TransformerEncoderLayer e(4, 2, {.dim_feedforward = 8, .dropout = 0.0, .activation = "gelu"});
  e.load_state_dict(l.state_dict());
  l.eval();
  e.eval();
  Tensor x = random_tensor({1, 3, 4}, kFloat32, 6);
  NoGradGuard ng;
  // reference: the layer's feed-forward with gelu(tanh) written out
  Tensor h = (*l.norm1)(x + l.self_attn->forward(x));
  Tensor ff = (*l.linear2)(gelu((*l.linear1)(h), "tanh"));
  check_close(l(x), (*l.norm2)(h + ff), 1e-5, 1e-6);
  CHECK_FALSE(bitwise_equal(l(x), e(x)));
  CHECK_THROWS_WITH_AS(nn::TransformerEncoderLayer(
                           4, 2, {.dim_feedforward = 8, .dropout = 0.0, .activation = "tanh"}),
                       doctest::Contains("relu/gelu/gelu_tanh"), Error);
}

TEST_CASE("weight_decay_groups: dim >= 2 decays, tied parameters once") {
  struct Tiny : nn::Cloneable<Tiny> {
    std::shared_ptr<nn::Embedding> wte;
    std::shared_ptr<nn::TransformerBlock> h;
    std::shared_ptr<nn::Linear> lm_head;
    Tiny() {
      wte = std::make_shared<nn::Embedding>(10, 4);
      h = std::make_shared<nn::TransformerBlock>(4, 2);
      lm_head = std::make_shared<nn::Linear>(4, 10, false);
      lm_head->weight = wte->weight;  // tied
      register_module("wte", &wte);
      register_module("h", &h);
      register_module("lm_head", &lm_head);
    }
  };
  auto m = std::make_shared<Tiny>();
  auto groups = optim::weight_decay_groups(*m, 0.1);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].options.at("weight_decay") == 0.1);
  CHECK(groups[1].options.at("weight_decay") == 0.0);
  // decayed: wte (= lm_head, once), c_attn, attn.c_proj, c_fc, mlp.c_proj weights
  CHECK(groups[0].params.size() == 5);
  CHECK(groups[0].params[0].is_same(m->wte->weight));
  for (auto& p : groups[0].params) CHECK(p.dim() >= 2);
  CHECK(groups[1].params.size() == 8);  // 2 LayerNorms x 2 + 4 Linear biases
  for (auto& p : groups[1].params) CHECK(p.dim() < 2);
  int64_t total = 0;
  for (auto& gr : groups)
    for (auto& p : gr.params) total += p.numel();
  CHECK(total == m->num_parameters());
}
