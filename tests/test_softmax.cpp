// Softmax family tests: softmax/log_softmax over every dim vs f64 reference loops (all float
// dtypes, non-contiguous inputs), stability with large values and -inf masks, backward
// formulas vs references and finite differences in f64, zero-size/0-d, and errors.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

// Applies f to every line of `v` (shape s) along `dim`: f(values along the line) -> new values.
std::vector<double> along_dim(const std::vector<double>& v, const Shape& s, int64_t dim,
                              const std::function<std::vector<double>(std::vector<double>)>& f) {
  int64_t inner = 1, outer = 1;
  for (int64_t d = dim + 1; d < int64_t(s.size()); ++d) inner *= s[size_t(d)];
  for (int64_t d = 0; d < dim; ++d) outer *= s[size_t(d)];
  const int64_t K = s[size_t(dim)];
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<double> line(static_cast<size_t>(K));
      for (int64_t k = 0; k < K; ++k) line[size_t(k)] = v[size_t((o * K + k) * inner + i)];
      line = f(line);
      for (int64_t k = 0; k < K; ++k) out[size_t((o * K + k) * inner + i)] = line[size_t(k)];
    }
  return out;
}

std::vector<double> ref_softmax(std::vector<double> x) {
  double m = -kInf, s = 0;
  for (double v : x) m = std::max(m, v);
  for (double& v : x) s += (v = std::exp(v - m));
  for (double& v : x) v /= s;
  return x;
}

std::vector<double> ref_log_softmax(std::vector<double> x) {
  double m = -kInf, s = 0;
  for (double v : x) m = std::max(m, v);
  for (double v : x) s += std::exp(v - m);
  for (double& v : x) v = v - m - std::log(s);
  return x;
}

std::vector<Tensor> layouts(const Tensor& x) {
  Tensor tr = x.transpose(0, x.dim() - 1).contiguous().transpose(0, x.dim() - 1);
  return {x, noncontiguous(x), tr};
}

}  // namespace

TEST_CASE("softmax: hand-worked values") {
  Tensor x = from_f64({1, 2, 3}, {3});
  const double e1 = std::exp(1.0), e2 = std::exp(2.0), e3 = std::exp(3.0), s = e1 + e2 + e3;
  check_close(softmax(x, 0), {e1 / s, e2 / s, e3 / s});
  check_close(log_softmax(x, -1), {1 - std::log(s), 2 - std::log(s), 3 - std::log(s)});
  Tensor u = from_f64({0, 0, 5, 5}, {2, 2});
  const double a = 1 / (1 + std::exp(5.0));
  check_close(softmax(u, 0), {a, a, 1 - a, 1 - a});
  check_close(softmax(u, 1), {0.5, 0.5, 0.5, 0.5});
}

TEST_CASE("softmax/log_softmax over every dim vs f64 reference") {
  for (const Shape& s : {Shape{3, 4, 5}, Shape{2, 3, 1, 7}, Shape{4, 130}}) {
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      Tensor x0 = random_tensor(s, dt, 21, -4, 4);
      for (const Tensor& x : layouts(x0)) {
        for (int64_t dim = -int64_t(s.size()); dim < int64_t(s.size()); ++dim) {
          CAPTURE(dtype_name(dt));
          CAPTURE(shape_str(s));
          CAPTURE(dim);
          const int64_t d = dim < 0 ? dim + int64_t(s.size()) : dim;
          Tensor y = softmax(x, dim);
          CHECK(y.dtype() == dt);
          CHECK(y.shape() == s);
          check_close(y, along_dim(to_f64(x), s, d, ref_softmax));
          Tensor ly = log_softmax(x, dim);
          CHECK(ly.dtype() == dt);
          check_close(ly, along_dim(to_f64(x), s, d, ref_log_softmax));
        }
      }
    }
  }
}

TEST_CASE("softmax rows sum to 1 and large values are stable") {
  Tensor x = random_tensor({8, 1000}, kFloat32, 3, -30, 30);
  Tensor y = softmax(x, 1);
  for (int64_t r = 0; r < 8; ++r) {
    double s = 0;
    for (double v : to_f64(y.select(0, r))) s += v;
    CHECK(s == doctest::Approx(1.0).epsilon(1e-6));
  }
  Tensor big = from_f64({1000, 1001, 1002}, {3});
  auto ref = ref_softmax({1000, 1001, 1002});
  check_close(softmax(big, 0), ref);
  check_close(log_softmax(big, 0), ref_log_softmax({1000, 1001, 1002}));
  check_close(softmax(from_f64({-1000, -1001}, {2}), 0), ref_softmax({-1000, -1001}));
  // -inf entries (masks) get probability 0 / log-probability -inf
  Tensor masked = from_f64({0, -kInf, 0, -kInf}, {4});
  check_close(softmax(masked, 0), {0.5, 0, 0.5, 0});
  check_close(log_softmax(masked, 0), {-std::log(2.0), -kInf, -std::log(2.0), -kInf});
  // an all -inf row gives NaN like PyTorch
  Tensor all_inf = from_f64({-kInf, -kInf}, {2});
  CHECK(std::isnan(softmax(all_inf, 0).at({0})));
  // a NaN poisons its row only
  Tensor n = from_f64({1, std::nan(""), 2, 3}, {2, 2});
  Tensor yn = softmax(n, 1);
  CHECK(std::isnan(yn.at({0, 0})));
  CHECK(std::isnan(yn.at({0, 1})));
  check_close(yn.select(0, 1), ref_softmax({2, 3}));
}

TEST_CASE("softmax_backward / log_softmax_backward vs formulas, every dim and dtype") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    const Shape s{3, 4, 6};
    Tensor x = random_tensor(s, dt, 4, -2, 2);
    Tensor g0 = random_tensor(s, dt, 5, -1, 1);
    for (const Tensor& g : layouts(g0)) {
      for (int64_t dim = 0; dim < 3; ++dim) {
        CAPTURE(dtype_name(dt));
        CAPTURE(dim);
        Tensor y = softmax(x, dim);
        Tensor ly = log_softmax(x, dim);
        auto yv = to_f64(y), lyv = to_f64(ly), gv = to_f64(g);
        // expected: y*(g - sum(g*y)) and g - exp(ly)*sum(g), lines gathered with along_dim
        std::vector<double> e1(yv.size()), e2(yv.size());
        std::vector<double> idx(yv.size());
        for (size_t i = 0; i < idx.size(); ++i) idx[i] = double(i);
        along_dim(idx, s, dim, [&](std::vector<double> l) {
          double dot = 0, gs = 0;
          for (double i : l) dot += gv[size_t(i)] * yv[size_t(i)], gs += gv[size_t(i)];
          for (double i : l) {
            e1[size_t(i)] = yv[size_t(i)] * (gv[size_t(i)] - dot);
            e2[size_t(i)] = gv[size_t(i)] - std::exp(lyv[size_t(i)]) * gs;
          }
          return l;
        });
        Tensor gi = softmax_backward(g, y, dim);
        CHECK(gi.dtype() == dt);
        auto [rt, at] = tolerance(dt);
        check_close(gi, e1, rt, at * 2);
        check_close(log_softmax_backward(g, ly, dim), e2, rt, at * 2);
      }
    }
  }
}

TEST_CASE("softmax backward matches finite differences in f64") {
  const Shape s{2, 3, 4};
  Tensor x = random_tensor(s, kFloat64, 8);
  Tensor w = random_tensor(s, kFloat64, 9);  // loss = sum(w * f(x))
  auto wv = to_f64(w);
  for (int64_t dim = 0; dim < 3; ++dim) {
    for (bool log : {false, true}) {
      CAPTURE(dim);
      CAPTURE(log);
      auto f = [&](const Tensor& t) { return log ? log_softmax(t, dim) : softmax(t, dim); };
      auto loss = [&](const std::vector<double>& xv) {
        auto yv = to_f64(f(from_f64(xv, s, kFloat64)));
        double l = 0;
        for (size_t i = 0; i < yv.size(); ++i) l += wv[i] * yv[i];
        return l;
      };
      Tensor y = f(x);
      Tensor grad = log ? log_softmax_backward(w, y, dim) : softmax_backward(w, y, dim);
      auto xv = to_f64(x);
      std::vector<double> fd(xv.size());
      const double h = 1e-6;
      for (size_t i = 0; i < xv.size(); ++i) {
        auto xp = xv, xm = xv;
        xp[i] += h;
        xm[i] -= h;
        fd[i] = (loss(xp) - loss(xm)) / (2 * h);
      }
      check_close(grad, fd, 1e-6, 1e-8);
    }
  }
}

TEST_CASE("softmax: long rows, zero-size and 0-d") {
  Tensor x = random_tensor({2, 40000}, kFloat32, 12, -10, 10);
  check_close(softmax(x, 1), along_dim(to_f64(x), {2, 40000}, 1, ref_softmax), 1e-5, 1e-9);
  check_close(softmax(x, 0), along_dim(to_f64(x), {2, 40000}, 0, ref_softmax));
  CHECK(softmax(empty({0, 3}), 1).shape() == Shape{0, 3});
  CHECK(log_softmax(empty({3, 0}), 1).shape() == Shape{3, 0});
  CHECK(softmax_backward(empty({3, 0}), empty({3, 0}), 1).shape() == Shape{3, 0});
  Tensor s = from_f64({3.0}, {});
  CHECK(softmax(s, 0).dim() == 0);
  check_close(softmax(s, 0), {1.0});
  check_close(log_softmax(s, -1), {0.0});
  check_close(softmax_backward(s, softmax(s, 0), 0), {0.0});
}

TEST_CASE("softmax errors") {
  Tensor x = random_tensor({2, 3});
  CHECK_THROWS_WITH_AS(softmax(x, 2),
                       doctest::Contains("op `softmax`: dimension out of range (expected to be "
                                         "in range of [-2, 1], but got 2) for input of shape "
                                         "[2, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(log_softmax(x, -3), doctest::Contains("op `log_softmax`"), Error);
  Tensor i = from_f64({1, 2}, {2}, kInt64);
  CHECK_THROWS_WITH_AS(softmax(i, 0),
                       doctest::Contains("op `softmax` needs a floating dtype, got int64"), Error);
  CHECK_THROWS_WITH_AS(log_softmax(i, 0), doctest::Contains("got int64"), Error);
  Tensor y = softmax(x, 1);
  CHECK_THROWS_WITH_AS(softmax_backward(random_tensor({3, 2}), y, 1),
                       doctest::Contains("op `softmax_backward`: grad_output shape [3, 2] does "
                                         "not match output shape [2, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(log_softmax_backward(x.to(kFloat64), y, 1),
                       doctest::Contains("grad_output dtype float64 does not match"), Error);
  CHECK_THROWS_WITH_AS(softmax_backward(x, y, 2), doctest::Contains("dimension out of range"),
                       Error);
}
