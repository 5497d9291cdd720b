// Binary op tests, continued (tests/test_binary.cpp): in-place semantics (broadcasting into
// the destination, views, the version counter, dtype rules), equal/allclose, and errors that
// name the op and shapes.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

TEST_CASE("in-place ops: broadcasting, views, version, dtype rules") {
  Tensor a = from_f64({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_f64({10, 20, 30}, {3});
  uint64_t v0 = a.version();
  Tensor& r = add_(a, b);
  CHECK(&r == &a);
  CHECK(a.version() > v0);
  CHECK(to_f64(a) == std::vector<double>{11, 22, 33, 14, 25, 36});
  sub_(a, b, 2);
  CHECK(to_f64(a) == std::vector<double>{-9, -18, -27, -6, -15, -24});
  mul_(a, from_f64({-1, 2}, {2, 1}));
  CHECK(to_f64(a) == std::vector<double>{9, 18, 27, -12, -30, -48});
  div_(a, 3.0 * from_f64({1}, {}));
  CHECK(to_f64(a) == std::vector<double>{3, 6, 9, -4, -10, -16});
  a += 1;
  a *= 2;
  CHECK(to_f64(a) == std::vector<double>{8, 14, 20, -6, -18, -30});
  a -= from_f64({1, 1, 1}, {3});
  a /= from_f64({1, 2, 4}, {3});
  CHECK(to_f64(a) == std::vector<double>{7, 6.5, 4.75, -7, -9.5, -7.75});
  // non-contiguous self: writes through the view into the base
  Tensor base = from_f64({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor col = base.t();  // [3, 2] view
  uint64_t vb = base.version();
  add_(col, from_f64({100, 200}, {2}));
  CHECK(base.version() > vb);
  CHECK(to_f64(base) == std::vector<double>{100, 101, 102, 203, 204, 205});
  Tensor sel = base.select(1, 2);
  mul_(sel, 0.5);
  CHECK(to_f64(base) == std::vector<double>{100, 101, 51, 203, 204, 102.5});
  // aliasing operand: x += x.t()
  Tensor sq = from_f64({1, 2, 3, 4}, {2, 2});
  add_(sq, sq.t());
  CHECK(to_f64(sq) == std::vector<double>{2, 5, 5, 8});
  mul_(sq, sq);
  CHECK(to_f64(sq) == std::vector<double>{4, 25, 25, 64});
  Tensor row = sq.select(0, 1);  // [25, 64] overlaps the operand sq[:, 1] = [25, 64]
  sub_(row, sq.select(1, 1));
  CHECK(to_f64(sq) == std::vector<double>{4, 25, 0, 0});
  // integer self keeps exact integer arithmetic; float results cannot be stored
  Tensor i = from_f64({1, 2, 3}, {3}, kInt64);
  add_(i, from_f64({1, 1, 1}, {3}, kInt32));
  mul_(i, 3);
  CHECK(i.dtype() == kInt64);
  CHECK(to_f64(i) == std::vector<double>{6, 9, 12});
  CHECK_THROWS_WITH_AS(add_(i, from_f64({1.5}, {})),
                       doctest::Contains("result type Float can't be cast to the desired output "
                                         "type Long"),
                       Error);
  CHECK_THROWS_WITH_AS(mul_(i, 2.5), doctest::Contains("op `mul_`: result type Float"), Error);
  CHECK_THROWS_WITH_AS(div_(i, from_f64({2}, {1}, kInt64)),
                       doctest::Contains("op `div_`: result type Float"), Error);
  Tensor bl = from_f64({1, 0}, {2}, kBool);
  CHECK_THROWS_WITH_AS(add_(bl, 1), doctest::Contains("result type Long can't be cast"), Error);
  Tensor one = from_f64({1, 2, 3}, {3});
  CHECK_THROWS_WITH_AS(add_(one, from_f64({1, 1, 1, 1, 1, 1}, {2, 3})),
                       doctest::Contains("op `add_`: output with shape [3] doesn't match the "
                                         "broadcast shape [2, 3]"),
                       Error);
  Tensor ex = from_f64({1}, {1}).expand({3});
  CHECK_THROWS_WITH_AS(add_(ex, one), doctest::Contains("more than one element"), Error);
  // lower-precision self with a higher-precision operand: computed wide, rounded once
  Tensor h = from_f64({1, 2}, {2}, kFloat16);
  add_(h, from_f64({0.25, 1e-4}, {2}, kFloat64));
  CHECK(h.dtype() == kFloat16);
  check_close(h, {1.25, 2.0});
  Tensor f = from_f64({1, 2}, {2}, kFloat32);
  add_(f, from_f64({1, 1}, {2}, kInt64));
  CHECK(to_f64(f) == std::vector<double>{2, 3});
  // zero-size in-place is a no-op
  Tensor z = empty({0, 3});
  add_(z, from_f64({1, 2, 3}, {3}));
  CHECK(z.shape() == Shape{0, 3});
}

TEST_CASE("equal and allclose") {
  Tensor a = from_f64({1, 2, 3}, {3}), b = from_f64({1, 2, 3}, {3}, kFloat64);
  CHECK(equal(a, b));
  CHECK(equal(a, from_f64({1, 2, 3}, {3}, kInt64)));
  CHECK(!equal(a, from_f64({1, 2, 4}, {3})));
  CHECK(!equal(a, from_f64({1, 2, 3}, {3, 1})));
  CHECK(equal(empty({0}), empty({0})));
  CHECK(allclose(a, from_f64({1, 2, 3 + 1e-6}, {3})));
  CHECK(!allclose(a, from_f64({1, 2, 3.01}, {3})));
  CHECK(allclose(a, from_f64({1, 2, 3.01}, {3}), 1e-2));
  CHECK(allclose(a, from_f64({1.05, 2, 3}, {3}), 0, 0.1));
  CHECK(allclose(from_f64({1, 1}, {2, 1}), from_f64({1}, {1})));  // broadcasting
  CHECK(allclose(from_f64({kInf, -kInf}, {2}), from_f64({kInf, -kInf}, {2})));
  CHECK(!allclose(from_f64({kInf}, {1}), from_f64({-kInf}, {1})));
  CHECK(!allclose(from_f64({kNaN}, {1}), from_f64({kNaN}, {1})));
  CHECK_THROWS_WITH_AS(allclose(a, from_f64({1, 2}, {2})), doctest::Contains("op `allclose`"),
                       Error);
}

TEST_CASE("binary errors name the op and shapes") {
  Tensor a = empty({2, 3}), b = empty({3, 2});
  CHECK_THROWS_WITH_AS(add(a, b),
                       doctest::Contains("op `add`: shapes [2, 3] and [3, 2] are not "
                                         "broadcastable"),
                       Error);
  CHECK_THROWS_WITH_AS(mul(a, b), doctest::Contains("op `mul`"), Error);
  CHECK_THROWS_WITH_AS(div(a, b), doctest::Contains("op `div`"), Error);
  CHECK_THROWS_WITH_AS(lt(a, b), doctest::Contains("op `lt`: shapes [2, 3] and [3, 2]"), Error);
  CHECK_THROWS_WITH_AS(maximum(a, Tensor()), doctest::Contains("op `maximum`: undefined"), Error);
}
