// nn normalisation layers, Embedding and losses: hand-worked values, naive f64 references,
// gradcheck of the functional losses, BatchNorm train/eval statistics, padding gradients, errors.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/gradcheck.h"
#include "nn/embedding.h"
#include "nn/loss.h"
#include "nn/normalization.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;
namespace F = minidl::nn::functional;

namespace {
Tensor idx(const std::vector<double>& v, const Shape& s) {
  return from_f64(v, s, kInt64);
}
}  // namespace

TEST_CASE("nll_loss: hand-worked values, reductions and ignore_index") {
  Tensor lp = from_f64({-1, -2, -3, -0.5, -1.5, -2.5}, {2, 3});
  Tensor t = idx({2, 0}, {2});
  check_close(F::nll_loss(lp, t, Reduction::none), {3.0, 0.5});
  check_close(F::nll_loss(lp, t, Reduction::sum), {3.5});
  check_close(F::nll_loss(lp, t), {1.75});
  Tensor ti = idx({2, -100}, {2});
  check_close(F::nll_loss(lp, ti, Reduction::none), {3.0, 0.0});
  check_close(F::nll_loss(lp, ti), {3.0});
  check_close(F::nll_loss(lp, idx({1, 1}, {2}), Reduction::mean, 1), {std::nan("")}, -1, -1);
  CHECK(std::isnan(F::nll_loss(lp, idx({1, 1}, {2}), Reduction::mean, 1).item<float>()));
  nn::NLLLoss m(Reduction::sum, 0);
  check_close(m(lp, t), {3.0});
  // unbatched [C]
  check_close(F::nll_loss(from_f64({-1, -2}, {2}), idx({1}, {})), {2.0});
}

TEST_CASE("nll_loss of log_softmax equals cross_entropy on [N,C,d] inputs, gradcheck") {
  Tensor x = random_tensor({3, 4, 5}, kFloat64, 1);
  Tensor t = random_tensor({3, 5}, kInt64, 2, 0, 4);
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum})
    check_close(F::nll_loss(log_softmax(x, 1), t, r), cross_entropy(x, t, r));
  Tensor t2 = idx({0, -100, 3, 1}, {4});
  GRADCHECK([&](const std::vector<Tensor>& in) { return F::nll_loss(in[0], t2); },
            {leaf({4, 5}, 3)});
  GRADCHECK([&](const std::vector<Tensor>& in) { return F::nll_loss(in[0], t, Reduction::none); },
            {leaf({3, 4, 5}, 4)});
}

TEST_CASE("nll_loss errors") {
  Tensor lp = from_f64({-1, -2, -3, -0.5, -1.5, -2.5}, {2, 3});
  CHECK_THROWS_WITH_AS(F::nll_loss(lp, idx({0, 3}, {2})), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(F::nll_loss(lp, idx({0, 1, 2}, {3})),
                       doctest::Contains("target shape [3] does not match input shape [2, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(F::nll_loss(lp, from_f64({0, 1}, {2})), doctest::Contains("int64"), Error);
}

TEST_CASE("mse_loss: values, reductions, f32/f64/f16, gradcheck") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    Tensor a = from_f64({1, 2, 3}, {3}, dt), b = from_f64({0, 2, 5}, {3}, dt);
    check_close(F::mse_loss(a, b, Reduction::none), {1, 0, 4});
    check_close(F::mse_loss(a, b, Reduction::sum), {5});
    check_close(nn::MSELoss()(a, b), {5.0 / 3});
  }
  Tensor y = random_tensor({2, 3}, kFloat64, 9);
  GRADCHECK([&](const std::vector<Tensor>& in) { return F::mse_loss(in[0], y); },
            {leaf({2, 3}, 5)});
  GRADCHECK([&](const std::vector<Tensor>& in) { return F::mse_loss(in[0], in[1]); },
            {leaf({2, 3}, 6), leaf({2, 3}, 7)});
  CHECK_THROWS_WITH_AS(F::mse_loss(ones({2, 3}), ones({4})), doctest::Contains("mse_loss"), Error);
}

TEST_CASE("binary_cross_entropy_with_logits: naive reference, pos_weight, weight, stability") {
  Tensor x = random_tensor({4, 3}, kFloat64, 11, -4, 4);
  Tensor y = random_tensor({4, 3}, kFloat64, 12, 0, 1);
  Tensor pw = from_f64({0.5, 2.0, 3.0}, {3}, kFloat64);
  Tensor w = random_tensor({4, 3}, kFloat64, 13, 0, 2);
  auto xs = to_f64(x), ys = to_f64(y), ws = to_f64(w), pws = to_f64(pw);
  std::vector<double> ref, ref_pw, ref_w;
  for (size_t i = 0; i < xs.size(); ++i) {
    double s = 1 / (1 + std::exp(-xs[i]));
    ref.push_back(-(ys[i] * std::log(s) + (1 - ys[i]) * std::log(1 - s)));
    ref_pw.push_back(-(pws[i % 3] * ys[i] * std::log(s) + (1 - ys[i]) * std::log(1 - s)));
    ref_w.push_back(ws[i] * ref.back());
  }
  check_close(F::binary_cross_entropy_with_logits(x, y, {}, Reduction::none), ref);
  check_close(F::binary_cross_entropy_with_logits(x, y, {}, Reduction::none, pw), ref_pw);
  check_close(F::binary_cross_entropy_with_logits(x, y, w, Reduction::none), ref_w);
  double mean = 0;
  for (double v : ref_pw) mean += v / double(ref_pw.size());
  check_close(nn::BCEWithLogitsLoss(Reduction::mean, pw)(x, y), {mean});
  // large logits stay finite: log(1+exp(100)) = 100
  Tensor big = from_f64({100, -100, 100, -100}, {4});
  Tensor yb = from_f64({1, 1, 0, 0}, {4});
  check_close(F::binary_cross_entropy_with_logits(big, yb, {}, Reduction::none),
              {0.0, 100.0, 100.0, 0.0}, 1e-6, 1e-6);
  GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return F::binary_cross_entropy_with_logits(in[0], y, w, Reduction::sum, pw);
      },
      {leaf({4, 3}, 14, -3, 3)});
  GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return F::binary_cross_entropy_with_logits(in[0], in[1]);
      },
      {leaf({4, 3}, 15, -3, 3), leaf({4, 3}, 16, 0, 1)});
  CHECK_THROWS_WITH_AS(F::binary_cross_entropy_with_logits(ones({2, 3}), ones({3, 2})),
                       doctest::Contains("target shape [3, 2] must be the same as input shape"),
                       Error);
}

TEST_CASE("CrossEntropyLoss module matches the op with ignore_index and label_smoothing") {
  Tensor x = random_tensor({5, 4}, kFloat32, 21);
  Tensor t = idx({0, 3, -1, 2, 1}, {5});
  nn::CrossEntropyLoss m(Reduction::mean, -1, 0.1);
  check_close(m(x, t), cross_entropy(x, t, Reduction::mean, -1, 0.1));
  CHECK(m.name() == "CrossEntropyLoss");
  auto c = std::dynamic_pointer_cast<nn::CrossEntropyLoss>(m.clone());
  REQUIRE(c != nullptr);
  CHECK(c->ignore_index == -1);
  check_close((*c)(x, t), m(x, t));
  CHECK_THROWS(static_cast<nn::Module&>(m).forward(x));  // one-argument forward: not a loss
  CHECK_THROWS_WITH_AS(nn::CrossEntropyLoss(Reduction::mean, -100, 1.5),
                       doctest::Contains("label_smoothing"), Error);
  CHECK(nn::parse_reduction("sum") == Reduction::sum);
  CHECK_THROWS_WITH_AS(nn::parse_reduction("avg"), doctest::Contains("'avg'"), Error);
}

TEST_CASE("BatchNorm1d: train updates running stats, eval uses them") {
  nn::BatchNorm1d bn(2);
  Tensor x = from_f64({1, 10, 2, 20, 3, 30, 6, 40}, {4, 2});
  Tensor y = bn(x);
  // column 0: mean 3, biased var 3.5, unbiased 14/3; column 1: mean 25, var 125 / 500/3
  check_close(bn.running_mean, {0.3, 2.5});
  check_close(bn.running_var, {0.9 + 0.1 * 14.0 / 3, 0.9 + 0.1 * 500.0 / 3});
  CHECK(bn.num_batches_tracked.dtype() == kInt64);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  check_close(y.select(1, 0), {-2 / std::sqrt(3.5 + 1e-5), -1 / std::sqrt(3.5 + 1e-5), 0.0,
                               3 / std::sqrt(3.5 + 1e-5)});
  bn(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
  check_close(bn.running_mean, {0.57, 4.75});
  bn.eval();
  Tensor ye = bn(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
  auto rm = to_f64(bn.running_mean), rv = to_f64(bn.running_var);
  check_close(ye.select(0, 0),
              {(1 - rm[0]) / std::sqrt(rv[0] + 1e-5), (10 - rm[1]) / std::sqrt(rv[1] + 1e-5)});
  // [N,C,L] input, state_dict names
  nn::BatchNorm1d bn3(3);
  CHECK(bn3(random_tensor({2, 3, 4})).shape() == Shape{2, 3, 4});
  auto sd = bn3.state_dict();
  for (const char* k : {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"})
    CHECK(sd.count(k) == 1);
  CHECK(bn3.extra_repr() == "3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True");
  CHECK_THROWS_WITH_AS(bn3(ones({2, 3, 4, 5})),
                       doctest::Contains("BatchNorm1d: expected 2D [N, C] or 3D [N, C, L] input, "
                                         "got shape [2, 3, 4, 5]"),
                       Error);
  CHECK_THROWS_WITH_AS(bn3(ones({2, 4})), doctest::Contains("[2, 4]"), Error);
}

TEST_CASE("BatchNorm2d: batch stats, cumulative momentum, no tracking, gradients, errors") {
  Tensor x = random_tensor({3, 2, 2, 2}, kFloat32, 31);
  nn::BatchNormOptions o;
  o.momentum = std::nullopt;  // cumulative average
  nn::BatchNorm2d bn(2, o);
  bn(x);
  Tensor m1 = mean(x, {0, 2, 3});
  check_close(bn.running_mean, m1);  // first step: factor 1
  Tensor x2 = random_tensor({3, 2, 2, 2}, kFloat32, 32);
  bn(x2);
  check_close(bn.running_mean, (m1 + mean(x2, {0, 2, 3})) / 2.0);
  check_close(bn.running_var, (var(x, {0, 2, 3}) + var(x2, {0, 2, 3})) / 2.0);
  nn::BatchNorm2d nt(2, {.affine = false, .track_running_stats = false});
  CHECK(nt.parameters().empty());
  CHECK(nt.buffers().empty());
  nt.eval();  // no running stats: batch statistics even in eval
  Tensor y = nt(x);
  check_close(mean(y, {0, 2, 3}), {0.0, 0.0}, 1e-5, 1e-5);
  nn::BatchNorm2d g(2);
  Tensor xl = x.to(kFloat64);
  xl.requires_grad_();
  sum(square(g(xl))).backward();
  CHECK(xl.grad().defined());
  CHECK(g.weight.grad().defined());
  CHECK_THROWS_WITH_AS(g(ones({2, 2, 3})),
                       doctest::Contains("BatchNorm2d: expected 4D [N, C, H, W] input, got shape "
                                         "[2, 2, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::BatchNorm2d(0), doctest::Contains("num_features"), Error);
}

TEST_CASE("LayerNorm: naive reference, parameters, repr, gradients") {
  nn::LayerNorm ln(Shape{3});
  {
    NoGradGuard guard;
    ln.weight.copy_(from_f64({1, 2, 3}, {3}));
    ln.bias.copy_(from_f64({0, 1, 0}, {3}));
  }
  Tensor x = random_tensor({4, 3}, kFloat32, 41);
  Tensor y = ln(x);
  auto xs = to_f64(x);
  std::vector<double> ref;
  for (int r = 0; r < 4; ++r) {
    double m = (xs[3 * r] + xs[3 * r + 1] + xs[3 * r + 2]) / 3, v = 0;
    for (int c = 0; c < 3; ++c) v += (xs[3 * r + c] - m) * (xs[3 * r + c] - m) / 3;
    for (int c = 0; c < 3; ++c)
      ref.push_back((xs[3 * r + c] - m) / std::sqrt(v + 1e-5) * (c + 1) + (c == 1 ? 1 : 0));
  }
  check_close(y, ref);
  CHECK(ln.extra_repr() == "(3,), eps=1e-05, elementwise_affine=True");
  CHECK(nn::LayerNorm(Shape{2, 3}, 1e-6, false).extra_repr() ==
        "(2, 3), eps=1e-06, elementwise_affine=False");
  CHECK(nn::LayerNorm(Shape{2, 3}, 1e-6, false).parameters().empty());
  sum(ln(x)).backward();
  CHECK(ln.weight.grad().defined());
  CHECK_THROWS(ln(ones({2, 4})));
}

// AMP O2 keeps normalisation layers in fp32 and feeds them half activations: the layer must
// give what it gives on an f32 copy of the input, rounded once, without making that copy.
TEST_CASE("BatchNorm2d and LayerNorm: a half input into fp32 parameters, no f32 copy") {
  for (DType dt : {kFloat16, kBFloat16}) {
    INFO("dtype ", dtype_name(dt));
    nn::BatchNorm2d bn(4), bn_ref(4);
    nn::LayerNorm ln(Shape{256}), ln_ref(Shape{256});
    bn.train();
    bn_ref.train();
    {
      NoGradGuard guard;
      for (Tensor* t : {&bn.weight, &bn_ref.weight}) t->copy_(random_tensor({4}, kFloat32, 60));
      for (Tensor* t : {&bn.bias, &bn_ref.bias}) t->copy_(random_tensor({4}, kFloat32, 61));
      for (Tensor* t : {&ln.weight, &ln_ref.weight}) t->copy_(random_tensor({256}, kFloat32, 62));
      for (Tensor* t : {&ln.bias, &ln_ref.bias}) t->copy_(random_tensor({256}, kFloat32, 63));
    }
    // x:[8,4,16,16] for BatchNorm2d, [64,256] for LayerNorm
    const std::vector<std::pair<nn::Module*, nn::Module*>> layers = {{&bn, &bn_ref},
                                                                     {&ln, &ln_ref}};
    const std::vector<Shape> shapes = {{8, 4, 16, 16}, {64, 256}};
    for (size_t k = 0; k < layers.size(); ++k) {
      nn::Module* layer = layers[k].first;
      nn::Module* ref = layers[k].second;
      const std::string name = k == 0 ? "BatchNorm2d" : "LayerNorm";
      INFO(name);
      auto run = [&](nn::Module* m, const Tensor& in) {
        return k == 0 ? static_cast<nn::BatchNorm2d*>(m)->forward(in)
                      : static_cast<nn::LayerNorm*>(m)->forward(in);
      };
      Tensor x = random_tensor(shapes[k], dt, 64 + k);
      x.requires_grad_();
      Tensor xf = x.detach().to(kFloat32);
      xf.requires_grad_();
      const Tensor gy = random_tensor(shapes[k], dt, 66 + k);
      Tensor y = run(layer, x), yr = run(ref, xf);
      CHECK(y.dtype() == dt);
      CHECK(bitwise_equal(y, yr.to(dt)));
      y.backward(gy);
      yr.backward(gy.to(kFloat32));
      REQUIRE(x.grad().defined());
      CHECK(x.grad().dtype() == dt);
      CHECK(bitwise_equal(x.grad(), xf.grad().to(dt)));
      const auto ps = layer->named_parameters(), rs = ref->named_parameters();
      REQUIRE(ps.size() == 2);
      for (size_t i = 0; i < ps.size(); ++i) {
        INFO(ps[i].first);
        CHECK(ps[i].second.grad().dtype() == kFloat32);
        CHECK(bitwise_equal(ps[i].second.grad(), rs[i].second.grad()));
      }
      const auto bs = layer->named_buffers(), rbs = ref->named_buffers();
      REQUIRE(bs.size() == rbs.size());
      for (size_t i = 0; i < bs.size(); ++i) {
        INFO(bs[i].first);
        CHECK(bitwise_equal(bs[i].second, rbs[i].second));
      }
      // Without autograd the layer allocates its output and the per-row/channel statistics.
      NoGradGuard guard;
      const Tensor xd = x.detach();
      reset_peak_memory_stats(kCPU);
      const int64_t before = memory_stats(kCPU).allocated;
      const Tensor out = run(layer, xd);
      const int64_t grew = memory_stats(kCPU).peak - before;
      CHECK(grew <= int64_t(out.nbytes()) + 4096);
    }
  }
}

TEST_CASE("Embedding: lookup, negative padding_idx, padding row gets no gradient") {
  nn::Embedding e(5, 3, -1);
  CHECK(*e.padding_idx == 4);
  check_close(e.weight.select(0, 4), {0.0, 0.0, 0.0});
  Tensor i = idx({0, 4, 2, 0, 4, 1}, {2, 3});
  Tensor y = e(i);
  CHECK(y.shape() == Shape{2, 3, 3});
  check_close(y.select(0, 0).select(0, 2), e.weight.select(0, 2));
  sum(y * 2.0).backward();
  Tensor g = e.weight.grad();
  check_close(g, {4, 4, 4, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0});
  CHECK(e.extra_repr() == "5, 3, padding_idx=4");
  // no padding: every referenced row gets gradient
  nn::Embedding e2(3, 2);
  sum(e2(idx({2, 2}, {2}))).backward();
  check_close(e2.weight.grad(), {0, 0, 0, 0, 2, 2});
  // padding row with a non-zero value still returns it but gets no gradient
  nn::Embedding e3(3, 2, 1);
  {
    NoGradGuard guard;
    e3.weight.fill_(1.0);
  }
  Tensor y3 = e3(idx({1, 0}, {2}));
  check_close(y3, {1, 1, 1, 1});
  sum(y3).backward();
  check_close(e3.weight.grad(), {1, 1, 0, 0, 0, 0});
  CHECK_THROWS_WITH_AS(nn::Embedding(5, 3, 5), doctest::Contains("padding_idx 5"), Error);
  CHECK_THROWS_WITH_AS(nn::Embedding(5, 3, -6), doctest::Contains("padding_idx -6"), Error);
  CHECK_THROWS(e(idx({7}, {1})));
}
