// layer_norm tests: PyTorch golden values (tests/data/golden_norm_loss.json), hand-worked
// cases, a naive f64 reference on random shapes for every float dtype and non-contiguous
// inputs, finite-difference checks of the backward kernel, zero-size inputs and errors.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "golden.h"
#include "norm_loss_test_util.h"

using namespace minidl;
using namespace testutil;
using namespace norm_loss_test;

namespace {

// ---- naive f64 reference
struct LnRef {
  std::vector<double> out, mean, rstd, gx, gw, gb;
};
// x, g:[R,D]; w, b:[D] (empty = none)
LnRef ref_layer_norm(const std::vector<double>& x, const std::vector<double>& g, int64_t R,
                     int64_t D, const std::vector<double>& w, const std::vector<double>& b,
                     double eps) {
  LnRef r;
  r.out.resize(x.size());
  r.gx.resize(x.size());
  r.gw.assign(D, 0.0);
  r.gb.assign(D, 0.0);
  for (int64_t i = 0; i < R; ++i) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < D; ++j) m += x[i * D + j];
    m /= D;
    for (int64_t j = 0; j < D; ++j) v += (x[i * D + j] - m) * (x[i * D + j] - m);
    v /= D;
    const double rs = 1 / std::sqrt(v + eps);
    r.mean.push_back(m);
    r.rstd.push_back(rs);
    double s1 = 0, s2 = 0;
    for (int64_t j = 0; j < D; ++j) {
      const double xh = (x[i * D + j] - m) * rs, wj = w.empty() ? 1 : w[j];
      r.out[i * D + j] = xh * wj + (b.empty() ? 0 : b[j]);
      s1 += g[i * D + j] * wj;
      s2 += g[i * D + j] * wj * xh;
      r.gw[j] += g[i * D + j] * xh;
      r.gb[j] += g[i * D + j];
    }
    for (int64_t j = 0; j < D; ++j) {
      const double xh = (x[i * D + j] - m) * rs, wj = w.empty() ? 1 : w[j];
      r.gx[i * D + j] = rs * (g[i * D + j] * wj - s1 / D - xh * s2 / D);
    }
  }
  return r;
}

}  // namespace

// ------------------------------------------------------------------ layer_norm

TEST_CASE("layer_norm: hand-worked values") {
  Tensor x = from_f64({1, 2, 3, 4, -1, 0, 0, 1}, {2, 4});
  auto r = layer_norm(x, {4});
  const double rs0 = 1 / std::sqrt(1.25 + 1e-5), rs1 = 1 / std::sqrt(0.5 + 1e-5);
  check_close(r.out, {-1.5 * rs0, -0.5 * rs0, 0.5 * rs0, 1.5 * rs0, -rs1, 0, 0, rs1});
  CHECK(r.mean.shape() == Shape{2});
  CHECK(r.mean.dtype() == kFloat32);
  check_close(r.mean, {2.5, 0.0});
  check_close(r.rstd, {rs0, rs1});
  Tensor w = from_f64({1, 2, 0, -1}, {4}), b = from_f64({0, 1, 5, 0}, {4});
  check_close(layer_norm(x, {4}, w, b).out,
              {-1.5 * rs0, -1 * rs0 + 1, 5, -1.5 * rs0, -rs1, 1, 5, -rs1});
  // f64 input keeps f64 statistics
  CHECK(layer_norm(x.to(kFloat64), {4}).rstd.dtype() == kFloat64);
}

TEST_CASE("layer_norm: PyTorch golden forward and backward") {
  for (const json& c : golden()["layer_norm"]) {
    for (DType dt : {kFloat64, kFloat32}) {
      const double rtol = dt == kFloat64 ? 1e-9 : 1e-4, atol = dt == kFloat64 ? 1e-10 : 1e-5;
      Shape ns = c["normalized_shape"].get<Shape>();
      Tensor x = jt(c["x"], dt), w = jt(c["w"], dt), b = jt(c["b"], dt);
      auto r = layer_norm(x, ns, w, b, c["eps"].get<double>());
      CAPTURE(x.shape_str());
      check_close(r.out, jv(c["out"]), rtol, atol);
      check_close(r.mean, jv(c["mean"]), rtol, atol);
      check_close(r.rstd, jv(c["rstd"]), rtol, atol);
      auto g = layer_norm_backward(jt(c["grad_out"], dt), x, ns, r.mean, r.rstd, w, true);
      check_close(g.grad_x, jv(c["grad_x"]), rtol, atol);
      CHECK(g.grad_w.shape() == ns);
      check_close(g.grad_w, jv(c["grad_w"]), rtol, atol);
      check_close(g.grad_b, jv(c["grad_b"]), rtol, atol);
    }
  }
}

TEST_CASE("layer_norm: random shapes vs f64 reference, all float dtypes, non-contiguous") {
  struct Case {
    Shape shape, ns;
    bool affine, noncontig;
  };
  const Case cases[] = {{{7, 13}, {13}, true, false},
                        {{3, 4, 5}, {4, 5}, true, true},
                        {{2, 3, 33}, {33}, false, true},
                        {{300, 257}, {257}, true, false},  // several threads' worth
                        {{5}, {5}, true, false}};
  uint64_t seed = 1;
  for (const Case& k : cases) {
    for (DType dt : kFloatTypes) {
      CAPTURE(shape_str(k.shape));
      CAPTURE(dt);
      Tensor x = random_tensor(k.shape, dt, seed++, -3, 5);
      Tensor g = random_tensor(k.shape, dt, seed++);
      Tensor w = k.affine ? random_tensor(k.ns, dt, seed++) : Tensor();
      Tensor b = k.affine ? random_tensor(k.ns, dt, seed++) : Tensor();
      if (k.noncontig) {
        x = noncontiguous(x);
        g = noncontiguous(g);
      }
      const int64_t D = shape_numel(k.ns), R = x.numel() / D;
      LnRef ref = ref_layer_norm(to_f64(x), to_f64(g), R, D,
                                 w.defined() ? to_f64(w) : std::vector<double>{},
                                 b.defined() ? to_f64(b) : std::vector<double>{}, 1e-5);
      auto r = layer_norm(x, k.ns, w, b);
      CHECK(r.out.shape() == k.shape);
      CHECK(r.out.dtype() == dt);
      check_close(r.out, ref.out);
      check_close(r.mean, ref.mean, 1e-5, 1e-6);
      check_close(r.rstd, ref.rstd, 1e-5, 1e-6);
      auto gr = layer_norm_backward(g, x, k.ns, r.mean, r.rstd, w, true);
      check_close(gr.grad_x, ref.gx);
      auto [rt, at] = tolerance(dt);
      check_close(gr.grad_w, ref.gw, rt, at * R);
      check_close(gr.grad_b, ref.gb, rt, at * R);
      CHECK(!layer_norm_backward(g, x, k.ns, r.mean, r.rstd, w, false).grad_w.defined());
    }
  }
}

TEST_CASE("layer_norm: zero-size inputs") {
  auto r = layer_norm(empty({0, 4}), {4});
  CHECK(r.out.shape() == Shape{0, 4});
  CHECK(r.mean.shape() == Shape{0});
  auto g = layer_norm_backward(empty({0, 4}), empty({0, 4}), {4}, r.mean, r.rstd,
                               from_f64({1, 1, 1, 1}, {4}), true);
  CHECK(g.grad_x.shape() == Shape{0, 4});
  check_close(g.grad_w, {0, 0, 0, 0});
  check_close(g.grad_b, {0, 0, 0, 0});
}

TEST_CASE("layer_norm_backward: finite differences (f64)") {
  const Shape shape{3, 2, 4}, ns{2, 4};
  std::vector<double> x = to_f64(random_tensor(shape, kFloat64, 11));
  std::vector<double> w = to_f64(random_tensor(ns, kFloat64, 12));
  std::vector<double> b = to_f64(random_tensor(ns, kFloat64, 13));
  std::vector<double> g = to_f64(random_tensor(shape, kFloat64, 14));
  auto loss = [&](const std::vector<double>& xv, const std::vector<double>& wv,
                  const std::vector<double>& bv) {
    return dot(to_f64(layer_norm(from_f64(xv, shape, kFloat64), ns, from_f64(wv, ns, kFloat64),
                                 from_f64(bv, ns, kFloat64))
                          .out),
               g);
  };
  Tensor X = from_f64(x, shape, kFloat64), W = from_f64(w, ns, kFloat64);
  auto r = layer_norm(X, ns, W, from_f64(b, ns, kFloat64));
  auto gr = layer_norm_backward(from_f64(g, shape, kFloat64), X, ns, r.mean, r.rstd, W, true);
  check_fd(x, to_f64(gr.grad_x), [&](const std::vector<double>& v) { return loss(v, w, b); });
  check_fd(w, to_f64(gr.grad_w), [&](const std::vector<double>& v) { return loss(x, v, b); });
  check_fd(b, to_f64(gr.grad_b), [&](const std::vector<double>& v) { return loss(x, w, v); });
}

TEST_CASE("layer_norm: errors name the op and shapes") {
  Tensor x = empty({4, 3});
  CHECK_THROWS_WITH_AS(layer_norm(x, {4}),
                       doctest::Contains("given normalized_shape=[4], expected input with shape "
                                         "[*, 4], but got input of shape [4, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, {2, 4, 3}), doctest::Contains("layer_norm"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, {}), doctest::Contains("at least 1-dimensional"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, {3}, empty({4})),
                       doctest::Contains("expected weight of the same shape as "
                                         "normalized_shape=[3], got weight of shape [4]"),
                       Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, {3}, {}, empty({1, 3})),
                       doctest::Contains("got bias of shape [1, 3]"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(empty({4, 3}, kInt64), {3}),
                       doctest::Contains("op `layer_norm`: expected a floating input, got dtype "
                                         "int64"),
                       Error);
  auto r = layer_norm(random_tensor({4, 3}), {3});
  CHECK_THROWS_WITH_AS(layer_norm_backward(empty({4, 2}), x, {3}, r.mean, r.rstd, {}, true),
                       doctest::Contains("grad_out shape [4, 2] does not match input shape "
                                         "[4, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(layer_norm_backward(x, x, {3}, empty({3}), r.rstd, {}, true),
                       doctest::Contains("expected mean with 4 elements"), Error);
}
