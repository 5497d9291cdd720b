// conv2d, max_pool2d, avg_pool2d (forward and backward): hand-worked values, PyTorch golden
// values (tests/data/golden_conv_pool.json from tools/golden/gen_conv_pool.py), naive f64 loops
// on random configs in every float dtype with non-contiguous inputs, and error messages.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>

#include "conv_pool_reference.h"
#include "golden.h"

using namespace minidl;
using namespace testutil;
using namespace conv_pool_reference;

namespace {

const DType kFloatTypes[] = {kFloat64, kFloat32, kFloat16, kBFloat16};

// Tolerances: f32 sums of ~100 products carry ~1e-6 absolute error.
std::pair<double, double> tol(DType dt) {
  if (dt == kFloat32) return {1e-5, 2e-5};
  if (dt == kFloat64) return {1e-10, 1e-10};
  return tolerance(dt);
}
void close(const Tensor& a, const std::vector<double>& e) {
  auto [r, t] = tol(a.dtype());
  check_close(a, e, r, t);
}
// As close(), for sums of `terms` products: rounding errors of a sum add up like a random walk,
// so the f32 absolute tolerance grows with sqrt(terms / 100). (The backends sum in different
// orders: oneDNN's weight gradient of conv1 sums 720 products in a different order than Eigen.)
void close_sum(const Tensor& a, const std::vector<double>& e, int64_t terms) {
  auto [r, t] = tol(a.dtype());
  if (a.dtype() == kFloat32) t *= std::sqrt(std::max(1.0, double(terms) / 100.0));
  check_close(a, e, r, t);
}

Conv2dParams conv_params(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                         int64_t groups) {
  Conv2dParams p;
  p.stride[0] = sh, p.stride[1] = sw, p.padding[0] = ph, p.padding[1] = pw;
  p.dilation[0] = dh, p.dilation[1] = dw, p.groups = groups;
  return p;
}

std::vector<double> jvec(const json& j) {
  return j.get<std::vector<double>>();
}
Shape jshape(const json& j) {
  return j.get<Shape>();
}

Pool2dParams jpool(const json& j) {
  Pool2dParams p;
  for (int i = 0; i < 2; ++i) {
    p.kernel[i] = j["kernel"][i], p.stride[i] = j["stride"][i];
    p.padding[i] = j["padding"][i], p.dilation[i] = j["dilation"][i];
  }
  p.ceil_mode = j["ceil_mode"], p.count_include_pad = j["count_include_pad"];
  p.divisor_override = j["divisor_override"];
  return p;
}

const json& load_golden() {
  return testutil::golden("golden_conv_pool.json");
}

}  // namespace

TEST_CASE("conv2d and pooling: hand-worked values") {
  std::vector<double> v(16);
  for (int i = 0; i < 16; ++i) v[size_t(i)] = i;
  for (DType dt : kFloatTypes) {
    Tensor x = from_f64(v, {1, 1, 4, 4}, dt);
    Tensor w = from_f64({1, 1, 1, 1}, {1, 1, 2, 2}, dt);
    Tensor out = conv2d(x, w, from_f64({0.5}, {1}, dt), conv_params(2, 2, 0, 0, 1, 1, 1));
    CHECK(out.shape() == Shape{1, 1, 2, 2});
    check_close(out, {10.5, 18.5, 42.5, 50.5});
    // padding 1, 3x3 ones kernel: corner sums
    Tensor w3 = from_f64(std::vector<double>(9, 1.0), {1, 1, 3, 3}, dt);
    Tensor o3 = conv2d(x, w3, {}, conv_params(3, 3, 1, 1, 1, 1, 1));
    check_close(o3, {0 + 1 + 4 + 5, 2 + 3 + 6 + 7, 8 + 9 + 12 + 13, 10 + 11 + 14 + 15});
    Tensor gx = conv2d_backward_input(from_f64({1, 2, 3, 4}, {1, 1, 2, 2}, dt), w, {1, 1, 4, 4},
                                      conv_params(2, 2, 0, 0, 1, 1, 1));
    check_close(gx, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
    Tensor gw = conv2d_backward_weight(from_f64({1, 0, 0, 1}, {1, 1, 2, 2}, dt), x, {1, 1, 2, 2},
                                       conv_params(2, 2, 0, 0, 1, 1, 1));
    check_close(gw, {0 + 10, 1 + 11, 4 + 14, 5 + 15});

    auto [mo, mi] = max_pool2d_with_indices(x, pool2d_params(2));
    check_close(mo, {5, 7, 13, 15});
    CHECK(mi.dtype() == kInt64);
    CHECK(mi.tolist<int64_t>() == std::vector<int64_t>{5, 7, 13, 15});
    Tensor mg = max_pool2d_backward(from_f64({1, 2, 3, 4}, {1, 1, 2, 2}, dt), mi, {1, 1, 4, 4},
                                    pool2d_params(2));
    check_close(mg, {0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4});
    check_close(avg_pool2d(x, pool2d_params(2)), {2.5, 4.5, 10.5, 12.5});
    Tensor ag = avg_pool2d_backward(from_f64({4, 8, 12, 16}, {1, 1, 2, 2}, dt), {1, 1, 4, 4},
                                    pool2d_params(2));
    check_close(ag, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
    // 3x3 window with padding 1, stride 2: corner window sees 4 cells of 9 (or of 4)
    Pool2dParams pp = pool2d_params(3, 2, 1);
    check_close(avg_pool2d(x, pp), {10.0 / 9, 24.0 / 9, 51.0 / 9, 90.0 / 9});
    pp.count_include_pad = false;
    check_close(avg_pool2d(x, pp), {10.0 / 4, 24.0 / 6, 51.0 / 6, 90.0 / 9});
    pp.divisor_override = 2;
    check_close(avg_pool2d(x, pp), {5, 12, 25.5, 45});
  }
}

TEST_CASE("conv2d and pooling: PyTorch golden values") {
  const json& data = load_golden();
  REQUIRE(data["conv2d"].size() >= 8);
  for (DType dt : kFloatTypes) {
    for (const json& c : data["conv2d"]) {
      INFO("conv2d case ", c["name"].get<std::string>(), " dtype ", dtype_name(dt));
      Conv2dParams p = conv_params(c["stride"][0], c["stride"][1], c["padding"][0], c["padding"][1],
                                   c["dilation"][0], c["dilation"][1], c["groups"]);
      Shape xs = jshape(c["x_shape"]), ws = jshape(c["w_shape"]);
      Tensor x = from_f64(jvec(c["x"]), xs, dt), w = from_f64(jvec(c["w"]), ws, dt);
      Tensor b = c["bias"].is_null() ? Tensor() : from_f64(jvec(c["bias"]), {ws[0]}, dt);
      Tensor out = conv2d(x, w, b, p);
      CHECK(out.shape() == jshape(c["out_shape"]));
      close(out, jvec(c["out"]));
      Tensor g = from_f64(jvec(c["grad_out"]), out.shape(), dt);
      close(conv2d_backward_input(g, w, xs, p), jvec(c["grad_x"]));
      close(conv2d_backward_weight(g, x, ws, p), jvec(c["grad_w"]));
    }
    for (const json& c : data["max_pool2d"]) {
      INFO("max_pool2d case ", c["name"].get<std::string>(), " dtype ", dtype_name(dt));
      Pool2dParams p = jpool(c["params"]);
      Shape xs = jshape(c["x_shape"]);
      auto [out, idx] = max_pool2d_with_indices(from_f64(jvec(c["x"]), xs, dt), p);
      CHECK(out.shape() == jshape(c["out_shape"]));
      check_close(out, jvec(c["out"]), 0, 0);  // inputs are exact in every dtype
      CHECK(idx.tolist<int64_t>() == c["indices"].get<std::vector<int64_t>>());
      Tensor g = from_f64(jvec(c["grad_out"]), out.shape(), dt);
      close(max_pool2d_backward(g, idx, xs, p), jvec(c["grad_x"]));
    }
    for (const json& c : data["avg_pool2d"]) {
      INFO("avg_pool2d case ", c["name"].get<std::string>(), " dtype ", dtype_name(dt));
      Pool2dParams p = jpool(c["params"]);
      Shape xs = jshape(c["x_shape"]);
      Tensor out = avg_pool2d(from_f64(jvec(c["x"]), xs, dt), p);
      CHECK(out.shape() == jshape(c["out_shape"]));
      close(out, jvec(c["out"]));
      Tensor g = from_f64(jvec(c["grad_out"]), out.shape(), dt);
      close(avg_pool2d_backward(g, xs, p), jvec(c["grad_x"]));
    }
  }
}

TEST_CASE("conv2d matches naive f64 loops on random configs") {
  std::mt19937 rng(42);
  auto pick = [&](int lo, int hi) {
    return int64_t(std::uniform_int_distribution<int>(lo, hi)(rng));
  };
  // {N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, groups}; the last rows are MNIST-like
  // shapes with a batch large enough for the per-image threading.
  std::vector<std::array<int64_t, 14>> cfgs = {{6, 8, 12, 12, 16, 3, 3, 1, 1, 0, 0, 1, 1, 1},
                                               {5, 1, 14, 14, 8, 3, 3, 1, 1, 0, 0, 1, 1, 1},
                                               {4, 6, 7, 9, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6},
                                               {3, 4, 6, 6, 8, 1, 1, 1, 1, 0, 0, 1, 1, 2},
                                               {0, 3, 5, 5, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1}};
  for (int k = 0; k < 14; ++k) {
    int64_t G = pick(1, 3), kh = pick(1, 4), kw = pick(1, 4), dh = pick(1, 2), dw = pick(1, 2);
    int64_t ph = pick(0, 2), pw = pick(0, 2);
    int64_t H = std::max<int64_t>(1, dh * (kh - 1) + 1 - 2 * ph) + pick(0, 5);
    int64_t W = std::max<int64_t>(1, dw * (kw - 1) + 1 - 2 * pw) + pick(0, 5);
    cfgs.push_back({pick(1, 3), G * pick(1, 3), H, W, G * pick(1, 3), kh, kw, pick(1, 3),
                    pick(1, 3), ph, pw, dh, dw, G});
  }
  uint64_t seed = 1;
  int iter = 0;
  for (const auto& c : cfgs) {
    Shape xs{c[0], c[1], c[2], c[3]}, ws{c[4], c[1] / c[13], c[5], c[6]};
    Conv2dParams p = conv_params(c[7], c[8], c[9], c[10], c[11], c[12], c[13]);
    for (DType dt : kFloatTypes) {
      INFO("x ", shape_str(xs), " w ", shape_str(ws), " stride ", c[7], ",", c[8], " pad ", c[9],
           ",", c[10], " dil ", c[11], ",", c[12], " groups ", c[13], " dtype ", dtype_name(dt));
      Tensor x = random_tensor(xs, dt, seed++), w = random_tensor(ws, dt, seed++);
      Tensor b = random_tensor({ws[0]}, dt, seed++);
      const bool use_bias = iter++ % 3 != 0;
      Shape os{xs[0], ws[0], conv_out(xs[2], ws[2], c[7], c[9], c[11]),
               conv_out(xs[3], ws[3], c[8], c[10], c[12])};
      Tensor g = random_tensor(os, dt, seed++);
      ConvRef r = conv_ref(to_f64(x), xs, to_f64(w), ws,
                           use_bias ? to_f64(b) : std::vector<double>{}, to_f64(g), p);
      Tensor out =
          conv2d(noncontiguous(x), noncontiguous(w), use_bias ? noncontiguous(b) : Tensor(), p);
      REQUIRE(out.shape() == r.out_shape);
      // Terms per sum: C/G*kh*kw per output, up to O/G*kh*kw per input gradient,
      // N*Ho*Wo per weight gradient.
      close_sum(out, r.out, ws[1] * ws[2] * ws[3]);
      close_sum(conv2d_backward_input(noncontiguous(g), noncontiguous(w), xs, p), r.grad_x,
                ws[0] / c[13] * ws[2] * ws[3]);
      close_sum(conv2d_backward_weight(noncontiguous(g), noncontiguous(x), ws, p), r.grad_w,
                os[0] * os[2] * os[3]);
    }
  }
}

TEST_CASE("conv2d: unbatched 3-D input and transposed (non-contiguous) input") {
  Tensor x = random_tensor({3, 6, 5}, kFloat32, 7);  // [C,W,H] transposed to [C,H,W]
  Tensor xt = x.transpose(1, 2);
  Tensor w = random_tensor({4, 3, 2, 2}, kFloat32, 8);
  Conv2dParams p = conv_params(1, 2, 1, 0, 1, 1, 1);
  Tensor out = conv2d(xt, w, {}, p);
  Shape xs{1, 3, 5, 6};
  Tensor g = random_tensor({4, 6, 3}, kFloat32, 9);
  ConvRef r = conv_ref(to_f64(xt), xs, to_f64(w), w.shape(), {}, to_f64(g), p);
  CHECK(out.shape() == Shape{4, 6, 3});
  close(out, r.out);
  Tensor gx = conv2d_backward_input(g, w, {3, 5, 6}, p);
  CHECK(gx.shape() == Shape{3, 5, 6});
  close(gx, r.grad_x);
  close(conv2d_backward_weight(g, xt, w.shape(), p), r.grad_w);
  // empty batch: empty output, zero weight gradient
  Tensor x0 = empty({0, 3, 5, 6});
  CHECK(conv2d(x0, w, {}, p).shape() == Shape{0, 4, 6, 3});
  close(conv2d_backward_weight(empty({0, 4, 6, 3}), x0, w.shape(), p),
        std::vector<double>(size_t(w.numel()), 0.0));
  CHECK(conv2d_backward_input(empty({0, 4, 6, 3}), w, {0, 3, 5, 6}, p).shape() ==
        Shape{0, 3, 5, 6});
}

TEST_CASE("pooling matches naive f64 loops on random configs") {
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) {
    return int64_t(std::uniform_int_distribution<int>(lo, hi)(rng));
  };
  uint64_t seed = 100;
  for (int k = 0; k < 24; ++k) {
    Pool2dParams p;
    for (int i = 0; i < 2; ++i) {
      p.kernel[i] = pick(1, 4), p.stride[i] = pick(1, 3),
      p.padding[i] = pick(0, int(p.kernel[i] / 2));
      p.dilation[i] = pick(1, 2);
    }
    p.ceil_mode = pick(0, 1), p.count_include_pad = pick(0, 1);
    p.divisor_override = pick(0, 2) == 2 ? 3 : 0;
    Shape xs{
        pick(1, 3), pick(1, 3),
        std::max<int64_t>(1, p.dilation[0] * (p.kernel[0] - 1) + 1 - 2 * p.padding[0]) + pick(0, 6),
        std::max<int64_t>(1, p.dilation[1] * (p.kernel[1] - 1) + 1 - 2 * p.padding[1]) +
            pick(0, 6)};
    if (k == 0) xs = {4, 32, 24, 24}, p = pool2d_params(2);  // MNIST shape: threaded planes
    for (DType dt : kFloatTypes) {
      INFO("config ", k, " x ", shape_str(xs), " k ", p.kernel[0], ",", p.kernel[1], " s ",
           p.stride[0], ",", p.stride[1], " p ", p.padding[0], ",", p.padding[1], " d ",
           p.dilation[0], ",", p.dilation[1], " ceil ", p.ceil_mode, " dtype ", dtype_name(dt));
      Tensor x = random_tensor(xs, dt, seed++);
      Tensor xn = noncontiguous(x);
      PoolRef mr = max_pool_ref(to_f64(x), xs, {}, p);  // shape only first
      Tensor g = random_tensor(mr.out_shape, dt, seed++);
      mr = max_pool_ref(to_f64(x), xs, to_f64(g), p);
      auto [mo, mi] = max_pool2d_with_indices(xn, p);
      REQUIRE(mo.shape() == mr.out_shape);
      check_close(mo, mr.out, 0, 0);
      CHECK(mi.tolist<int64_t>() == mr.idx);
      close(max_pool2d_backward(noncontiguous(g), noncontiguous(mi), xs, p), mr.grad_x);
      CHECK(max_pool2d(xn, p).shape() == mr.out_shape);

      PoolRef ar = avg_pool_ref(to_f64(x), xs, {}, p);
      Tensor ga = random_tensor(ar.out_shape, dt, seed++);
      ar = avg_pool_ref(to_f64(x), xs, to_f64(ga), p);
      Tensor ao = avg_pool2d(xn, p);
      REQUIRE(ao.shape() == ar.out_shape);
      close(ao, ar.out);
      close(avg_pool2d_backward(noncontiguous(ga), xs, p), ar.grad_x);
    }
  }
}

TEST_CASE("pooling: unbatched input, empty batch, NaN propagation, pool2d_params") {
  Pool2dParams p = pool2d_params(3);
  CHECK(p.kernel[0] == 3);
  CHECK(p.stride[1] == 3);
  CHECK(pool2d_params(3, 1, 1).stride[0] == 1);
  CHECK(pool2d_params(3, 1, 1).padding[1] == 1);
  Tensor x = random_tensor({2, 6, 6}, kFloat32, 3);
  auto [o, i] = max_pool2d_with_indices(x, p);
  CHECK(o.shape() == Shape{2, 2, 2});
  CHECK(i.shape() == Shape{2, 2, 2});
  CHECK(max_pool2d_backward(o, i, {2, 6, 6}, p).shape() == Shape{2, 6, 6});
  CHECK(avg_pool2d(x, p).shape() == Shape{2, 2, 2});
  CHECK(avg_pool2d_backward(o, {2, 6, 6}, p).shape() == Shape{2, 6, 6});
  CHECK(max_pool2d(empty({0, 2, 6, 6}), p).shape() == Shape{0, 2, 2, 2});
  CHECK(avg_pool2d(empty({0, 2, 6, 6}), p).shape() == Shape{0, 2, 2, 2});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor xn = from_f64({1, nan, 3, 4}, {1, 1, 2, 2});
  auto [no, ni] = max_pool2d_with_indices(xn, pool2d_params(2));
  CHECK(std::isnan(no.at({0, 0, 0, 0})));
  CHECK(ni.at({0, 0, 0, 0}) == 1.0);
  // as PyTorch: the last NaN of a window wins; among equal maxima the first one
  auto [n2, i2] =
      max_pool2d_with_indices(from_f64({nan, 1, nan, 2}, {1, 1, 2, 2}), pool2d_params(2));
  CHECK(std::isnan(n2.at({0, 0, 0, 0})));
  CHECK(i2.at({0, 0, 0, 0}) == 2.0);
  auto [t2, ti] = max_pool2d_with_indices(from_f64({3, 3, 1, 3}, {1, 1, 2, 2}), pool2d_params(2));
  CHECK(t2.at({0, 0, 0, 0}) == 3.0);
  CHECK(ti.at({0, 0, 0, 0}) == 0.0);
  // -inf everywhere: the first cell of the window is reported
  const double inf = std::numeric_limits<double>::infinity();
  auto [io, ii] =
      max_pool2d_with_indices(from_f64({-inf, -inf, -inf, -inf}, {1, 1, 2, 2}), pool2d_params(2));
  CHECK(io.at({0, 0, 0, 0}) == -inf);
  CHECK(ii.at({0, 0, 0, 0}) == 0.0);
}

TEST_CASE("conv2d and pooling: errors name the op and shapes") {
  Tensor x = random_tensor({2, 3, 5, 5}), w = random_tensor({4, 3, 3, 3});
  Conv2dParams p;
  CHECK_THROWS_WITH_AS(conv2d(random_tensor({3, 5, 5, 1, 1}), w),
                       doctest::Contains("[3, 5, 5, 1, 1]"), Error);
  CHECK_THROWS_WITH_AS(conv2d(random_tensor({5, 5}), w),
                       doctest::Contains("op `conv2d`: expected 3-D (unbatched) or 4-D"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, random_tensor({4, 3, 3})),
                       doctest::Contains("expected 4-D weight"), Error);
  CHECK_THROWS_WITH_AS(conv2d(random_tensor({2, 4, 5, 5}), w),
                       doctest::Contains("to have 3 channels, got 4 channels"), Error);
  Conv2dParams pg;
  pg.groups = 2;
  CHECK_THROWS_WITH_AS(conv2d(random_tensor({2, 4, 5, 5}), random_tensor({3, 2, 3, 3}), {}, pg),
                       doctest::Contains("groups=2"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, random_tensor({4, 1, 3, 3}), {},
                              [] {
                                Conv2dParams q;
                                q.groups = 2;
                                return q;
                              }()),
                       doctest::Contains("divisible by 2"), Error);
  CHECK_THROWS_WITH_AS(conv2d(random_tensor({1, 3, 2, 2}), w),
                       doctest::Contains("calculated output size (0 x 0) is too small"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, w.to(kFloat64)),
                       doctest::Contains("input dtype float32 and weight dtype float64"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x.to(kInt64), w.to(kInt64)),
                       doctest::Contains("expected a floating input, got dtype int64"), Error);
  CHECK_THROWS_WITH_AS(
      conv2d(x, w, random_tensor({3})),
      doctest::Contains("expected bias to be 1-D with 4 elements, got bias of shape [3]"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, w, random_tensor({4}, kFloat64)),
                       doctest::Contains("bias dtype float64"), Error);
  Conv2dParams ps;
  ps.stride[1] = 0;
  CHECK_THROWS_WITH_AS(conv2d(x, w, {}, ps), doctest::Contains("non-positive stride"), Error);
  Conv2dParams pp;
  pp.padding[0] = -1;
  CHECK_THROWS_WITH_AS(conv2d(x, w, {}, pp), doctest::Contains("negative padding"), Error);
  CHECK_THROWS_WITH_AS(
      conv2d_backward_input(random_tensor({2, 4, 2, 3}), w, {2, 3, 5, 5}, p),
      doctest::Contains("op `conv2d_backward_input`: expected grad_out of shape [2, 4, 3, 3]"),
      Error);
  CHECK_THROWS_WITH_AS(
      conv2d_backward_weight(random_tensor({2, 4, 3, 3}), x.to(kFloat64), w.shape(), p),
      doctest::Contains("op `conv2d_backward_weight`"), Error);
  CHECK_THROWS_WITH_AS(conv2d_backward_weight(random_tensor({2, 4, 3, 3}), x, {4, 2, 3, 3}, p),
                       doctest::Contains("channels"), Error);

  CHECK_THROWS_WITH_AS(max_pool2d(x, pool2d_params(3, 1, 2)),
                       doctest::Contains("pad should be at most half of kernel size"), Error);
  CHECK_THROWS_WITH_AS(avg_pool2d(x, pool2d_params(2, 1, 2)), doctest::Contains("op `avg_pool2d`"),
                       Error);
  CHECK_THROWS_WITH_AS(max_pool2d(random_tensor({1, 1, 2, 2}), pool2d_params(3)),
                       doctest::Contains("calculated output size (0 x 0) is too small"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(random_tensor({4, 4}), pool2d_params(2)),
                       doctest::Contains("got input of shape [4, 4]"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(x.to(kInt32), pool2d_params(2)),
                       doctest::Contains("expected a floating input, got dtype int32"), Error);
  CHECK_THROWS_WITH_AS(avg_pool2d(x, pool2d_params(2, 0)),
                       doctest::Contains("stride should be greater than zero"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(random_tensor({1, 0, 4, 4}), pool2d_params(2)),
                       doctest::Contains("non-zero sizes"), Error);
  auto [o, idx] = max_pool2d_with_indices(x, pool2d_params(2));
  CHECK_THROWS_WITH_AS(max_pool2d_backward(o, idx.to(kInt32), x.shape(), pool2d_params(2)),
                       doctest::Contains("expected int64 indices"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d_backward(o, idx, {2, 3, 7, 7}, pool2d_params(2)),
                       doctest::Contains("expected grad_out of shape [2, 3, 3, 3]"), Error);
  Tensor bad = idx.clone();
  bad.fill_(25);
  CHECK_THROWS_WITH_AS(max_pool2d_backward(o, bad, x.shape(), pool2d_params(2)),
                       doctest::Contains("index is out of range"), Error);
  CHECK_THROWS_WITH_AS(
      avg_pool2d_backward(o, {2, 3, 6, 6}, pool2d_params(2)),
      doctest::Contains("op `avg_pool2d_backward`: expected grad_out of shape [2, 3, 3, 3]"),
      Error);
}
