// batch_norm tests: PyTorch golden values (tests/data/golden_norm_loss.json), hand-worked
// training and eval steps, a naive f64 reference on random shapes for every float dtype and
// non-contiguous inputs, finite-difference checks of the backward kernel, and errors.
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
struct BnRef {
  std::vector<double> out, rm, rv, gx, gw, gb;
};
// x, g:[N,C,S]; training uses batch stats and updates rm/rv; eval uses rm/rv.
BnRef ref_batch_norm(const std::vector<double>& x, const std::vector<double>& g, int64_t N,
                     int64_t C, int64_t S, const std::vector<double>& w,
                     const std::vector<double>& b, std::vector<double> rm, std::vector<double> rv,
                     bool training, double mom, double eps) {
  BnRef r;
  r.out.resize(x.size());
  r.gx.resize(x.size());
  const double M = double(N * S);
  for (int64_t c = 0; c < C; ++c) {
    auto at = [&](const std::vector<double>& v, int64_t n, int64_t s) {
      return v[(n * C + c) * S + s];
    };
    double m = 0, var = 0;
    if (training) {
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) m += at(x, n, s);
      m /= M;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) var += (at(x, n, s) - m) * (at(x, n, s) - m);
      var /= M;
      rm[c] = (1 - mom) * rm[c] + mom * m;
      rv[c] = (1 - mom) * rv[c] + mom * var * M / (M - 1);
    } else {
      m = rm[c];
      var = rv[c];
    }
    const double is = 1 / std::sqrt(var + eps), wc = w.empty() ? 1 : w[c];
    double sg = 0, sgx = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        const double xh = (at(x, n, s) - m) * is;
        r.out[(n * C + c) * S + s] = xh * wc + (b.empty() ? 0 : b[c]);
        sg += at(g, n, s);
        sgx += at(g, n, s) * xh;
      }
    r.gw.push_back(sgx);
    r.gb.push_back(sg);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        const double xh = (at(x, n, s) - m) * is;
        r.gx[(n * C + c) * S + s] =
            training ? wc * is * (at(g, n, s) - sg / M - xh * sgx / M) : wc * is * at(g, n, s);
      }
  }
  r.rm = rm;
  r.rv = rv;
  return r;
}

}  // namespace

// ------------------------------------------------------------------ batch_norm

TEST_CASE("batch_norm: hand-worked training step and eval") {
  // channel 0: {1, 3} mean 2 var 1 (unbiased 2); channel 1: {2, 6} mean 4 var 4 (unbiased 8)
  Tensor x = from_f64({1, 2, 3, 6}, {2, 2});
  Tensor rm = from_f64({0, 0}, {2}), rv = from_f64({1, 1}, {2});
  auto r = batch_norm(x, {}, {}, rm, rv, true, 0.1, 0.0);
  check_close(r.out, {-1, -1, 1, 1});
  check_close(r.save_mean, {2, 4});
  check_close(r.save_invstd, {1, 0.5});
  check_close(rm, {0.2, 0.4});  // updated in place
  check_close(rv, {1.1, 1.7});
  // eval: running stats normalise, nothing is updated
  Tensor w = from_f64({2, 1}, {2}), b = from_f64({0, -1}, {2});
  auto e = batch_norm(x, w, b, rm, rv, false, 0.1, 0.0);
  check_close(e.out, {2 * (1 - 0.2) / std::sqrt(1.1), (2 - 0.4) / std::sqrt(1.7) - 1,
                      2 * (3 - 0.2) / std::sqrt(1.1), (6 - 0.4) / std::sqrt(1.7) - 1});
  CHECK(e.save_mean.numel() == 0);
  check_close(rm, {0.2, 0.4});
  // no running stats: batch statistics even in eval mode
  check_close(batch_norm(x, {}, {}, {}, {}, false, 0.1, 0.0).out, {-1, -1, 1, 1});
}

TEST_CASE("batch_norm: PyTorch golden train/eval, [N,C] and [N,C,H,W]") {
  for (const json& c : golden()["batch_norm"]) {
    for (DType dt : {kFloat64, kFloat32}) {
      const double rtol = dt == kFloat64 ? 1e-9 : 1e-4, atol = dt == kFloat64 ? 1e-10 : 1e-5;
      const bool training = c["training"].get<bool>();
      const double mom = c["momentum"].get<double>(), eps = c["eps"].get<double>();
      Tensor x = jt(c["x"], dt), w = jt(c["w"], dt), b = jt(c["b"], dt);
      Tensor rm = jt(c["running_mean"], dt), rv = jt(c["running_var"], dt);
      Tensor rm0 = rm.clone(), rv0 = rv.clone();
      CAPTURE(x.shape_str());
      CAPTURE(training);
      auto r = batch_norm(x, w, b, rm, rv, training, mom, eps);
      check_close(r.out, jv(c["out"]), rtol, atol);
      check_close(rm, jv(c["new_running_mean"]), rtol, atol);
      check_close(rv, jv(c["new_running_var"]), rtol, atol);
      auto g = batch_norm_backward(jt(c["grad_out"], dt), x, w, rm0, rv0, r.save_mean,
                                   r.save_invstd, training, eps);
      check_close(g.grad_x, jv(c["grad_x"]), rtol, atol);
      check_close(g.grad_w, jv(c["grad_w"]), rtol, atol);
      check_close(g.grad_b, jv(c["grad_b"]), rtol, atol);
    }
  }
}

TEST_CASE("batch_norm: random shapes vs f64 reference, all float dtypes, non-contiguous") {
  struct Case {
    Shape shape;
    bool affine, noncontig;
  };
  const Case cases[] = {{{6, 5}, true, false},         {{9, 4}, false, true},
                        {{2, 3, 7}, true, true},       {{3, 4, 5, 6}, true, false},
                        {{400, 130}, true, false},  // several threads' worth of rows
                        {{4, 3, 64, 50}, false, false}};
  uint64_t seed = 100;
  for (const Case& k : cases) {
    for (DType dt : kFloatTypes) {
      for (bool training : {true, false}) {
        CAPTURE(shape_str(k.shape));
        CAPTURE(dt);
        CAPTURE(training);
        const int64_t N = k.shape[0], C = k.shape[1], S = shape_numel(k.shape) / (N * C);
        Tensor x = random_tensor(k.shape, dt, seed++, -1, 3);
        Tensor g = random_tensor(k.shape, dt, seed++);
        Tensor w = k.affine ? random_tensor({C}, dt, seed++) : Tensor();
        Tensor b = k.affine ? random_tensor({C}, dt, seed++) : Tensor();
        Tensor rm = random_tensor({C}, dt, seed++), rv = random_tensor({C}, dt, seed++, 0.5, 2);
        if (k.noncontig) {
          x = noncontiguous(x);
          g = noncontiguous(g);
        }
        Tensor rm0 = rm.clone(), rv0 = rv.clone();
        BnRef ref = ref_batch_norm(to_f64(x), to_f64(g), N, C, S,
                                   w.defined() ? to_f64(w) : std::vector<double>{},
                                   b.defined() ? to_f64(b) : std::vector<double>{}, to_f64(rm),
                                   to_f64(rv), training, 0.1, 1e-5);
        auto r = batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5);
        CHECK(r.out.dtype() == dt);
        check_close(r.out, ref.out);
        check_close(rm, ref.rm);
        check_close(rv, ref.rv);
        auto gr =
            batch_norm_backward(g, x, w, rm0, rv0, r.save_mean, r.save_invstd, training, 1e-5);
        auto [rt, at] = tolerance(dt);
        check_close(gr.grad_x, ref.gx, rt, at * 4);
        check_close(gr.grad_w, ref.gw, rt, at * double(N * S));
        check_close(gr.grad_b, ref.gb, rt, at * double(N * S));
      }
    }
  }
}

TEST_CASE("batch_norm_backward: finite differences (f64), train and eval") {
  const Shape shape{3, 2, 5};
  std::vector<double> x = to_f64(random_tensor(shape, kFloat64, 21));
  std::vector<double> w = to_f64(random_tensor({2}, kFloat64, 22));
  std::vector<double> b = to_f64(random_tensor({2}, kFloat64, 23));
  std::vector<double> g = to_f64(random_tensor(shape, kFloat64, 24));
  Tensor rm = from_f64({0.3, -0.2}, {2}, kFloat64), rv = from_f64({1.5, 0.7}, {2}, kFloat64);
  for (bool training : {true, false}) {
    CAPTURE(training);
    auto loss = [&](const std::vector<double>& xv, const std::vector<double>& wv,
                    const std::vector<double>& bv) {
      Tensor m = rm.clone(), v = rv.clone();
      return dot(to_f64(batch_norm(from_f64(xv, shape, kFloat64), from_f64(wv, {2}, kFloat64),
                                   from_f64(bv, {2}, kFloat64), m, v, training)
                            .out),
                 g);
    };
    Tensor X = from_f64(x, shape, kFloat64), W = from_f64(w, {2}, kFloat64);
    Tensor m = rm.clone(), v = rv.clone();
    auto r = batch_norm(X, W, from_f64(b, {2}, kFloat64), m, v, training);
    auto gr = batch_norm_backward(from_f64(g, shape, kFloat64), X, W, rm, rv, r.save_mean,
                                  r.save_invstd, training);
    check_fd(x, to_f64(gr.grad_x), [&](const std::vector<double>& p) { return loss(p, w, b); });
    check_fd(w, to_f64(gr.grad_w), [&](const std::vector<double>& p) { return loss(x, p, b); });
    check_fd(b, to_f64(gr.grad_b), [&](const std::vector<double>& p) { return loss(x, w, p); });
  }
}

TEST_CASE("batch_norm: zero-size and mixed-dtype parameters") {
  auto r =
      batch_norm(empty({0, 3}), {}, {}, from_f64({0, 0, 0}, {3}), from_f64({1, 1, 1}, {3}), false);
  CHECK(r.out.shape() == Shape{0, 3});
  // f16 input with f32 parameters and running stats (as under mixed precision)
  Tensor x = random_tensor({8, 3}, kFloat16, 5);
  Tensor rm = from_f64({0, 0, 0}, {3}), rv = from_f64({1, 1, 1}, {3});
  auto h = batch_norm(x, from_f64({1, 2, 3}, {3}), {}, rm, rv, true);
  CHECK(h.out.dtype() == kFloat16);
  CHECK(rm.dtype() == kFloat32);
  BnRef ref = ref_batch_norm(to_f64(x), to_f64(x), 8, 3, 1, {1, 2, 3}, {}, {0, 0, 0}, {1, 1, 1},
                             true, 0.1, 1e-5);
  check_close(h.out, ref.out);
  check_close(rm, ref.rm);
  check_close(rv, ref.rv);
}

// A constant channel (zero variance): its mean is its value exactly, so x - mean = 0 and no
// rounding is amplified by invstd = 1/sqrt(eps) into grad_w (the corrected two-pass mean; the
// CUDA kernel does the same, and cuda_ops compares the two on such inputs).
TEST_CASE("batch_norm: a constant channel has x - mean = 0 exactly (f32, f64)") {
  for (DType dt : {kFloat32, kFloat64}) {
    CAPTURE(dt);
    // 64 rows of one random row (the parity suite's stride-0 layout, made contiguous), C = 5
    Tensor x = random_tensor({1, 5}, dt, 11).expand({64, 5}).contiguous();
    Tensor w = random_tensor({5}, dt, 12), b = random_tensor({5}, dt, 13);
    BatchNormResult r = batch_norm(x, w, b, Tensor(), Tensor(), true, 0.1, 1e-5);
    CHECK(equal(r.save_mean.to(dt), x[0]));
    check_close(r.save_invstd, std::vector<double>(5, 1 / std::sqrt(1e-5)));
    Tensor g = random_tensor({64, 5}, dt, 14);
    BatchNormGrads gr =
        batch_norm_backward(g, x, w, Tensor(), Tensor(), r.save_mean, r.save_invstd, true, 1e-5);
    CHECK(equal(gr.grad_w, zeros({5}, dt)));
  }
}

TEST_CASE("batch_norm: errors name the op and shapes") {
  Tensor x = empty({4, 3});
  Tensor c3 = from_f64({0, 0, 0}, {3}), c4 = from_f64({0, 0, 0, 0}, {4});
  CHECK_THROWS_WITH_AS(batch_norm(x, {}, {}, c4, c3, true),
                       doctest::Contains("op `batch_norm`: running_mean should contain 3 "
                                         "elements (channels of input [4, 3]), got shape [4]"),
                       Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, {}, {}, c3, c4, true),
                       doctest::Contains("running_var should contain 3"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, c4, {}, c3, c3, true),
                       doctest::Contains("weight should contain 3"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, {}, c4, c3, c3, true),
                       doctest::Contains("bias should contain 3"), Error);
  CHECK_THROWS_WITH_AS(
      batch_norm(random_tensor({1, 3}), {}, {}, c3.clone(), c3.clone(), true),
      doctest::Contains("Expected more than 1 value per channel when training, got input of "
                        "shape [1, 3]"),
      Error);
  CHECK_NOTHROW(batch_norm(random_tensor({1, 3}), {}, {}, c3, from_f64({1, 1, 1}, {3}), false));
  CHECK_THROWS_WITH_AS(batch_norm(empty({3}), {}, {}, {}, {}, true),
                       doctest::Contains("expected input of shape [N, C] or [N, C, *], got [3]"),
                       Error);
  CHECK_THROWS_WITH_AS(batch_norm(empty({4, 3}, kInt32), {}, {}, {}, {}, true),
                       doctest::Contains("expected a floating input, got dtype int32"), Error);
  CHECK_THROWS_WITH_AS(batch_norm_backward(empty({4, 2}), x, {}, c3, c3, c3, c3, true),
                       doctest::Contains("op `batch_norm_backward`: grad_out shape [4, 2] does "
                                         "not match input shape [4, 3]"),
                       Error);
}
