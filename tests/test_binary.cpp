// Binary op tests: arithmetic, pow, maximum/minimum, comparisons, logical ops and where against
// f64 reference loops with broadcasting, views, zero-size and every dtype; PyTorch type
// promotion, Scalar overloads and operators (in-place ops, equal/allclose and errors:
// tests/test_binary_inplace.cpp).
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

using BinOp = std::function<Tensor(const Tensor&, const Tensor&)>;
using BinRef = std::function<double(double, double)>;

// Reference result of `ref` on a and b broadcast to their common shape (values as f64).
std::vector<double> reference(const Tensor& a, const Tensor& b, const BinRef& ref) {
  Shape shape = broadcast_shapes(a.shape(), b.shape());
  std::vector<double> x = to_f64(a.expand(shape)), y = to_f64(b.expand(shape));
  std::vector<double> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = ref(x[i], y[i]);
  return r;
}

struct BinCase {
  std::string name;
  BinOp op;
  BinRef ref;
  double alo, ahi, blo, bhi;  // input ranges
};

std::vector<BinCase> arith_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); },
       [](double x, double y) { return x + y; }, -3, 3, -3, 3},
      {"add_alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); },
       [](double x, double y) { return x + 2.5 * y; }, -3, 3, -3, 3},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); },
       [](double x, double y) { return x - y; }, -3, 3, -3, 3},
      {"sub_alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, -0.5); },
       [](double x, double y) { return x + 0.5 * y; }, -3, 3, -3, 3},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); },
       [](double x, double y) { return x * y; }, -3, 3, -3, 3},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); },
       [](double x, double y) { return x / y; }, -3, 3, 0.5, 3},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](double x, double y) { return std::pow(x, y); }, 0.1, 3, -2, 2},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double x, double y) { return std::max(x, y); }, -3, 3, -3, 3},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double x, double y) { return std::min(x, y); }, -3, 3, -3, 3},
  };
}

const std::vector<std::pair<Shape, Shape>> kShapePairs = {
    {{3, 4, 5}, {3, 4, 5}}, {{3, 1, 5}, {4, 1}}, {{5}, {}},         {{}, {2, 3}},
    {{2, 0, 3}, {3}},       {{1, 6}, {5, 1}},    {{2, 700}, {700}}, {{}, {}}};

}  // namespace

TEST_CASE("binary arithmetic matches f64 references (broadcast, views, float dtypes)") {
  uint64_t seed = 100;
  for (const BinCase& c : arith_cases()) {
    for (DType dt : kFloatTypes) {
      for (const auto& [sa, sb] : kShapePairs) {
        INFO("op ", c.name, " dtype ", dtype_name(dt), " shapes ", shape_str(sa), " ",
             shape_str(sb));
        Tensor a = random_tensor(sa, dt, seed++, c.alo, c.ahi);
        Tensor b = random_tensor(sb, dt, seed++, c.blo, c.bhi);
        std::vector<double> expect = reference(a, b, c.ref);
        Tensor y = c.op(a, b);
        CHECK(y.dtype() == dt);
        CHECK(y.shape() == broadcast_shapes(sa, sb));
        check_close(y, expect);
        check_close(c.op(noncontiguous(a), noncontiguous(b)), expect);
        check_close(c.op(noncontiguous(a), b), expect);
        if (a.dim() == 3 && b.dim() == 3) {
          Tensor at = a.transpose(0, 2), bt = b.transpose(0, 2);
          check_close(c.op(at, bt), reference(at, bt, c.ref));
        }
        // operands swapped exercise the other broadcast fast path
        check_close(c.op(b, a), reference(b, a, c.ref));
      }
    }
  }
}

TEST_CASE("binary ops: hand-worked values and a large (parallel) tensor") {
  Tensor a = from_f64({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_f64({10, 20, 30}, {3});
  CHECK(to_f64(a + b) == std::vector<double>{11, 22, 33, 14, 25, 36});
  CHECK(to_f64(b - a) == std::vector<double>{9, 18, 27, 6, 15, 24});
  CHECK(to_f64(a * b) == std::vector<double>{10, 40, 90, 40, 100, 180});
  CHECK(to_f64(a / from_f64({2}, {1})) == std::vector<double>{0.5, 1, 1.5, 2, 2.5, 3});
  CHECK(to_f64(pow(a, from_f64({2}, {}))) == std::vector<double>{1, 4, 9, 16, 25, 36});
  Tensor col = from_f64({3.5, 0.5}, {2, 1});
  CHECK(to_f64(maximum(a, col)) == std::vector<double>{3.5, 3.5, 3.5, 4, 5, 6});
  CHECK(to_f64(minimum(a, col)) == std::vector<double>{1, 2, 3, 0.5, 0.5, 0.5});
  Tensor big = random_tensor({70001}, kFloat32, 3), big2 = random_tensor({70001}, kFloat32, 4);
  check_close(add(big, big2), reference(big, big2, [](double x, double y) { return x + y; }));
  check_close(mul(big, big2.slice(0, 0, 1)),
              reference(big, big2.slice(0, 0, 1), [](double x, double y) { return x * y; }));
}

TEST_CASE("integer arithmetic is exact and wraps like PyTorch") {
  for (DType dt : {kInt32, kInt64, kUInt8}) {
    INFO("dtype ", dtype_name(dt));
    const double lo = dt == kUInt8 ? 0 : -50, hi = 50;
    Tensor a = random_tensor({3, 1, 5}, dt, 11, lo, hi), b = random_tensor({4, 1}, dt, 12, lo, hi);
    auto wrap = [dt](double v) {
      if (dt != kUInt8) return v;
      double m = std::fmod(v, 256.0);
      return m < 0 ? m + 256 : m;
    };
    auto check_op = [&](const Tensor& got, const BinRef& ref) {
      CHECK(got.dtype() == dt);
      std::vector<double> e = reference(a, b, ref);
      for (double& v : e) v = wrap(v);
      CHECK(to_f64(got) == e);
    };
    check_op(add(a, b), [](double x, double y) { return x + y; });
    check_op(sub(a, b), [](double x, double y) { return x - y; });
    check_op(mul(a, b), [](double x, double y) { return x * y; });
    check_op(add(a, b, 3), [](double x, double y) { return x + 3 * y; });
    check_op(maximum(a, b), [](double x, double y) { return std::max(x, y); });
    check_op(minimum(noncontiguous(a), b), [](double x, double y) { return std::min(x, y); });
    Tensor d = div(a, abs(b) + 1);
    CHECK(d.dtype() == kFloat32);  // true division
    check_close(d, reference(a, abs(b) + 1, [](double x, double y) { return x / y; }));
  }
  Tensor u = from_f64({2, 3}, {2}, kUInt8), v = from_f64({3, 2}, {2}, kUInt8);
  CHECK(to_f64(u - v) == std::vector<double>{255, 1});
  Tensor i32max = from_f64({2147483647.0}, {1}, kInt32);
  CHECK(to_f64(i32max + from_f64({1}, {1}, kInt32)) == std::vector<double>{-2147483648.0});
  // bool arithmetic: add = or, mul = and
  Tensor t = from_f64({1, 1, 0, 0}, {4}, kBool), f = from_f64({1, 0, 1, 0}, {4}, kBool);
  CHECK((t + f).dtype() == kBool);
  CHECK(to_f64(t + f) == std::vector<double>{1, 1, 1, 0});
  CHECK(to_f64(t * f) == std::vector<double>{1, 0, 0, 0});
  CHECK(to_f64(maximum(t, f)) == std::vector<double>{1, 1, 1, 0});
  CHECK_THROWS_WITH_AS(t - f, doctest::Contains("op `sub`: subtraction"), Error);
}

TEST_CASE("pow: scalar exponents, integer powers, errors") {
  for (DType dt : kFloatTypes) {
    Tensor x = random_tensor({4, 7}, dt, 21, 0.1, 4);
    for (double e : {2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.0, 0.0, 1.7, -2.3}) {
      INFO("dtype ", dtype_name(dt), " exponent ", e);
      Tensor y = pow(x, e);
      CHECK(y.dtype() == dt);
      Tensor et = from_f64({e}, {}, kFloat64);
      auto ref = [](double a, double b) { return std::pow(a, b); };
      check_close(y, reference(x, et, ref));
      check_close(pow(x.t(), e), reference(x.t(), et, ref));
    }
  }
  Tensor i = from_f64({-3, 0, 5}, {3}, kInt64);
  CHECK(pow(i, 2).dtype() == kInt64);
  CHECK(to_f64(pow(i, 2)) == std::vector<double>{9, 0, 25});
  CHECK(to_f64(pow(i, 3)) == std::vector<double>{-27, 0, 125});
  CHECK(pow(i, 2.5).dtype() == kFloat32);
  check_close(pow(i, 2.5), {kNaN, 0, std::pow(5.0, 2.5)});
  CHECK(to_f64(pow(from_f64({1, -1, 2}, {3}, kInt64), from_f64({-1, -3, -2}, {3}, kInt64))) ==
        std::vector<double>{1, -1, 0});
  CHECK(to_f64(pow(from_f64({2, 3}, {2}, kInt32), from_f64({10, 4}, {2}, kInt32))) ==
        std::vector<double>{1024, 81});
  check_close(pow(from_f64({-2, 0, -0.0, kInf}, {4}), 0.5), {kNaN, 0, 0, kInf});
  check_close(pow(from_f64({0, kNaN}, {2}), 0.0), {1, 1});
  CHECK_THROWS_WITH_AS(pow(i, -1), doctest::Contains("op `pow`: integers to negative"), Error);
  CHECK_THROWS_WITH_AS(pow(from_f64({1}, {1}, kBool), from_f64({1}, {1}, kBool)),
                       doctest::Contains("op `pow`: not supported for bool"), Error);
}

TEST_CASE("comparisons return bool on every dtype, with broadcasting and promotion") {
  struct Cmp {
    std::string name;
    BinOp op;
    std::function<bool(double, double)> ref;
  };
  std::vector<Cmp> cmps = {
      {"eq", [](const Tensor& a, const Tensor& b) { return a == b; },
       [](double x, double y) { return x == y; }},
      {"ne", [](const Tensor& a, const Tensor& b) { return a != b; },
       [](double x, double y) { return x != y; }},
      {"lt", [](const Tensor& a, const Tensor& b) { return a < b; },
       [](double x, double y) { return x < y; }},
      {"le", [](const Tensor& a, const Tensor& b) { return a <= b; },
       [](double x, double y) { return x <= y; }},
      {"gt", [](const Tensor& a, const Tensor& b) { return a > b; },
       [](double x, double y) { return x > y; }},
      {"ge", [](const Tensor& a, const Tensor& b) { return a >= b; },
       [](double x, double y) { return x >= y; }},
      {"logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); },
       [](double x, double y) { return x != 0 && y != 0; }},
      {"logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); },
       [](double x, double y) { return x != 0 || y != 0; }},
  };
  uint64_t seed = 500;
  for (const Cmp& c : cmps) {
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool}) {
      INFO("op ", c.name, " dtype ", dtype_name(dt));
      // small integer-valued ranges so ties are frequent
      Tensor a = random_tensor({3, 1, 5}, dt, seed++, 0, 3);
      Tensor b = random_tensor({4, 1}, dt, seed++, 0, 3);
      auto ref = [&](double x, double y) { return double(c.ref(x, y)); };
      Tensor y = c.op(a, b);
      CHECK(y.dtype() == kBool);
      CHECK(y.shape() == Shape{3, 4, 5});
      CHECK(to_f64(y) == reference(a, b, ref));
      Tensor at = random_tensor({5, 1, 3}, dt, seed++, 0, 3).transpose(0, 2);  // [3, 1, 5]
      CHECK(to_f64(c.op(at, noncontiguous(b))) == reference(at, b, ref));
    }
    // mixed dtypes compare in the promoted dtype: 2 (int) vs 2.5 (float)
    Tensor i = from_f64({1, 2, 3}, {3}, kInt64), f = from_f64({2.5}, {}, kFloat32);
    CHECK(to_f64(c.op(i, f)) == reference(i, f, [&](double x, double y) { return c.ref(x, y); }));
  }
  Tensor x = from_f64({1, 2, kNaN, 4}, {4});
  CHECK(to_f64(eq(x, 2.0)) == std::vector<double>{0, 1, 0, 0});
  CHECK(to_f64(ne(x, x)) == std::vector<double>{0, 0, 1, 0});  // NaN != NaN
  CHECK(to_f64(lt(x, 2)) == std::vector<double>{1, 0, 0, 0});
  CHECK(to_f64(le(x, 2)) == std::vector<double>{1, 1, 0, 0});
  CHECK(to_f64(gt(x, 1.5)) == std::vector<double>{0, 1, 0, 1});
  CHECK(to_f64(ge(x, 4)) == std::vector<double>{0, 0, 0, 1});
  CHECK(to_f64(lt(from_f64({2, 3}, {2}, kInt32), 2.5)) == std::vector<double>{1, 0});
  CHECK(to_f64(logical_and(x, from_f64({1, 0, 1, 1}, {4}, kInt32))) ==
        std::vector<double>{1, 0, 1, 1});  // NaN is true
  CHECK(eq(empty({0, 3}), empty({3})).shape() == Shape{0, 3});
}

TEST_CASE("maximum/minimum propagate NaN") {
  Tensor a = from_f64({kNaN, 1, 2, -kInf}, {4}), b = from_f64({0, kNaN, 3, 1}, {4});
  check_close(maximum(a, b), {kNaN, kNaN, 3, 1});
  check_close(minimum(a, b), {kNaN, kNaN, 2, -kInf});
  check_close(maximum(a, 1.5), {kNaN, 1.5, 2, 1.5});
  check_close(minimum(b, 1), {0, kNaN, 1, 1});
}

TEST_CASE("where: three-way broadcasting, dtypes and promotion") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool}) {
    INFO("dtype ", dtype_name(dt));
    Tensor cond = random_tensor({3, 1, 5}, kBool, 31);
    Tensor a = random_tensor({4, 1}, dt, 32, 0, 9), b = random_tensor({5}, dt, 33, 0, 9);
    Tensor y = where(cond, a, b);
    CHECK(y.dtype() == dt);
    CHECK(y.shape() == Shape{3, 4, 5});
    Shape s = y.shape();
    std::vector<double> c = to_f64(cond.expand(s)), x = to_f64(a.expand(s)),
                        z = to_f64(b.expand(s)), e(c.size());
    for (size_t k = 0; k < e.size(); ++k) e[k] = c[k] != 0 ? x[k] : z[k];
    CHECK(to_f64(y) == e);
    CHECK(to_f64(where(noncontiguous(cond), noncontiguous(a), b)) == e);
  }
  Tensor cond = from_f64({1, 0, 1}, {3}, kBool);
  Tensor i = from_f64({-3, 0, 5}, {3}, kInt64);
  Tensor w = where(cond, i, 2.5);
  CHECK(w.dtype() == kFloat32);
  CHECK(to_f64(w) == std::vector<double>{-3, 2.5, 5});
  Tensor wi = where(cond, from_f64({7, 8, 9}, {3}, kInt32), 2);
  CHECK(wi.dtype() == kInt32);
  CHECK(to_f64(wi) == std::vector<double>{7, 2, 9});
  CHECK(where(cond, i, from_f64({0.5}, {1}, kFloat64)).dtype() == kFloat64);
  CHECK_THROWS_WITH_AS(where(i, i, i),
                       doctest::Contains("op `where`: expected condition to be a boolean "
                                         "tensor, but got a tensor with dtype int64"),
                       Error);
  CHECK_THROWS_WITH_AS(where(cond, i, empty({2})), doctest::Contains("op `where`"), Error);
}

TEST_CASE("type promotion of binary ops (PyTorch rules)") {
  auto T = [](DType dt, const Shape& s = {2}) {
    return from_f64(std::vector<double>(size_t(shape_numel(s)), 1.0), s, dt);
  };
  CHECK((T(kInt32) + 2.5).dtype() == kFloat32);
  CHECK(to_f64(T(kInt32) + 2.5) == std::vector<double>{3.5, 3.5});
  CHECK((T(kInt64) + T(kFloat64, {})).dtype() == kFloat64);
  CHECK((T(kInt32) + T(kFloat64, {})).dtype() == kFloat64);
  CHECK((T(kFloat16) + T(kFloat32, {})).dtype() == kFloat16);
  CHECK((T(kFloat16) * 2.5).dtype() == kFloat16);
  CHECK((T(kInt32) + T(kInt64, {})).dtype() == kInt32);  // 0-d loses within its category
  CHECK((T(kInt32) + T(kInt64)).dtype() == kInt64);
  CHECK((T(kUInt8) + T(kInt32)).dtype() == kInt32);
  CHECK((T(kBool) + T(kBool)).dtype() == kBool);
  CHECK((T(kBool) + 1).dtype() == kInt64);
  CHECK((T(kBool) + T(kUInt8)).dtype() == kUInt8);
  CHECK((T(kInt64) * true).dtype() == kInt64);
  CHECK((T(kFloat16) + T(kBFloat16)).dtype() == kFloat32);
  CHECK((T(kInt32, {}) + T(kFloat64, {})).dtype() == kFloat64);
  CHECK((T(kInt64) / T(kInt64)).dtype() == kFloat32);
  CHECK((T(kBool) / T(kBool)).dtype() == kFloat32);
  CHECK(to_f64(from_f64({7, -7}, {2}, kInt64) / 2) == std::vector<double>{3.5, -3.5});
  CHECK((T(kFloat64) / 2).dtype() == kFloat64);
  CHECK(maximum(T(kInt32), 2.5).dtype() == kFloat32);
}

TEST_CASE("Scalar overloads and operators") {
  Tensor a = from_f64({1, 2, 4}, {3});
  CHECK(to_f64(a + 1) == std::vector<double>{2, 3, 5});
  CHECK(to_f64(1 + a) == std::vector<double>{2, 3, 5});
  CHECK(to_f64(a - 1) == std::vector<double>{0, 1, 3});
  CHECK(to_f64(2 - a) == std::vector<double>{1, 0, -2});
  CHECK(to_f64(a * 3) == std::vector<double>{3, 6, 12});
  CHECK(to_f64(0.5 * a) == std::vector<double>{0.5, 1, 2});
  CHECK(to_f64(a / 2) == std::vector<double>{0.5, 1, 2});
  CHECK(to_f64(2 / a) == std::vector<double>{2, 1, 0.5});
  CHECK(to_f64(-a) == std::vector<double>{-1, -2, -4});
  Tensor i = from_f64({1, 2}, {2}, kInt64);
  CHECK((2 - i).dtype() == kInt64);
  CHECK(to_f64(2 - i) == std::vector<double>{1, 0});
  CHECK((2.5 / i).dtype() == kFloat32);
  CHECK(to_f64(2.5 / i) == std::vector<double>{2.5, 1.25});
  CHECK((1.5 - i).dtype() == kFloat32);
  // alpha
  CHECK(to_f64(add(a, a, 2)) == std::vector<double>{3, 6, 12});
  CHECK(to_f64(sub(a, a, 0.5)) == std::vector<double>{0.5, 1, 2});
  CHECK(to_f64(add(i, i, -2)) == std::vector<double>{-1, -2});
  CHECK_THROWS_WITH_AS(add(i, i, 2.5), doctest::Contains("op `add`: for integral input"), Error);
  CHECK_THROWS_WITH_AS(sub(i, i, 2.5), doctest::Contains("alpha must not be a floating"), Error);
}
