// Unary op tests: every op against std:: f64 reference loops on random shapes, views,
// zero-size and 0-d tensors, all float dtypes (reference from the rounded inputs), integer
// dtype rules, known values from PyTorch, clamp/clamp_ semantics and errors.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const DType kFloatTypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16};

std::vector<double> map_ref(const std::vector<double>& v, const std::function<double(double)>& f) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = f(v[i]);
  return r;
}

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double sigmoid_ref(double x) {
  return 1 / (1 + std::exp(-x));
}

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;  // input range
};

std::vector<UnaryCase> float_cases() {
  return {
      {"exp", [](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }, -5, 5},
      {"log", [](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); }, 0.05,
       9},
      {"log1p", [](const Tensor& x) { return log1p(x); }, [](double v) { return std::log1p(v); },
       -0.9, 5},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }, 0,
       9},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double v) { return 1 / std::sqrt(v); },
       0.05, 9},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double v) { return std::sin(v); }, -7, 7},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double v) { return std::cos(v); }, -7, 7},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, -6,
       6},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, sigmoid_ref, -12, 12},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double v) { return v * sigmoid_ref(v); },
       -12, 12},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double v) { return std::erf(v); }, -5, 5},
      {"gelu", [](const Tensor& x) { return gelu(x); }, gelu_ref, -6, 6},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, gelu_tanh_ref, -6, 6},
      {"neg", [](const Tensor& x) { return neg(x); }, [](double v) { return -v; }, -5, 5},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double v) { return std::abs(v); }, -5, 5},
      {"sign", [](const Tensor& x) { return sign(x); },
       [](double v) { return double((0 < v) - (v < 0)); }, -3, 3},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double v) { return v < 0 ? 0.0 : v; },
       -3, 3},
      {"square", [](const Tensor& x) { return square(x); }, [](double v) { return v * v; }, -3, 3},
  };
}

}  // namespace

TEST_CASE("unary float ops match f64 references (all float dtypes, views, sizes)") {
  uint64_t seed = 1;
  for (const UnaryCase& c : float_cases()) {
    for (DType dt : kFloatTypes) {
      for (const Shape& shape :
           {Shape{3, 4, 5}, Shape{7}, Shape{}, Shape{2, 0, 3}, Shape{2, 700}}) {
        INFO("op ", c.name, " dtype ", dtype_name(dt), " shape ", shape_str(shape));
        Tensor x = random_tensor(shape, dt, seed++, c.lo, c.hi);
        std::vector<double> expect = map_ref(to_f64(x), c.ref);
        Tensor y = c.op(x);
        CHECK(y.dtype() == dt);
        CHECK(y.shape() == shape);
        check_close(y, expect);
        // strided input (every other element) and a transposed view
        check_close(c.op(noncontiguous(x)), expect);
        if (x.dim() >= 2) {
          Tensor xt = x.transpose(0, 1);
          check_close(c.op(xt), map_ref(to_f64(xt), c.ref));
        }
      }
    }
  }
}

TEST_CASE("unary ops on a large tensor (parallel path) and on a non-contiguous output") {
  Tensor x = random_tensor({70001}, kFloat32, 99, -4, 4);
  check_close(exp(x), map_ref(to_f64(x), [](double v) { return std::exp(v); }));
  check_close(gelu(x), map_ref(to_f64(x), gelu_ref));
  check_close(relu(x), map_ref(to_f64(x), [](double v) { return v < 0 ? 0.0 : v; }));
  Tensor xh = random_tensor({300, 301}, kBFloat16, 7, -4, 4).t();
  check_close(tanh(xh), map_ref(to_f64(xh), [](double v) { return std::tanh(v); }));
}

TEST_CASE("gelu, gelu_tanh, silu, sigmoid, erf known values (PyTorch)") {
  std::vector<double> xs = {-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 5.0};
  Tensor x = from_f64(xs, {8}, kFloat64);
  check_close(gelu(x),
              {-0.00404969409489031, -0.15865525393145702, -0.15426876936299344, 0.0,
               0.34573123063700656, 0.841344746068543, 1.9544997361036416, 4.999998566742141});
  check_close(gelu(x, "tanh"),
              {-0.0036373920817729943, -0.1588080093917233, -0.15428599017485606, 0.0,
               0.34571400982514394, 0.8411919906082768, 1.954597694087775, 4.999999770820381});
  check_close(silu(x),
              {-0.14227761953270035, -0.2689414213699951, -0.1887703343990727, 0.0,
               0.3112296656009273, 0.7310585786300049, 1.7615941559557646, 4.966535745378576});
  check_close(sigmoid(x),
              {0.04742587317756678, 0.2689414213699951, 0.3775406687981454, 0.5, 0.6224593312018546,
               0.7310585786300049, 0.8807970779778823, 0.9933071490757153});
  check_close(erf(x),
              {-0.9999779095030014, -0.8427007929497149, -0.5204998778130465, 0.0,
               0.5204998778130465, 0.8427007929497149, 0.9953222650189527, 0.9999999999984626});
  // f32 and bf16 results as PyTorch computes them
  check_close(gelu(x.to(kFloat32)),
              {-0.004049867391586304, -0.1586552858352661, -0.1542687863111496, 0.0,
               0.3457311987876892, 0.8413447141647339, 1.9544999599456787, 4.999998569488525});
  std::vector<double> g16 = {-0.004058837890625, -0.158203125, -0.154296875, 0.0,
                             0.345703125,        0.83984375,   1.953125,     5.0};
  check_close(gelu(x.to(kBFloat16)), g16, 0, 0.004);
  check_close(silu(x.to(kFloat16)),
              {-0.142333984375, -0.26904296875, -0.188720703125, 0.0, 0.311279296875, 0.73095703125,
               1.76171875, 4.96484375},
              0, 0.002);
  CHECK_THROWS_WITH_AS(gelu(x, "fast"), doctest::Contains("op `gelu`"), Error);
}

TEST_CASE("gelu_tanh backward on f16/bf16 (contiguous and strided) matches the f64 derivative") {
  // d/dx gelu_tanh = 1/2 (1 + t) + x/2 (1 - t^2) k (1 + 3c x^2), t = tanh(k (x + c x^3))
  auto dref = [](double v) {
    const double k = std::sqrt(2 / M_PI), c = 0.044715, t = std::tanh(k * (v + c * v * v * v));
    return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * c * v * v);
  };
  for (DType dt : {kFloat16, kBFloat16})
    for (bool strided : {false, true}) {
      INFO(dtype_name(dt), strided ? " strided" : " contiguous");
      Tensor base = random_tensor({3, 700}, dt, 61, -4.0, 4.0);
      Tensor x = (strided ? noncontiguous(base) : base).detach().requires_grad_(true);
      Tensor g = random_tensor({3, 700}, dt, 62);
      gelu(x, "tanh").backward(g);
      std::vector<double> xv = to_f64(x.detach()), gv = to_f64(g), ref(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) ref[i] = gv[i] * dref(xv[i]);
      const double u = dt == kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
      check_close(x.grad(), ref, 2 * u, 2 * u);
    }
}

TEST_CASE("unary special values: inf, nan, zeros") {
  Tensor x = from_f64({-kInf, -1, -0.0, 0, 1, kInf, kNaN}, {7}, kFloat32);
  check_close(exp(x), {0, std::exp(-1.0), 1, 1, std::exp(1.0), kInf, kNaN});
  check_close(log(x), {kNaN, kNaN, -kInf, -kInf, 0, kInf, kNaN});
  check_close(sqrt(x), {kNaN, kNaN, 0, 0, 1, kInf, kNaN});
  check_close(rsqrt(x), {kNaN, kNaN, -kInf, kInf, 1, 0, kNaN});
  check_close(sigmoid(x), {0, sigmoid_ref(-1), 0.5, 0.5, sigmoid_ref(1), 1, kNaN});
  check_close(tanh(x), {-1, std::tanh(-1.0), 0, 0, std::tanh(1.0), 1, kNaN});
  check_close(relu(x), {0, 0, 0, 0, 1, kInf, kNaN});
  check_close(sign(x), {-1, -1, 0, 0, 1, 1, 0});  // sign(NaN) = 0 as PyTorch's CPU kernel
  check_close(abs(x), {kInf, 1, 0, 0, 1, kInf, kNaN});
  check_close(erf(x), {-1, std::erf(-1.0), 0, 0, std::erf(1.0), 1, kNaN});
  check_close(silu(x.slice(0, 1, 7)), {-sigmoid_ref(-1), 0, 0, sigmoid_ref(1), kInf, kNaN});
}

// PyTorch's sqrt is correctly rounded (so are the CUDA kernels): f32 results equal std::sqrt
// bit for bit, denormal inputs included, on every SIMD width (the vector body and its tail).
TEST_CASE("sqrt and rsqrt are correctly rounded in f32 (no rsqrt-estimate shortcut)") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-140, 100);
  std::vector<float> v(4099);
  for (float& x : v) x = std::ldexp(mant(rng), expo(rng));
  v[0] = std::numeric_limits<float>::denorm_min();
  v[1] = 0.75f * std::numeric_limits<float>::min();
  Tensor t = from_blob(v.data(), {int64_t(v.size())}, kFloat32).clone();
  const std::vector<float> s = sqrt(t).tolist<float>(), r = rsqrt(t).tolist<float>();
  int64_t bad_sqrt = 0, bad_rsqrt = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    bad_sqrt += s[i] != std::sqrt(v[i]);
    bad_rsqrt += r[i] != 1.0f / std::sqrt(v[i]);
  }
  CHECK(bad_sqrt == 0);
  CHECK(bad_rsqrt == 0);
  CHECK(s[0] > 0.0f);  // a denormal's root is a normal number, not a flushed zero
}

TEST_CASE("unary dtype rules: integer and bool inputs") {
  Tensor i = from_f64({-3, 0, 5}, {3}, kInt64);
  // float math promotes to f32
  for (auto f : {+[](const Tensor& t) { return exp(t); }, +[](const Tensor& t) { return sqrt(t); },
                 +[](const Tensor& t) { return sigmoid(t); },
                 +[](const Tensor& t) { return gelu(t); }, +[](const Tensor& t) { return erf(t); }})
    CHECK(f(i).dtype() == kFloat32);
  check_close(exp(i), {std::exp(-3.0), 1, std::exp(5.0)});
  check_close(sqrt(from_f64({4, 9}, {2}, kInt32)), {2, 3});
  check_close(sigmoid(from_f64({1, 0}, {2}, kBool)), {sigmoid_ref(1), 0.5});
  check_close(log1p(from_f64({0, 1}, {2}, kUInt8)), {0, std::log(2.0)});
  // sign-like ops keep integer dtypes
  for (DType dt : {kInt32, kInt64}) {
    Tensor t = from_f64({-7, 0, 4, -1}, {2, 2}, dt);
    Tensor n = neg(t), a = abs(t), s = sign(t), r = relu(t), q = square(t);
    CHECK(n.dtype() == dt);
    CHECK(n.tolist<int64_t>() == std::vector<int64_t>{7, 0, -4, 1});
    CHECK(a.tolist<int64_t>() == std::vector<int64_t>{7, 0, 4, 1});
    CHECK(s.tolist<int64_t>() == std::vector<int64_t>{-1, 0, 1, -1});
    CHECK(r.tolist<int64_t>() == std::vector<int64_t>{0, 0, 4, 0});
    CHECK(q.tolist<int64_t>() == std::vector<int64_t>{49, 0, 16, 1});
    CHECK(neg(t.t()).tolist<int64_t>() == std::vector<int64_t>{7, -4, 0, 1});
  }
  Tensor u = from_f64({0, 1, 200}, {3}, kUInt8);
  CHECK(neg(u).tolist<int64_t>() == std::vector<int64_t>{0, 255, 56});  // wraps like PyTorch
  CHECK(abs(u).tolist<int64_t>() == std::vector<int64_t>{0, 1, 200});
  Tensor big = from_f64({double(std::numeric_limits<int32_t>::min())}, {1}, kInt32);
  CHECK(neg(big).tolist<int64_t>()[0] == std::numeric_limits<int32_t>::min());  // wraps
  // bool
  Tensor b = from_f64({1, 0}, {2}, kBool);
  CHECK(sign(b).dtype() == kBool);
  CHECK(sign(b).tolist<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(square(b).dtype() == kInt64);
  CHECK_THROWS_WITH_AS(neg(b), doctest::Contains("op `neg`"), Error);
  CHECK_THROWS_WITH_AS(abs(b), doctest::Contains("op `abs`: not supported for bool"), Error);
  CHECK_THROWS_WITH_AS(relu(b), doctest::Contains("op `relu`: not supported for bool"), Error);
  CHECK_THROWS_WITH_AS(exp(Tensor()), doctest::Contains("op `exp`: undefined"), Error);
}

TEST_CASE("logical_not on every dtype") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool}) {
    INFO("dtype ", dtype_name(dt));
    Tensor x = from_f64({0, 1, 0, 1, 1, 0}, {2, 3}, dt);
    Tensor y = logical_not(x);
    CHECK(y.dtype() == kBool);
    CHECK(y.tolist<int64_t>() == std::vector<int64_t>{1, 0, 1, 0, 0, 1});
    CHECK(logical_not(x.t()).tolist<int64_t>() == std::vector<int64_t>{1, 0, 0, 0, 1, 1});
  }
  CHECK(logical_not(from_f64({kNaN, -0.0, 2.5}, {3}, kFloat32)).tolist<int64_t>() ==
        std::vector<int64_t>{0, 1, 0});
  CHECK(logical_not(empty({0, 4})).shape() == Shape{0, 4});
}

TEST_CASE("clamp: bounds, NaN, integer dtypes, errors") {
  for (DType dt : kFloatTypes) {
    Tensor x = random_tensor({4, 6}, dt, 5, -3, 3);
    auto ref = [](double lo, double hi) {
      return [=](double v) { return std::min(std::max(v, lo), hi); };
    };
    check_close(clamp(x, -1.0, 0.5), map_ref(to_f64(x), ref(-1, 0.5)));
    check_close(clamp(x, std::nullopt, 0.5), map_ref(to_f64(x), ref(-kInf, 0.5)));
    check_close(clamp(x, -0.25, std::nullopt), map_ref(to_f64(x), ref(-0.25, kInf)));
    check_close(clamp(x.t(), -1.0, 1.0), map_ref(to_f64(x.t()), ref(-1, 1)));
    CHECK(clamp(x, 0.0, 1.0).dtype() == dt);
  }
  // min > max gives max everywhere; NaN stays NaN
  check_close(clamp(from_f64({1, 5, kNaN}, {3}), 3.0, 2.0), {2, 2, kNaN});
  check_close(clamp(from_f64({1, 5}, {2}), kNaN, 2.0), {kNaN, kNaN});
  // integer tensors keep their dtype with integer bounds; a float bound promotes to f32 (torch)
  Tensor i = from_f64({-3, 0, 5, 2}, {4}, kInt64);
  Tensor ci = clamp(i, -1, 2);
  CHECK(ci.dtype() == kInt64);
  CHECK(ci.tolist<int64_t>() == std::vector<int64_t>{-1, 0, 2, 2});
  Tensor cf = clamp(i, 1.5, std::nullopt);
  CHECK(cf.dtype() == kFloat32);
  CHECK(to_f64(cf) == std::vector<double>{1.5, 1.5, 5, 2});
  Tensor u = from_f64({1, 5, 250}, {3}, kUInt8);
  CHECK(clamp(u, -1.5, 300.0).dtype() == kFloat32);
  CHECK(to_f64(clamp(u, -1.5, 300.0)) == std::vector<double>{1, 5, 250});
  CHECK(clamp(u, 2, 7).dtype() == kUInt8);
  CHECK(clamp(u, 2, 7).tolist<int64_t>() == std::vector<int64_t>{2, 5, 7});
  CHECK_THROWS_WITH_AS(clamp(i, std::nullopt, std::nullopt),
                       doctest::Contains("op `clamp`: at least one of 'min' or 'max'"), Error);
  CHECK_THROWS_WITH_AS(clamp(from_f64({1}, {1}, kBool), false, true),
                       doctest::Contains("op `clamp`: not supported for bool"), Error);
  CHECK(clamp(from_f64({1, 0}, {2}, kBool), 0, std::nullopt).dtype() == kInt64);
}

TEST_CASE("clamp_ writes through views and bumps the version") {
  Tensor base = from_f64({-2, -1, 0, 1, 2, 3}, {2, 3}, kFloat32);
  Tensor col = base.select(1, 1);  // non-contiguous view: elements -1, 2
  uint64_t v0 = base.version();
  Tensor& r = clamp_(col, 0.0, 1.5);
  CHECK(&r == &col);
  CHECK(base.version() > v0);
  CHECK(to_f64(base) == std::vector<double>{-2, 0, 0, 1, 1.5, 3});
  CHECK_THROWS_WITH_AS(clamp_(base, std::nullopt, std::nullopt), doctest::Contains("op `clamp_`"),
                       Error);
}

TEST_CASE("square and cast") {
  Tensor x = from_f64({-1.5, 2, 3}, {3}, kFloat32);
  check_close(square(x), {2.25, 4, 9});
  Tensor c = cast(x, kFloat32);
  CHECK(!c.shares_storage(x));
  CHECK(to_f64(c) == to_f64(x));
  Tensor ci = cast(x, kInt32);
  CHECK(ci.dtype() == kInt32);
  CHECK(ci.tolist<int64_t>() == std::vector<int64_t>{-1, 2, 3});  // truncation
  CHECK(cast(x.slice(0, 0, 3, 2), kFloat64).tolist<double>() == std::vector<double>{-1.5, 3});
}
