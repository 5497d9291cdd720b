// Scaled dot-product attention, MultiheadAttention and TransformerEncoderLayer: golden values
// from PyTorch (tools/golden/gen_attention.py: outputs, averaged weights, input gradients),
// hand-worked masks, gradcheck in f64, layout variants, state_dict names, errors.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/gradcheck.h"
#include "golden.h"
#include "nn/attention.h"

using namespace minidl;
using namespace testutil;
namespace F = minidl::nn::functional;

namespace {
nn::StateDict golden_state(const json& st) {
  nn::StateDict sd;
  for (auto it = st.begin(); it != st.end(); ++it)
    sd[it.key()] = golden_tensor(it.value(), kFloat64);
  return sd;
}
void load(nn::Module& m, const json& st) {
  m.to(kFloat64);
  auto r = m.load_state_dict(golden_state(st));
  CHECK(r.missing_keys.empty());
  CHECK(r.unexpected_keys.empty());
}
Tensor gleaf(const json& o) {
  Tensor t = golden_tensor(o, kFloat64);
  t.requires_grad_();
  return t;
}
Tensor gmask(const json& o) {
  return golden_tensor(o, kBool);
}
}  // namespace

TEST_CASE("attention_with_weights: hand-worked values and causal mask") {
  // two keys with equal scores -> uniform weights; causal -> first query sees only key 0
  Tensor q = from_f64({1, 0, 1, 0}, {2, 2}), k = from_f64({0, 1, 0, 1}, {2, 2});
  Tensor v = from_f64({1, 2, 3, 4}, {2, 2});
  auto r = F::attention_with_weights(q, k, v);
  check_close(r.weights, {0.5, 0.5, 0.5, 0.5});
  check_close(r.output, {2, 3, 2, 3});
  auto c = F::attention_with_weights(q, k, v, {}, true);
  check_close(c.weights, {1, 0, 0.5, 0.5});
  check_close(c.output, {1, 2, 2, 3});
  // bool mask true = masked equals is_causal; float mask is added to the scores
  Tensor m = from_f64({0, 1, 0, 0}, {2, 2}, kBool);
  check_close(F::attention_with_weights(q, k, v, m).output, c.output);
  Tensor fm = from_f64({0, std::log(3.0), 0, 0}, {2, 2});
  check_close(F::attention_with_weights(q, k, v, fm).weights, {0.25, 0.75, 0.5, 0.5});
  // scores scale by 1/sqrt(E): q.k = 2 vs 0 with E = 4 -> softmax([1, 0])
  Tensor q4 = from_f64({1, 1, 1, 1}, {1, 4}), k4 = from_f64({1, 1, 0, 0, 0, 0, 0, 0}, {2, 4});
  double e = std::exp(1.0);
  check_close(F::attention_with_weights(q4, k4, from_f64({1, 0}, {2, 1})).output, {e / (e + 1)});
  CHECK_THROWS_WITH_AS(F::attention_with_weights(q, k4, v),
                       doctest::Contains("attention_with_weights"), Error);
  CHECK_THROWS_WITH_AS(F::attention_with_weights(q, k, v, ones({3, 3})),
                       doctest::Contains("attention_with_weights"), Error);
}

TEST_CASE("attention_with_weights gradcheck with masks") {
  Tensor mask = from_f64({0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1}, {3, 4}, kBool);
  auto f = [&](const std::vector<Tensor>& in) {
    return F::attention_with_weights(in[0], in[1], in[2], mask, true).output;
  };
  std::vector<Tensor> in;
  uint64_t seed = 1;
  for (Shape s : {Shape{2, 3, 5}, Shape{2, 4, 5}, Shape{2, 4, 2}}) {
    in.push_back(random_tensor(s, kFloat64, seed++, -1, 1));
    in.back().requires_grad_();
  }
  auto r = autograd::gradcheck(f, in);
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("MultiheadAttention matches PyTorch golden values (outputs, weights, gradients)") {
  const json& g = golden("golden_attention.json")["mha"];
  nn::MultiheadAttention m(4, 2);
  load(m, g["state"]);
  m.eval();
  Tensor gout = golden_tensor(g["gout"], kFloat64);
  for (const json& c : g["cases"]) {
    CAPTURE(c["name"].get<std::string>());
    Tensor q = gleaf(c["q"]);
    Tensor k = q, v = q;
    if (!c["self"].get<bool>()) {
      k = gleaf(c["k"]);
      v = gleaf(c["v"]);
    }
    Tensor kpm = c.contains("key_padding_mask") ? gmask(c["key_padding_mask"]) : Tensor();
    Tensor am;
    if (c.contains("attn_mask"))
      am = c["name"] == "float_mask" ? golden_tensor(c["attn_mask"], kFloat64)
                                     : gmask(c["attn_mask"]);
    auto r = m.forward(q, k, v, kpm, true, am);
    check_close(r.output, golden_values(c["out"]), 1e-9, 1e-10);
    check_close(r.weights, golden_values(c["weights"]), 1e-9, 1e-10);
    sum(r.output * gout).backward();
    check_close(q.grad(), golden_values(c["grad_q"]), 1e-9, 1e-10);
    if (!c["self"].get<bool>()) {
      check_close(k.grad(), golden_values(c["grad_k"]), 1e-9, 1e-10);
      check_close(v.grad(), golden_values(c["grad_v"]), 1e-9, 1e-10);
    }
  }
}

TEST_CASE("TransformerEncoderLayer matches PyTorch golden values (post-norm relu, pre-norm gelu)") {
  for (const json& c : golden("golden_attention.json")["encoder"]) {
    const bool nf = c["norm_first"].get<bool>();
    CAPTURE(nf);
    nn::TransformerEncoderLayer layer(4, 2,
                                      {.dim_feedforward = 6,
                                       .dropout = 0.0,
                                       .activation = c["activation"].get<std::string>(),
                                       .layer_norm_eps = 1e-5,
                                       .batch_first = true,
                                       .norm_first = nf});
    load(layer, c["state"]);
    layer.eval();
    Tensor src = gleaf(c["src"]);
    Tensor out = layer.forward(src, {}, gmask(c["key_padding_mask"]));
    check_close(out, golden_values(c["out"]), 1e-9, 1e-10);
    sum(out * golden_tensor(c["gout"], kFloat64)).backward();
    check_close(src.grad(), golden_values(c["grad_src"]), 1e-9, 1e-10);
  }
}

TEST_CASE("MultiheadAttention: layouts, is_causal, unaveraged weights, parameters") {
  nn::MultiheadAttention m(4, 2);
  Tensor x = random_tensor({2, 3, 4}, kFloat32, 7);
  auto r = m.forward(x, x, x);
  CHECK(r.output.shape() == Shape{2, 3, 4});
  CHECK(r.weights.shape() == Shape{2, 3, 3});
  check_close(sum(r.weights, {2}), std::vector<double>(6, 1.0));
  // batch_first=false: same parameters, [T,B,E] layout
  nn::MultiheadAttention s(4, 2, {.batch_first = false});
  s.load_state_dict(m.state_dict());
  Tensor xs = x.transpose(0, 1);
  check_close(s.forward(xs, xs, xs).output.transpose(0, 1), r.output);
  // unbatched [T,E] equals batch element 0
  Tensor x0 = x.select(0, 0);
  auto u = m.forward(x0, x0, x0);
  check_close(u.output, r.output.select(0, 0));
  CHECK(u.weights.shape() == Shape{3, 3});
  // is_causal equals an explicit bool causal mask
  Tensor causal = from_f64({0, 1, 1, 0, 0, 1, 0, 0, 0}, {3, 3}, kBool);
  check_close(m.forward(x, x, x, {}, true, {}, true, true).output,
              m.forward(x, x, x, {}, true, causal).output);
  // per-head weights and need_weights=false
  auto ph = m.forward(x, x, x, {}, true, {}, false);
  CHECK(ph.weights.shape() == Shape{2, 2, 3, 3});
  check_close(mean(ph.weights, {1}), r.weights);
  CHECK(!m.forward(x, x, x, {}, false).weights.defined());
  // [B*H,T,S] mask
  Tensor m3 = causal.unsqueeze(0).expand({4, 3, 3}).contiguous();
  check_close(m.forward(x, x, x, {}, true, m3).output, m.forward(x, x, x, {}, true, causal).output);
  // parameter names as in PyTorch; bias=false drops the biases
  std::vector<std::string> names;
  for (auto& [n, p] : m.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                          "out_proj.bias"});
  CHECK(nn::MultiheadAttention(4, 2, {.bias = false}).named_parameters().size() == 2);
  // dropout only acts in training mode
  nn::MultiheadAttention d(4, 2, {.dropout = 0.5});
  d.load_state_dict(m.state_dict());
  d.eval();
  check_close(d.forward(x, x, x).output, r.output);
  d.train();
  auto dr = d.forward(x, x, x, {}, true, {}, false);  // dropped weights are 0 or scaled by 2
  int zeros_seen = 0;
  for (double w : to_f64(dr.weights)) zeros_seen += w == 0.0;
  CHECK(zeros_seen > 0);
}

TEST_CASE("MultiheadAttention and TransformerEncoderLayer errors and names") {
  CHECK_THROWS_WITH_AS(nn::MultiheadAttention(5, 2),
                       doctest::Contains("embed_dim 5 must be divisible by num_heads 2"), Error);
  nn::MultiheadAttention m(4, 2);
  Tensor x = random_tensor({2, 3, 4});
  CHECK_THROWS_WITH_AS(m.forward(x, x, x, {}, true, ones({3, 4}, kBool)),
                       doctest::Contains("attn_mask of shape [3, 4] should be [3, 3]"), Error);
  CHECK_THROWS_WITH_AS(m.forward(x, x, x, ones({2, 4}, kBool)),
                       doctest::Contains("key_padding_mask of shape [2, 4] should be [2, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(m.forward(random_tensor({2, 3, 5}), x, x),
                       doctest::Contains("expected embed_dim 4"), Error);
  CHECK_THROWS_WITH_AS(m.forward(x, random_tensor({2, 4, 4}), x), doctest::Contains("must match"),
                       Error);
  CHECK_THROWS_WITH_AS(
      nn::TransformerEncoderLayer(4, 2, {.dim_feedforward = 8, .activation = "tanh"}),
      doctest::Contains("relu/gelu"), Error);
  nn::TransformerEncoderLayer layer(4, 2, {.dim_feedforward = 8});
  std::vector<std::string> names;
  for (auto& [n, c] : layer.named_children()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"self_attn", "linear1", "dropout", "linear2", "norm1",
                                          "norm2", "dropout1", "dropout2"});
  CHECK(layer(x).shape() == Shape{2, 3, 4});
  // deep clone: same outputs, independent parameters
  layer.eval();
  auto copy = std::dynamic_pointer_cast<nn::TransformerEncoderLayer>(layer.clone());
  REQUIRE(copy != nullptr);
  check_close((*copy)(x), layer(x));
  CHECK(!copy->self_attn->in_proj_weight.is_same(layer.self_attn->in_proj_weight));
}
