// Core layers: Linear/Conv2d/Dropout/activations/pooling/Flatten forward values against
// reference computations, default init statistics, nn::init, gradchecks, and the MNIST CNN.
#include <doctest/doctest.h>

#include <cmath>
#include <type_traits>

#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "nn/layers.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

TEST_CASE("layers: Linear forward, shapes and default init bounds") {
  Generator gen(7);
  nn::Linear lin(3, 2, true, &gen);
  CHECK(lin.weight.shape() == Shape{2, 3});
  CHECK(lin.bias.shape() == Shape{2});
  Tensor x = random_tensor({4, 3}, kFloat32, 1);
  Tensor y = lin(x);
  REQUIRE(y.shape() == Shape{4, 2});
  auto xv = to_f64(x), wv = to_f64(lin.weight), bv = to_f64(lin.bias);
  std::vector<double> ref(8);
  for (int i = 0; i < 4; ++i)
    for (int o = 0; o < 2; ++o) {
      double s = bv[size_t(o)];
      for (int k = 0; k < 3; ++k) s += xv[size_t(i * 3 + k)] * wv[size_t(o * 3 + k)];
      ref[size_t(i * 2 + o)] = s;
    }
  check_close(y, ref);
  CHECK(lin(ones({5, 7, 3})).shape() == Shape{5, 7, 2});
  check_close(lin(noncontiguous(x)), ref);  // strided input
  auto lin64 = std::dynamic_pointer_cast<nn::Linear>(lin.clone());
  lin64->to(kFloat64);
  Tensor y64 = (*lin64)(x.to(kFloat64));
  CHECK(y64.dtype() == kFloat64);
  check_close(y64, ref, 1e-6, 1e-6);
  CHECK_THROWS_AS(lin(ones({2, 4})), Error);
  // Seeded init is reproducible.
  Generator g1(3), g2(3);
  check_close(nn::Linear(5, 4, true, &g1).weight, nn::Linear(5, 4, true, &g2).weight, 0, 0);
  // kaiming_uniform_(a=sqrt(5)) => U(-1/sqrt(fan_in), 1/sqrt(fan_in)); bias the same bound.
  nn::Linear big(100, 200);
  double bound = 0.1, mx = 0, sum = 0, sq = 0;
  for (double v : to_f64(big.weight)) {
    mx = std::max(mx, std::abs(v));
    sum += v;
    sq += v * v;
  }
  double n = 20000;
  CHECK(mx <= bound);
  CHECK(mx > 0.99 * bound);
  CHECK(std::abs(sum / n) < 0.005);
  CHECK(sq / n == doctest::Approx(bound * bound / 3).epsilon(0.05));
  for (double v : to_f64(big.bias)) CHECK(std::abs(v) <= bound);
  CHECK_FALSE(nn::Linear(3, 2, false).bias.defined());
}

TEST_CASE("layers: nn::init functions") {
  Tensor w = empty({64, 32, 3, 3});
  CHECK(nn::init::calculate_fan_in_and_fan_out(w) == std::pair<int64_t, int64_t>{288, 576});
  CHECK(nn::init::calculate_gain("relu") == doctest::Approx(std::sqrt(2.0)));
  CHECK(nn::init::calculate_gain("tanh") == doctest::Approx(5.0 / 3.0));
  CHECK(nn::init::calculate_gain("leaky_relu", 0.2) == doctest::Approx(std::sqrt(2.0 / 1.04)));
  CHECK(nn::init::calculate_gain("sigmoid") == 1.0);
  CHECK_THROWS_WITH_AS(nn::init::calculate_gain("foo"), doctest::Contains("foo"), Error);
  CHECK_THROWS_AS(nn::init::calculate_fan_in_and_fan_out(empty({3})), Error);
  auto stats = [](const Tensor& t) {
    auto v = to_f64(t);
    double mx = 0, sq = 0;
    for (double e : v) mx = std::max(mx, std::abs(e)), sq += e * e;
    return std::pair<double, double>{mx, std::sqrt(sq / double(v.size()))};
  };
  Generator gen(11);
  nn::init::kaiming_uniform_(w, 0, "fan_in", "relu", &gen);
  double b = std::sqrt(2.0) * std::sqrt(3.0 / 288);
  auto [mx, sd] = stats(w);
  CHECK(mx <= b);
  CHECK(mx > 0.99 * b);
  CHECK(sd == doctest::Approx(b / std::sqrt(3.0)).epsilon(0.03));
  nn::init::kaiming_normal_(w, 0, "fan_out", "relu", &gen);
  CHECK(stats(w).second == doctest::Approx(std::sqrt(2.0 / 576)).epsilon(0.03));
  nn::init::xavier_uniform_(w, 1, &gen);
  double xb = std::sqrt(6.0 / (288 + 576));
  CHECK(stats(w).first <= xb);
  CHECK(stats(w).first > 0.99 * xb);
  nn::init::xavier_normal_(w, 2, &gen);
  CHECK(stats(w).second == doctest::Approx(2 * std::sqrt(2.0 / 864)).epsilon(0.03));
  nn::init::normal_(w, 0, 0.5, &gen);
  CHECK(stats(w).second == doctest::Approx(0.5).epsilon(0.03));
  nn::init::uniform_(w, -2, -1, &gen);
  for (double v : to_f64(w)) REQUIRE((v >= -2 && v <= -1));
  CHECK_THROWS_WITH_AS(nn::init::kaiming_uniform_(w, 0, "fan_x"), doctest::Contains("fan_x"),
                       Error);
  // Parameters requiring grad are filled under NoGradGuard.
  Tensor p = zeros({2, 2}).requires_grad_();
  nn::init::constant_(p, 3);
  check_close(p, {3, 3, 3, 3}, 0, 0);
  nn::init::ones_(p);
  check_close(p, {1, 1, 1, 1}, 0, 0);
  nn::init::zeros_(p);
  check_close(p, {0, 0, 0, 0}, 0, 0);
  CHECK(p.requires_grad());
  CHECK(p.is_leaf());
}

TEST_CASE("layers: Conv2d forward, init and arguments") {
  Generator gen(5);
  nn::Conv2d conv(4, 6, {3, 2}, {.stride = {2, 1}, .padding = 1, .groups = 2}, &gen);
  CHECK(conv.weight.shape() == Shape{6, 2, 3, 2});
  double bound = 1.0 / std::sqrt(2.0 * 3 * 2);
  for (double v : to_f64(conv.weight)) CHECK(std::abs(v) <= bound);
  Tensor x = random_tensor({2, 4, 7, 5}, kFloat32, 3);
  Tensor y = conv(x);
  Conv2dParams p;
  p.stride[0] = 2;
  p.padding[0] = p.padding[1] = 1;
  p.groups = 2;
  check_close(y, conv2d(x, conv.weight, conv.bias, p), 0, 0);
  CHECK(y.shape() == Shape{2, 6, 4, 6});
  CHECK_THROWS_WITH_AS(nn::Conv2d(3, 4, 3, {.groups = 2}), doctest::Contains("divisible"), Error);
  CHECK_THROWS_AS(conv(ones({2, 3, 7, 5})), Error);
  CHECK_FALSE(nn::Conv2d(1, 1, 1, {.bias = false}).bias.defined());
}

TEST_CASE("layers: Dropout train and eval") {
  Generator gen(9);
  nn::Dropout d(0.5, &gen);
  Tensor x = full({1000}, 2.0).requires_grad_();
  Tensor y = d(x);
  sum(y).backward();
  auto yv = to_f64(y), gv = to_f64(x.grad());
  int kept = 0;
  for (size_t i = 0; i < yv.size(); ++i) {
    REQUIRE((yv[i] == 0.0 || yv[i] == 4.0));
    CHECK(gv[i] == yv[i] / 2.0);  // gradient is the mask
    kept += yv[i] != 0;
  }
  CHECK(kept > 400);
  CHECK(kept < 600);
  d.eval();
  CHECK(d(x).is_same(x));
  d.train();
  check_close(nn::Dropout(0.0)(x), x, 0, 0);
  check_close(nn::Dropout(1.0)(x), std::vector<double>(1000, 0.0), 0, 0);
  CHECK_THROWS_WITH_AS(nn::Dropout(1.5), doctest::Contains("1.5"), Error);
  CHECK_THROWS_AS(nn::functional::dropout(ones({2}, kInt64)), Error);
  CHECK(nn::functional::dropout(x, 0.3, false).is_same(x));
}

TEST_CASE("layers: activations, Softmax, Flatten") {
  Tensor x = from_f64({-2, -0.5, 0, 0.5, 1, 3}, {2, 3});
  check_close(nn::ReLU()(x), {0, 0, 0, 0.5, 1, 3});
  check_close(nn::Tanh()(x), tanh(x), 0, 0);
  check_close(nn::Sigmoid()(x), sigmoid(x), 0, 0);
  check_close(nn::SiLU()(x), silu(x), 0, 0);
  // torch.nn.GELU()(x) and GELU(approximate='tanh')(x)
  check_close(nn::GELU()(x), {-0.0455003, -0.1542687, 0, 0.3457313, 0.8413447, 2.9959502}, 1e-5,
              1e-6);
  check_close(nn::GELU("tanh")(x), {-0.0454023, -0.1542859, 0, 0.3457141, 0.8411920, 2.9963627},
              1e-5, 1e-6);
  CHECK_THROWS_WITH_AS(nn::GELU("fast"), doctest::Contains("fast"), Error);
  Tensor s = nn::Softmax(1)(x);
  auto sv = to_f64(s);
  CHECK(sv[0] + sv[1] + sv[2] == doctest::Approx(1.0));
  check_close(s, softmax(x, 1), 0, 0);
  Tensor z = ones({2, 3, 4, 5});
  CHECK(nn::Flatten()(z).shape() == Shape{2, 60});
  CHECK(nn::Flatten(0, 2)(z).shape() == Shape{24, 5});
  CHECK(nn::Flatten(-2)(z).shape() == Shape{2, 3, 20});
}

TEST_CASE("layers: MaxPool2d, AvgPool2d, AdaptiveAvgPool2d") {
  Tensor x = arange(0, 16, 1, kFloat32).reshape({1, 1, 4, 4});
  check_close(nn::MaxPool2d(2)(x), {5, 7, 13, 15});
  check_close(nn::AvgPool2d(2)(x), {2.5, 4.5, 10.5, 12.5});
  check_close(nn::MaxPool2d(3, {.stride = 1})(x), {10, 11, 14, 15});
  check_close(nn::AvgPool2d(2, {.stride = 2, .padding = 1})(x),
              {0, 0.75, 0.75, 3, 7.5, 4.5, 3, 6.75, 3.75});
  CHECK(nn::MaxPool2d(nn::Size2{2, 1})(x).shape() == Shape{1, 1, 2, 4});
  // Adaptive pooling: divisible and general windows against a naive reference.
  Tensor r = random_tensor({2, 3, 5, 7}, kFloat64, 4);
  auto rv = to_f64(r);
  for (auto [oh, ow] : {std::pair<int64_t, int64_t>{1, 1}, {5, 7}, {3, 2}, {2, 4}, {4, 7}}) {
    CAPTURE(oh);
    CAPTURE(ow);
    Tensor y = nn::AdaptiveAvgPool2d({oh, ow})(r);
    REQUIRE(y.shape() == Shape{2, 3, oh, ow});
    std::vector<double> ref;
    for (int64_t nc = 0; nc < 6; ++nc)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          int64_t h0 = i * 5 / oh, h1 = ((i + 1) * 5 + oh - 1) / oh;
          int64_t w0 = j * 7 / ow, w1 = ((j + 1) * 7 + ow - 1) / ow;
          double s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += rv[size_t(nc * 35 + h * 7 + w)];
          ref.push_back(s / double((h1 - h0) * (w1 - w0)));
        }
    check_close(y, ref);
  }
  CHECK(nn::AdaptiveAvgPool2d(2)(ones({3, 4, 4})).shape() == Shape{3, 2, 2});
  CHECK_THROWS_WITH_AS(nn::AdaptiveAvgPool2d(2)(ones({4, 4})), doctest::Contains("[4, 4]"), Error);
  // General case is differentiable.
  Tensor leaf = random_tensor({1, 2, 5, 7}, kFloat64, 8);
  leaf.requires_grad_();
  auto res = autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return nn::functional::adaptive_avg_pool2d(in[0], {3, 2});
      },
      {leaf});
  CHECK_MESSAGE(res.ok, res.message);
}

TEST_CASE("layers: gradcheck Linear and Conv2d modules in f64") {
  auto lin = std::make_shared<nn::Linear>(3, 2);
  lin->to(kFloat64);
  Tensor x = random_tensor({4, 3}, kFloat64, 2);
  x.requires_grad_();
  auto f = [&](const std::vector<Tensor>& in) {
    lin->weight = in[1];
    lin->bias = in[2];
    return (*lin)(in[0]);
  };
  auto r = autograd::gradcheck(f, {x, lin->weight, lin->bias});
  CHECK_MESSAGE(r.ok, r.message);
  auto conv = std::make_shared<nn::Conv2d>(
      4, 4, 3, nn::Conv2dOptions{.stride = 2, .padding = 1, .dilation = 1, .groups = 2});
  conv->to(kFloat64);
  Tensor xc = random_tensor({2, 4, 5, 5}, kFloat64, 3);
  xc.requires_grad_();
  auto g = [&](const std::vector<Tensor>& in) {
    conv->weight = in[1];
    conv->bias = in[2];
    return (*conv)(in[0]);
  };
  auto r2 = autograd::gradcheck(g, {xc, conv->weight, conv->bias});
  CHECK_MESSAGE(r2.ok, r2.message);
}

TEST_CASE("layers: MNIST CNN forward and backward") {
  using namespace nn;
  Generator gen(1);
  auto net = std::make_shared<Sequential>(Sequential{
      std::make_shared<Conv2d>(1, 32, 3, Conv2dOptions{}, &gen), std::make_shared<ReLU>(),
      std::make_shared<Conv2d>(32, 64, 3, Conv2dOptions{}, &gen), std::make_shared<ReLU>(),
      std::make_shared<MaxPool2d>(2), std::make_shared<Dropout>(0.25, &gen),
      std::make_shared<Flatten>(), std::make_shared<Linear>(9216, 128, true, &gen),
      std::make_shared<ReLU>(), std::make_shared<Dropout>(0.5, &gen),
      std::make_shared<Linear>(128, 10, true, &gen)});
  CHECK(net->num_parameters() == 320 + 18496 + 1179776 + 1290);
  Tensor x = random_tensor({2, 1, 28, 28}, kFloat32, 5);
  Tensor logits = net->forward(x);
  REQUIRE(logits.shape() == Shape{2, 10});
  Tensor target = from_f64({3, 7}, {2}, kInt64);
  cross_entropy(logits, target).backward();
  auto named = net->named_parameters();
  REQUIRE(named.size() == 8);
  for (auto& [n, p] : named) {
    CAPTURE(n);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().shape() == p.shape());
    double s = 0;
    for (double v : to_f64(p.grad())) s += std::abs(v);
    CHECK(s > 0);
  }
  // Eval mode is deterministic.
  net->eval();
  NoGradGuard ng;
  check_close(net->forward(x), net->forward(x), 0, 0);
}

TEST_CASE("layers: options structs with designated initializers") {
  // the positional trap does not compile: Conv2d(1, 16, 3, 1) (stride or padding?)
  static_assert(!std::is_constructible_v<nn::Conv2d, int, int, int, int>);
  static_assert(!std::is_constructible_v<nn::MaxPool2d, int, int>);
  static_assert(!std::is_constructible_v<nn::AvgPool2d, int, int, int>);
  static_assert(!std::is_constructible_v<nn::MultiheadAttention, int, int, double>);
  static_assert(!std::is_constructible_v<nn::BatchNorm2d, int, double>);  // eps or momentum?
  static_assert(!std::is_constructible_v<nn::BatchNorm1d, int, double>);
  static_assert(std::is_constructible_v<nn::BatchNorm2d, int, nn::BatchNormOptions>);
  static_assert(std::is_constructible_v<nn::Conv2d, int, int, int>);
  Tensor x = random_tensor({2, 1, 6, 6}, kFloat32, 11);
  nn::Conv2d same(1, 16, 3, {.padding = 1});
  CHECK(same(x).shape() == Shape{2, 16, 6, 6});
  auto strided =
      std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.stride = 2, .bias = false});
  CHECK(strided->forward(x).shape() == Shape{2, 4, 2, 2});
  CHECK_FALSE(strided->bias.defined());
  CHECK(strided->extra_repr() == "1, 4, kernel_size=(3, 3), stride=(2, 2), bias=False");
  Generator g1(7), g2(7);
  nn::Conv2d a(2, 3, 3, {}, &g1), b(2, 3, 3, {}, &g2);  // the generator is the trailing argument
  CHECK(bitwise_equal(a.weight, b.weight));
  // Linear: positional bias and LinearOptions
  CHECK_FALSE(nn::Linear(4, 3, {.bias = false}).bias.defined());
  CHECK_FALSE(nn::Linear(4, 3, false).bias.defined());
  CHECK(nn::Linear(4, 3).bias.defined());
  // pooling
  CHECK(nn::MaxPool2d(3, {.stride = 2, .padding = 1})(x).shape() == Shape{2, 1, 3, 3});
  CHECK(nn::MaxPool2d(3, {.stride = 2, .padding = 1}).extra_repr() ==
        "kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=False");
  CHECK(nn::MaxPool2d(2, {.ceil_mode = true})(random_tensor({1, 1, 5, 5})).shape() ==
        Shape{1, 1, 3, 3});
  Tensor ones4 = ones({1, 1, 2, 2});
  check_close(nn::AvgPool2d(2, {.stride = 1, .padding = 1, .count_include_pad = false})(ones4),
              std::vector<double>(9, 1.0));
  check_close(nn::AvgPool2d(2, {.stride = 1, .padding = 1})(ones4),
              {0.25, 0.5, 0.25, 0.5, 1, 0.5, 0.25, 0.5, 0.25});
  // LayerNorm: options, bias=false drops the parameter (torch 2.1)
  nn::LayerNorm ln(4, {.eps = 1e-3, .bias = false});
  CHECK(ln.eps == 1e-3);
  CHECK(ln.state_dict().size() == 1);
  CHECK(ln.state_dict().count("weight") == 1);
  CHECK(nn::LayerNorm(Shape{2, 4}, {.elementwise_affine = false}).parameters().empty());
  // attention layers
  nn::MultiheadAttention mha(8, 2, {.bias = false, .batch_first = false});
  CHECK_FALSE(mha.batch_first);
  CHECK_FALSE(mha.in_proj_bias.defined());
  nn::TransformerEncoderLayer enc(8, 2,
                                  {.dim_feedforward = 16, .dropout = 0.0, .norm_first = true});
  CHECK(enc.linear1->weight.shape() == Shape{16, 8});
  CHECK(enc.norm_first);
}
