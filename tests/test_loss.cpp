// cross_entropy tests: PyTorch golden values (reductions, ignore_index, label smoothing, 4-D
// logits), hand-worked cases, naive f64 reference on random shapes for every float dtype and
// non-contiguous logits, finite-difference checks of the backward, and error messages.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <functional>

#include "golden.h"
#include "norm_loss_test_util.h"

using namespace minidl;
using namespace testutil;
using namespace norm_loss_test;

namespace {

Reduction reduction_of(const std::string& s) {
  return s == "none" ? Reduction::none : s == "sum" ? Reduction::sum : Reduction::mean;
}

struct CeRef {
  std::vector<double> loss;  // reduced per reduction ([1] for mean/sum)
  std::vector<double> grad;  // [N,C,S]
};
// logits:[N,C,S] target:[N,S]; grad_loss per sample ([N*S]) or one value for mean/sum.
CeRef ref_ce(const std::vector<double>& x, const std::vector<int64_t>& t, int64_t N, int64_t C,
             int64_t S, Reduction red, int64_t ii, double ls,
             const std::vector<double>& grad_loss) {
  CeRef r;
  std::vector<double> per(size_t(N * S), 0.0);
  r.grad.assign(x.size(), 0.0);
  double count = 0;
  for (int64_t i = 0; i < N * S; ++i) count += t[i] != ii;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t i = n * S + s, tg = t[i];
      if (tg == ii) continue;
      auto at = [&](int64_t c) { return x[(n * C + c) * S + s]; };
      double mx = -INFINITY, se = 0, sx = 0;
      for (int64_t c = 0; c < C; ++c) mx = std::max(mx, at(c));
      for (int64_t c = 0; c < C; ++c) se += std::exp(at(c) - mx), sx += at(c);
      const double lse = mx + std::log(se);
      per[i] = (1 - ls) * (lse - at(tg)) + ls * (lse - sx / C);
      const double g = red == Reduction::none  ? grad_loss[i]
                       : red == Reduction::sum ? grad_loss[0]
                                               : grad_loss[0] / count;
      for (int64_t c = 0; c < C; ++c)
        r.grad[(n * C + c) * S + s] =
            g * (std::exp(at(c) - lse) - ls / C - (c == tg ? 1 - ls : 0.0));
    }
  if (red == Reduction::none) {
    r.loss = per;
  } else {
    double s = 0;
    for (double v : per) s += v;
    r.loss = {red == Reduction::sum ? s : s / count};
  }
  return r;
}

}  // namespace

TEST_CASE("cross_entropy: hand-worked values and gradients") {
  // row 0: logits {0, 0}, target 0 -> ln 2; row 1: {ln 3, 0}, target 1 -> ln 4
  Tensor x = from_f64({0, 0, std::log(3.0), 0}, {2, 2});
  Tensor t = from_f64({0, 1}, {2}, kInt64);
  auto none = cross_entropy_forward(x, t, Reduction::none);
  check_close(none.loss, {std::log(2.0), std::log(4.0)});
  check_close(none.lse, {std::log(2.0), std::log(4.0)});
  check_close(cross_entropy(x, t), {1.5 * std::log(2.0)});
  CHECK(cross_entropy(x, t).dim() == 0);
  check_close(cross_entropy(x, t, Reduction::sum), {3 * std::log(2.0)});
  // grad of the mean: (softmax - onehot) / 2
  Tensor g = cross_entropy_backward(from_f64({1}, {}), x, t, none.lse, Reduction::mean);
  check_close(g, {-0.25, 0.25, 0.375, -0.375});
  // ignored rows contribute nothing and do not count in the mean
  Tensor ti = from_f64({-100, 1}, {2}, kInt64);
  check_close(cross_entropy(x, ti), {std::log(4.0)});
  check_close(cross_entropy_backward(from_f64({1}, {}), x, ti, none.lse, Reduction::mean),
              {0, 0, 0.75, -0.75});
  // label smoothing 0.5 on row 0: 0.5 * ln 2 + 0.5 * mean(ln 2, ln 2) = ln 2
  check_close(cross_entropy(x.slice(0, 0, 1), t.slice(0, 0, 1), Reduction::sum, -100, 0.5),
              {std::log(2.0)});
  // unbatched logits [C] with a 0-d target
  check_close(cross_entropy(from_f64({0, 0}, {2}), from_f64({1}, {}, kInt64)), {std::log(2.0)});
}

TEST_CASE("cross_entropy: all targets ignored and empty batches") {
  Tensor x = random_tensor({3, 4}, kFloat32, 1);
  Tensor t = from_f64({-100, -100, -100}, {3}, kInt64);
  CHECK(std::isnan(cross_entropy(x, t).item<double>()));  // 0/0 as PyTorch
  CHECK(cross_entropy(x, t, Reduction::sum).item<double>() == 0.0);
  auto f = cross_entropy_forward(x, t, Reduction::mean);
  std::vector<double> zeros(12, 0.0);
  check_close(cross_entropy_backward(from_f64({1}, {}), x, t, f.lse, Reduction::mean), zeros);
  Tensor e = empty({0, 5}), te = empty({0}, kInt64);
  CHECK(std::isnan(cross_entropy(e, te).item<double>()));
  CHECK(cross_entropy(e, te, Reduction::sum).item<double>() == 0.0);
  CHECK(cross_entropy(e, te, Reduction::none).shape() == Shape{0});
  auto fe = cross_entropy_forward(e, te, Reduction::sum);
  CHECK(cross_entropy_backward(from_f64({1}, {}), e, te, fe.lse, Reduction::sum).shape() ==
        Shape{0, 5});
}

TEST_CASE("cross_entropy: PyTorch golden values (reductions, ignore_index, smoothing, 4-D)") {
  int n = 0;
  for (const json& c : golden()["cross_entropy"]) {
    for (DType dt : {kFloat64, kFloat32}) {
      const double rtol = dt == kFloat64 ? 1e-9 : 1e-4, atol = dt == kFloat64 ? 1e-10 : 1e-5;
      const Reduction red = reduction_of(c["reduction"].get<std::string>());
      const int64_t ii = c["ignore_index"].get<int64_t>();
      const double ls = c["label_smoothing"].get<double>();
      Tensor x = jt(c["logits"], dt), t = jt(c["target"], kInt64);
      CAPTURE(x.shape_str());
      CAPTURE(c["reduction"].get<std::string>());
      CAPTURE(ii);
      CAPTURE(ls);
      auto f = cross_entropy_forward(x, t, red, ii, ls);
      check_close(f.loss, jv(c["loss"]), rtol, atol);
      CHECK(f.loss.shape() == c["loss"]["shape"].get<Shape>());
      Tensor g = cross_entropy_backward(jt(c["grad_loss"], dt), x, t, f.lse, red, ii, ls);
      CHECK(g.shape() == x.shape());
      check_close(g, jv(c["grad_logits"]), rtol, atol);
      ++n;
    }
  }
  CHECK(n == 22);
}

TEST_CASE("cross_entropy: random shapes vs f64 reference, all float dtypes, non-contiguous") {
  struct Case {
    Shape shape;  // [N, C, d...]
    Reduction red;
    int64_t ignore_index;
    double ls;
    bool noncontig;
  };
  const Case cases[] = {{{7, 5}, Reduction::mean, -100, 0.0, false},
                        {{9, 11}, Reduction::none, 2, 0.15, true},
                        {{4, 3, 6}, Reduction::sum, -100, 0.0, true},
                        {{2, 6, 3, 4}, Reduction::mean, 0, 0.25, false},
                        {{600, 150}, Reduction::mean, -1, 0.1, false},  // multi-threaded rows
                        {{5, 1}, Reduction::none, -100, 0.0, false}};
  uint64_t seed = 40;
  for (const Case& k : cases) {
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      CAPTURE(shape_str(k.shape));
      CAPTURE(dt);
      const int64_t N = k.shape[0], C = k.shape[1], S = shape_numel(k.shape) / (N * C);
      Tensor x = random_tensor(k.shape, dt, seed++, -4, 4);
      if (k.noncontig) x = noncontiguous(x);
      Shape ts = k.shape;
      ts.erase(ts.begin() + 1);
      Tensor t = random_tensor(ts, kInt64, seed++, 0, double(C));
      std::vector<int64_t> tv = t.tolist<int64_t>();
      if (k.ignore_index < 0)  // mark some samples ignored
        for (size_t i = 0; i < tv.size(); i += 3) tv[i] = k.ignore_index;
      t = from_f64(std::vector<double>(tv.begin(), tv.end()), ts, kInt64);
      Tensor gl =
          k.red == Reduction::none ? random_tensor(ts, dt, seed++) : from_f64({0.5}, {}, dt);
      CeRef ref = ref_ce(to_f64(x), tv, N, C, S, k.red, k.ignore_index, k.ls, to_f64(gl));
      auto f = cross_entropy_forward(x, t, k.red, k.ignore_index, k.ls);
      CHECK(f.loss.dtype() == dt);
      auto [rt, at] = tolerance(dt);
      check_close(f.loss, ref.loss, rt, k.red == Reduction::sum ? at * N * S : at);
      Tensor g = cross_entropy_backward(gl, x, t, f.lse, k.red, k.ignore_index, k.ls);
      CHECK(g.is_contiguous());
      check_close(g, ref.grad);
    }
  }
}

TEST_CASE("cross_entropy_backward: finite differences (f64)") {
  const Shape shape{3, 4, 2};
  Tensor t = from_f64({1, 3, -100, 0, 2, 2}, {3, 2}, kInt64);
  std::vector<double> x = to_f64(random_tensor(shape, kFloat64, 77));
  for (Reduction red : {Reduction::none, Reduction::mean, Reduction::sum}) {
    for (double ls : {0.0, 0.3}) {
      CAPTURE(int(red));
      CAPTURE(ls);
      Tensor gl = red == Reduction::none ? random_tensor({3, 2}, kFloat64, 78)
                                         : from_f64({1.3}, {}, kFloat64);
      std::vector<double> glv = to_f64(gl);
      auto loss = [&](const std::vector<double>& v) {
        std::vector<double> l =
            to_f64(cross_entropy(from_f64(v, shape, kFloat64), t, red, -100, ls));
        double s = 0;
        for (size_t i = 0; i < l.size(); ++i) s += l[i] * glv[i];
        return s;
      };
      Tensor X = from_f64(x, shape, kFloat64);
      auto f = cross_entropy_forward(X, t, red, -100, ls);
      std::vector<double> an = to_f64(cross_entropy_backward(gl, X, t, f.lse, red, -100, ls));
      check_fd(x, an, loss, 1e-7);
    }
  }
}

TEST_CASE("cross_entropy: errors name the op, shapes and bad targets") {
  Tensor x = random_tensor({4, 3});
  CHECK_THROWS_WITH_AS(cross_entropy(x, from_f64({0, 1, 5, 2}, {4}, kInt64)),
                       doctest::Contains("op `cross_entropy`: target 5 at index 2 is out of "
                                         "bounds: expected 0 <= target < 3"),
                       Error);
  CHECK_THROWS_WITH_AS(cross_entropy(x, from_f64({0, -1, 1, 2}, {4}, kInt64)),
                       doctest::Contains("target -1 at index 1"), Error);
  // -100 is only allowed when it is the ignore_index
  CHECK_THROWS_WITH_AS(cross_entropy(x, from_f64({0, -100, 1, 2}, {4}, kInt64), Reduction::mean, 1),
                       doctest::Contains("target -100 at index 1"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(x, from_f64({0, 1, 2}, {3}, kInt64)),
                       doctest::Contains("op `cross_entropy`: target shape [3] does not match "
                                         "logits shape [4, 3] (expected target shape [4])"),
                       Error);
  CHECK_THROWS_WITH_AS(cross_entropy(random_tensor({2, 3, 5}), from_f64({0, 1}, {2}, kInt64)),
                       doctest::Contains("expected target shape [2, 5]"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(x, from_f64({0, 1, 2, 1}, {4}, kFloat32)),
                       doctest::Contains("expected target of dtype int64 (class indices), got "
                                         "float32"),
                       Error);
  CHECK_THROWS_WITH_AS(cross_entropy(from_f64({0, 1}, {1, 2}, kInt64), from_f64({0}, {1}, kInt64)),
                       doctest::Contains("expected floating logits, got dtype int64"), Error);
  CHECK_THROWS_WITH_AS(
      cross_entropy(x, from_f64({0, 1, 2, 1}, {4}, kInt64), Reduction::mean, -100, 1.5),
      doctest::Contains("label_smoothing must be between 0.0 and 1.0, got 1.5"), Error);
  Tensor t = from_f64({0, 1, 2, 1}, {4}, kInt64);
  auto f = cross_entropy_forward(x, t, Reduction::none);
  CHECK_THROWS_WITH_AS(cross_entropy_backward(empty({3}), x, t, f.lse, Reduction::none),
                       doctest::Contains("op `cross_entropy_backward`: grad_loss shape [3] does "
                                         "not match the per-sample loss shape [4]"),
                       Error);
  CHECK_THROWS_WITH_AS(cross_entropy_backward(empty({4}), x, t, f.lse, Reduction::mean),
                       doctest::Contains("expected a one-element grad_loss"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy_backward(empty({}), x, t, empty({2}), Reduction::mean),
                       doctest::Contains("expected lse with 4 elements"), Error);
}
