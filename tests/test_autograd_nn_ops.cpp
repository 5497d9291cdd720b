// Autograd through the fused nn ops: conv2d, max/avg pooling, layer_norm, batch_norm and
// cross_entropy. gradcheck in f64 on small shapes, history rules (no grad_fn under
// NoGradGuard, integer/statistics outputs never get history, grads only where required).
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {
// f's gradients for non-contiguous leaves equal those for contiguous leaves with the same
// values (gradcheck itself needs contiguous inputs).
void check_noncontiguous_grads(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                               const std::vector<Shape>& shapes, uint64_t seed) {
  std::vector<Tensor> a, b;
  for (const Shape& s : shapes) {
    Tensor v = random_tensor(s, kFloat64, seed++, -1, 1);
    a.push_back(v.clone());
    b.push_back(noncontiguous(v));
    a.back().requires_grad_();
    b.back().requires_grad_();
  }
  Tensor ya = f(a), yb = f(b);
  Tensor g = random_tensor(ya.shape(), kFloat64, seed);
  ya.backward(g);
  yb.backward(g);
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    REQUIRE(b[i].grad().defined());
    check_close(b[i].grad(), to_f64(a[i].grad()));
  }
}
// Distinct values at least 0.05 apart (no ties within a max-pool window), shuffled.
Tensor distinct_leaf(const Shape& shape, uint64_t seed) {
  std::vector<double> v(size_t(shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0.0);
  std::mt19937_64 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  for (double& x : v) x = x * 0.05 - 1.0;
  Tensor x = from_f64(v, shape, kFloat64);
  x.requires_grad_();
  return x;
}
Tensor targets(const std::vector<double>& v, const Shape& shape) {
  return from_f64(v, shape, kInt64);
}
}  // namespace

TEST_CASE("conv2d gradcheck: x, weight and bias across stride, padding, groups, dilation") {
  struct Cfg {
    int64_t stride, padding, dilation, groups;
    bool bias;
  };
  for (Cfg c : {Cfg{1, 0, 1, 1, true}, Cfg{2, 1, 1, 1, true}, Cfg{1, 1, 1, 2, true},
                Cfg{1, 0, 2, 1, false}, Cfg{2, 1, 2, 2, true}}) {
    CAPTURE(c.stride);
    CAPTURE(c.padding);
    CAPTURE(c.dilation);
    CAPTURE(c.groups);
    Conv2dParams p;
    p.stride[0] = p.stride[1] = c.stride;
    p.padding[0] = p.padding[1] = c.padding;
    p.dilation[0] = p.dilation[1] = c.dilation;
    p.groups = c.groups;
    Tensor x = leaf({2, 4, 5, 5}, 1), w = leaf({4, 4 / c.groups, 3, 2}, 2);
    Tensor b = c.bias ? leaf({4}, 3) : Tensor();
    std::vector<Tensor> in{x, w};
    if (c.bias) in.push_back(b);
    GRADCHECK(
        [p](const std::vector<Tensor>& t) {
          return conv2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), p);
        },
        in);
  }
}

TEST_CASE("conv2d gradcheck: unbatched 3-D input and non-contiguous leaves") {
  Conv2dParams p;
  p.padding[0] = 1;
  p.stride[1] = 2;
  Tensor x = leaf({2, 4, 5}, 4), w = leaf({3, 2, 2, 3}, 5), b = leaf({3}, 6);
  GRADCHECK([p](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], p); }, {x, w, b});
  check_noncontiguous_grads(
      [p](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], p); },
      {{1, 2, 4, 4}, {3, 2, 2, 3}, {3}}, 7);
}

TEST_CASE("conv2d backward: history, bias grad = sum over N,H,W, only required grads") {
  Tensor x = leaf({2, 2, 4, 4}, 8), w = random_tensor({3, 2, 3, 3}, kFloat64, 9);
  Tensor b = leaf({3}, 10);
  Tensor y = conv2d(x, w, b);
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "Conv2dBackward");
  Tensor g = random_tensor(y.shape(), kFloat64, 11);
  y.backward(g);
  CHECK(!w.grad().defined());
  check_close(b.grad(), to_f64(sum(g, {0, 2, 3})));
  check_close(x.grad(), to_f64(conv2d_backward_input(g, w, x.shape(), {})));
  {
    NoGradGuard guard;
    CHECK(conv2d(x, w, b).grad_fn() == nullptr);
    CHECK(!conv2d(x, w, b).requires_grad());
  }
  Tensor xc = random_tensor({1, 2, 4, 4}, kFloat64, 12);
  CHECK(conv2d(xc, w).grad_fn() == nullptr);  // nothing requires grad
}

TEST_CASE("max_pool2d gradcheck away from ties (stride, padding, dilation, ceil_mode)") {
  struct Cfg {
    int64_t k, s, pad, dil;
    bool ceil;
  };
  for (Cfg c : {Cfg{2, 2, 0, 1, false}, Cfg{3, 1, 1, 1, false}, Cfg{2, 2, 1, 2, true},
                Cfg{3, 2, 1, 1, true}}) {
    CAPTURE(c.k);
    CAPTURE(c.s);
    CAPTURE(c.pad);
    CAPTURE(c.dil);
    Pool2dParams p = pool2d_params(c.k, c.s, c.pad);
    p.dilation[0] = p.dilation[1] = c.dil;
    p.ceil_mode = c.ceil;
    Tensor x = distinct_leaf({2, 2, 5, 6}, 20 + uint64_t(c.k));
    GRADCHECK([p](const std::vector<Tensor>& t) { return max_pool2d(t[0], p); }, {x});
  }
  Tensor x3 = distinct_leaf({2, 4, 4}, 30);
  GRADCHECK([](const std::vector<Tensor>& t) { return max_pool2d(t[0], pool2d_params(2)); }, {x3});
}

TEST_CASE("max_pool2d_with_indices: values get history, indices never") {
  Tensor x = distinct_leaf({1, 1, 4, 4}, 31);
  auto [v, idx] = max_pool2d_with_indices(x, pool2d_params(2));
  REQUIRE(v.grad_fn() != nullptr);
  CHECK(v.grad_fn()->name() == "MaxPool2DWithIndicesBackward");
  CHECK(idx.grad_fn() == nullptr);
  CHECK(!idx.requires_grad());
  v.backward(ones(v.shape(), kFloat64));
  CHECK(sum(x.grad()).item<double>() == 4.0);  // one max per 2x2 window
}

TEST_CASE("max_pool2d backward routes each output gradient to its argmax") {
  // x = [[1, 5], [3, 2]] -> max 5 at (0,1)
  Tensor x = from_f64({1, 5, 3, 2}, {1, 1, 2, 2}, kFloat64);
  x.requires_grad_();
  Tensor y = max_pool2d(x, pool2d_params(2));
  y.backward(from_f64({7}, {1, 1, 1, 1}, kFloat64));
  check_close(x.grad(), {0, 7, 0, 0});
  NoGradGuard guard;
  CHECK(max_pool2d(x, pool2d_params(2)).grad_fn() == nullptr);
}

TEST_CASE("avg_pool2d gradcheck (padding, count_include_pad, ceil_mode, divisor_override)") {
  for (int variant = 0; variant < 4; ++variant) {
    CAPTURE(variant);
    Pool2dParams p = pool2d_params(3, 2, 1);
    if (variant == 1) p.count_include_pad = false;
    if (variant == 2) p.ceil_mode = true;
    if (variant == 3) p.divisor_override = 5;
    Tensor x = leaf({2, 2, 5, 6}, 40 + uint64_t(variant));
    GRADCHECK([p](const std::vector<Tensor>& t) { return avg_pool2d(t[0], p); }, {x});
  }
  Tensor xn = leaf({3, 4, 4}, 45);
  GRADCHECK([](const std::vector<Tensor>& t) { return avg_pool2d(t[0], pool2d_params(2, 1)); },
            {xn});
  check_noncontiguous_grads(
      [](const std::vector<Tensor>& t) { return avg_pool2d(t[0], pool2d_params(2, 1)); },
      {{2, 3, 4, 4}}, 46);
  check_noncontiguous_grads(
      [](const std::vector<Tensor>& t) { return max_pool2d(t[0], pool2d_params(2)); },
      {{2, 3, 4, 4}}, 47);
  Tensor y = avg_pool2d(xn, pool2d_params(2));
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "AvgPool2DBackward");
  NoGradGuard guard;
  CHECK(avg_pool2d(xn, pool2d_params(2)).grad_fn() == nullptr);
}

TEST_CASE("layer_norm gradcheck: x, weight, bias, with and without affine params") {
  Tensor x = leaf({3, 2, 4}, 50), w = leaf({2, 4}, 51), b = leaf({2, 4}, 52);
  GRADCHECK(
      [](const std::vector<Tensor>& t) {
        return layer_norm(t[0], {2, 4}, t[1], t[2]).out;
      },
      {x, w, b});
  GRADCHECK([](const std::vector<Tensor>& t) { return layer_norm(t[0], {4}).out; }, {x});
  Tensor xn = leaf({3, 5}, 53), w1 = leaf({5}, 54);
  GRADCHECK([](const std::vector<Tensor>& t) { return layer_norm(t[0], {5}, t[1]).out; }, {xn, w1});
  Tensor b1 = leaf({5}, 55);
  GRADCHECK([](const std::vector<Tensor>& t) { return layer_norm(t[0], {5}, Tensor(), t[1]).out; },
            {xn, b1});
}

TEST_CASE("layer_norm: only out gets history and grads only for inputs that require them") {
  Tensor x = leaf({2, 3}, 56), w = random_tensor({3}, kFloat64, 57), b = leaf({3}, 58);
  LayerNormResult r = layer_norm(x, {3}, w, b);
  REQUIRE(r.out.grad_fn() != nullptr);
  CHECK(r.out.grad_fn()->name() == "NativeLayerNormBackward");
  CHECK(r.mean.grad_fn() == nullptr);
  CHECK(r.rstd.grad_fn() == nullptr);
  Tensor g = random_tensor({2, 3}, kFloat64, 59);
  r.out.backward(g);
  CHECK(!w.grad().defined());
  check_close(b.grad(), to_f64(sum(g, {0})));
  LayerNormGrads ref = layer_norm_backward(g, x, {3}, r.mean, r.rstd, w, true);
  check_close(x.grad(), to_f64(ref.grad_x));
  NoGradGuard guard;
  CHECK(layer_norm(x, {3}, w, b).out.grad_fn() == nullptr);
}

TEST_CASE("batch_norm gradcheck in train mode (4-D and 2-D, running stats updated)") {
  Tensor x = leaf({3, 2, 2, 3}, 60), w = leaf({2}, 61, 0.5, 1.5), b = leaf({2}, 62);
  Tensor rm = zeros({2}, kFloat64), rv = ones({2}, kFloat64);
  GRADCHECK(
      [&](const std::vector<Tensor>& t) {
        return batch_norm(t[0], t[1], t[2], rm, rv, true, 0.1, 1e-5).out;
      },
      {x, w, b});
  CHECK(!rm.requires_grad());
  CHECK(rm.grad_fn() == nullptr);
  CHECK(to_f64(rm)[0] != 0.0);  // the forwards updated the running mean
  check_noncontiguous_grads(
      [](const std::vector<Tensor>& t) {
        return batch_norm(t[0], t[1], t[2], Tensor(), Tensor(), true).out;
      },
      {{4, 3}, {3}, {3}}, 62);
  Tensor x2 = leaf({4, 3}, 63);
  GRADCHECK(
      [](const std::vector<Tensor>& t) {
        return batch_norm(t[0], Tensor(), Tensor(), Tensor(), Tensor(), true).out;
      },
      {x2});
  Tensor w3 = leaf({3}, 64, 0.5, 1.5);
  GRADCHECK(
      [](const std::vector<Tensor>& t) {
        return batch_norm(t[0], t[1], Tensor(), Tensor(), Tensor(), false).out;  // no stats
      },
      {x2, w3});
}

TEST_CASE("batch_norm gradcheck in eval mode (running stats are constants)") {
  Tensor x = leaf({2, 3, 2, 2}, 65), w = leaf({3}, 66), b = leaf({3}, 67);
  Tensor rm = random_tensor({3}, kFloat64, 68), rv = random_tensor({3}, kFloat64, 69, 0.5, 2);
  GRADCHECK(
      [&](const std::vector<Tensor>& t) { return batch_norm(t[0], t[1], t[2], rm, rv, false).out; },
      {x, w, b});
  BatchNormResult r = batch_norm(x, w, b, rm, rv, false);
  REQUIRE(r.out.grad_fn() != nullptr);
  CHECK(r.out.grad_fn()->name() == "NativeBatchNormBackward");
  CHECK(r.save_mean.grad_fn() == nullptr);
  // grad x = g * w / sqrt(rv + eps) per channel
  Tensor g = ones(x.shape(), kFloat64);
  r.out.backward(g);
  std::vector<double> gx = to_f64(x.grad()), wv = to_f64(w), rvv = to_f64(rv);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const size_t c = size_t((i / 4) % 3);
    CHECK(gx[size_t(i)] == doctest::Approx(wv[c] / std::sqrt(rvv[c] + 1e-5)));
  }
  check_close(b.grad(), {8, 8, 8});
  NoGradGuard guard;
  CHECK(batch_norm(x, w, b, rm, rv, true).out.grad_fn() == nullptr);
}

TEST_CASE("cross_entropy gradcheck: every reduction, ignore_index, label smoothing") {
  Tensor logits = leaf({4, 5}, 70, -2, 2);
  Tensor t = targets({1, 0, 4, 2}, {4});
  Tensor t_ign = targets({1, -100, 4, -100}, {4});
  for (Reduction red : {Reduction::none, Reduction::mean, Reduction::sum}) {
    for (double ls : {0.0, 0.2}) {
      CAPTURE(int(red));
      CAPTURE(ls);
      GRADCHECK(
          [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, red, -100, ls); },
          {logits});
      GRADCHECK(
          [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t_ign, red, -100, ls); },
          {logits});
    }
  }
  // custom ignore_index on [N,C,d] logits
  Tensor l3 = leaf({2, 3, 4}, 71);
  Tensor t3 = targets({0, 2, 1, 1, 2, 1, 0, 1}, {2, 4});
  check_noncontiguous_grads(
      [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t3, Reduction::none); },
      {{2, 3, 4}}, 73);
  for (Reduction red : {Reduction::none, Reduction::mean, Reduction::sum}) {
    CAPTURE(int(red));
    GRADCHECK([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t3, red, 1, 0.1); },
              {l3});
  }
  // unbatched [C] logits, 0-d target
  Tensor l1 = leaf({6}, 72);
  Tensor t1 = targets({3}, {});
  GRADCHECK([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t1); }, {l1});
}

TEST_CASE("cross_entropy: loss gets history, lse never, hand-worked gradient") {
  // logits [[0, 0]], target 0, mean: d loss / d logits = softmax - onehot = [-0.5, 0.5]
  Tensor logits = from_f64({0, 0}, {1, 2}, kFloat64);
  logits.requires_grad_();
  CrossEntropyResult r = cross_entropy_forward(logits, targets({0}, {1}));
  REQUIRE(r.loss.grad_fn() != nullptr);
  CHECK(r.loss.grad_fn()->name() == "CrossEntropyBackward");
  CHECK(r.lse.grad_fn() == nullptr);
  CHECK(!r.lse.requires_grad());
  r.loss.backward();
  check_close(logits.grad(), {-0.5, 0.5});
  NoGradGuard guard;
  CHECK(cross_entropy(logits, targets({0}, {1})).grad_fn() == nullptr);
}

TEST_CASE("a small CNN chain backpropagates end to end") {
  Tensor x = leaf({2, 1, 6, 6}, 80), w = leaf({2, 1, 3, 3}, 81), b = leaf({2}, 82);
  Tensor t = targets({1, 0}, {2, 1, 1});
  GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        Tensor h = conv2d(in[0], in[1], in[2]);                               // [2,2,4,4]
        h = batch_norm(h, Tensor(), Tensor(), Tensor(), Tensor(), true).out;  // [2,2,4,4]
        h = max_pool2d(h, pool2d_params(2));                                  // [2,2,2,2]
        h = avg_pool2d(h, pool2d_params(2));                                  // [2,2,1,1]
        return cross_entropy(h, t);  // [N,C,1,1] logits, [N,1,1] target
      },
      {x, w, b});
}
