// Reduction tests, continued (tests/test_reduce.cpp): max/min/argmax/argmin along a dim with
// ties and NaN, NaN and infinity propagation, var's correction, zero-size dims, 0-d tensors,
// sum_to_shape, and error messages.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "reduce_reference.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;
using namespace reduce_reference;

TEST_CASE("max/min along a dim: values, first-occurrence indices, every dim and dtype") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8}) {
    // few distinct values so ties are frequent
    Tensor x0 = random_tensor({3, 5, 4}, dt, 11, 0, 3);
    for (const Tensor& x : layouts(x0)) {
      for (int64_t dim = -3; dim < 3; ++dim) {
        for (bool keepdim : {false, true}) {
          CAPTURE(dtype_name(dt));
          CAPTURE(dim);
          const DimList dims{dim < 0 ? dim + 3 : dim};
          for (bool is_max : {true, false}) {
            auto [v, i] = is_max ? max(x, dim, keepdim) : min(x, dim, keepdim);
            CHECK(v.dtype() == dt);
            CHECK(i.dtype() == kInt64);
            CHECK(v.shape() == out_shape(x.shape(), dims, keepdim));
            check_close(v, ref_reduce(x, dims, is_max ? RefFn(ref_max) : RefFn(ref_min)));
            std::vector<double> ei;
            for (auto& g : groups(to_f64(x), x.shape(), dims))
              ei.push_back(double(ref_argmax(g, is_max)));
            check_close(i, ei, 0, 0);
            Tensor ai = is_max ? argmax(x, dim, keepdim) : argmin(x, dim, keepdim);
            check_close(ai, ei, 0, 0);
          }
        }
      }
    }
  }
  // explicit ties
  Tensor t = from_f64({3, 1, 3, 1}, {4});
  CHECK(argmax(t).item<int64_t>() == 0);
  CHECK(argmin(t).item<int64_t>() == 1);
  CHECK(max(t, 0).second.item<int64_t>() == 0);
  // bool max
  Tensor b = from_f64({0, 1, 1}, {3}, kBool);
  CHECK(max(b, 0).second.item<int64_t>() == 1);
  CHECK(max(b).item<bool>() == true);
  CHECK(min(b).item<bool>() == false);
}

TEST_CASE("NaN propagates through max/min/amax/sum/logsumexp") {
  Tensor x = from_f64({1, kNaN, 3, kNaN, 5, 6}, {2, 3});
  auto [v, i] = max(x, 1);
  check_close(v, {kNaN, kNaN});
  CHECK(i.tolist<int64_t>() == std::vector<int64_t>{1, 0});
  auto [v2, i2] = min(x, 1);
  check_close(v2, {kNaN, kNaN});
  CHECK(i2.tolist<int64_t>() == std::vector<int64_t>{1, 0});
  check_close(amax(x, {0}), {kNaN, kNaN, 6});
  check_close(amin(x, {0}), {kNaN, kNaN, 3});
  CHECK(std::isnan(max(x).item<double>()));
  CHECK(argmax(x).item<int64_t>() == 1);
  CHECK(argmin(x).item<int64_t>() == 1);
  check_close(sum(x, {1}), {kNaN, kNaN});
  check_close(logsumexp(x, {1}), {kNaN, kNaN});
  // NaN in the column path
  Tensor c = from_f64(std::vector<double>(64, 1.0), {2, 32});
  c.select(0, 1).select(0, 5).fill_(kNaN);
  Tensor cm = amax(c, {0});
  CHECK(std::isnan(cm.at({5})));
  CHECK(cm.at({4}) == 1.0);
}

TEST_CASE("logsumexp is stable and handles infinities") {
  check_close(logsumexp(from_f64({1000, 1000}, {2}), {0}), {1000 + std::log(2.0)});
  check_close(logsumexp(from_f64({-1000, -1000}, {2}), {0}), {-1000 + std::log(2.0)});
  check_close(logsumexp(from_f64({-kInf, -kInf, 0, -kInf}, {2, 2}), {1}), {-kInf, 0});
  check_close(logsumexp(from_f64({kInf, 1}, {2}), {0}), {kInf});
  check_close(logsumexp(from_f64({-kInf, 2}, {2}, kFloat16), {0}), {2});
  Tensor i = from_f64({1, 2}, {2}, kInt64);
  Tensor l = logsumexp(i, {0});
  CHECK(l.dtype() == kFloat32);
  check_close(l, {ref_lse({1, 2})});
  check_close(logsumexp(from_f64({}, {2, 0}), {1}), {-kInf, -kInf});
}

TEST_CASE("var correction and tiny inputs") {
  Tensor x = from_f64({1, 2, 3, 4}, {4}, kFloat64);
  check_close(var(x, {}, 0), {1.25});
  check_close(var(x, {}, 2), {2.5});
  check_close(var(x, {}, 4), {kInf});  // divisor max(0, N - correction) = 0
  check_close(var(x, {}, 5), {kInf});
  check_close(var(from_f64({2}, {1}), {}), {kNaN});  // 0 / 0
  check_close(minidl::std(x, {}, 0), {std::sqrt(1.25)});
}

TEST_CASE("zero-size reductions") {
  Tensor z = empty({2, 0, 3});
  check_close(sum(z, {1}), {0, 0, 0, 0, 0, 0});
  CHECK(sum(z, {1}).shape() == Shape{2, 3});
  check_close(sum(z), {0.0});
  check_close(mean(z, {1}), std::vector<double>(6, kNaN));
  check_close(var(z, {1}), std::vector<double>(6, kNaN));
  CHECK(sum(z, {0}).shape() == Shape{0, 3});
  CHECK(amax(z, {0}).shape() == Shape{0, 3});
  CHECK(amax(z, {0, 2}, true).shape() == Shape{1, 0, 1});
  CHECK(max(z, 2).first.shape() == Shape{2, 0});
  CHECK(sum(empty({0}, kInt32)).item<int64_t>() == 0);
  CHECK_THROWS_WITH_AS(amax(z, {1}), doctest::Contains("cannot compute amax over an empty dim"),
                       Error);
  CHECK_THROWS_WITH_AS(amin(z, {-2}), doctest::Contains("reduction dim 1"), Error);
  CHECK_THROWS_WITH_AS(max(z, 1), doctest::Contains("op `max`: cannot compute max"), Error);
  CHECK_THROWS_WITH_AS(min(z, 1), doctest::Contains("[2, 0, 3]"), Error);
  CHECK_THROWS_WITH_AS(max(z), doctest::Contains("op `max`"), Error);
  CHECK_THROWS_WITH_AS(amax(z), doctest::Contains("empty tensor of shape [2, 0, 3]"), Error);
  CHECK_THROWS_WITH_AS(argmax(z), doctest::Contains("op `argmax`"), Error);
  CHECK_THROWS_WITH_AS(argmin(z, 1), doctest::Contains("op `argmin`"), Error);
}

TEST_CASE("0-d tensors") {
  Tensor s = from_f64({2.5}, {});
  CHECK(sum(s).dim() == 0);
  check_close(sum(s, {0}), {2.5});
  check_close(sum(s, {-1}, true), {2.5});
  check_close(mean(s), {2.5});
  check_close(amax(s, {0}), {2.5});
  check_close(max(s), {2.5});
  auto [v, i] = max(s, 0);
  CHECK(v.dim() == 0);
  CHECK(i.item<int64_t>() == 0);
  CHECK(argmax(s).item<int64_t>() == 0);
  check_close(logsumexp(s, {0}), {2.5});
  CHECK_THROWS_WITH_AS(sum(s, {1}), doctest::Contains("op `sum`: dimension out of range"), Error);
}

TEST_CASE("sum_to_shape un-broadcasts") {
  Tensor x = random_tensor({2, 3, 4}, kFloat64, 5);
  auto v = to_f64(x);
  Tensor a = sum_to_shape(x, {3, 1});
  CHECK(a.shape() == Shape{3, 1});
  std::vector<double> ea(3, 0.0);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < 4; ++c) ea[size_t(r)] += v[size_t((b * 3 + r) * 4 + c)];
  check_close(a, ea);
  check_close(sum_to_shape(x, {4}), ref_reduce(x, {0, 1}, ref_sum));
  check_close(sum_to_shape(x, {1, 3, 4}), ref_reduce(x, {0}, ref_sum));
  check_close(sum_to_shape(x, {}), ref_reduce(x, {}, ref_sum));
  CHECK(sum_to_shape(x, {}).dim() == 0);
  CHECK(sum_to_shape(x, {2, 3, 4}).is_same(x));
  Tensor xi = from_f64({1, 2, 3, 4}, {2, 2}, kInt32);
  Tensor si = sum_to_shape(xi, {1, 2});
  CHECK(si.dtype() == kInt32);
  CHECK(si.tolist<int32_t>() == std::vector<int32_t>{4, 6});
  CHECK_THROWS_WITH_AS(sum_to_shape(x, {2, 4}),
                       doctest::Contains("not broadcast-compatible with tensor shape [2, 3, 4]"),
                       Error);
  CHECK_THROWS_WITH_AS(sum_to_shape(x, {1, 2, 3, 4}), doctest::Contains("higher rank"), Error);
}

TEST_CASE("reduction errors name the op, dims and shapes") {
  Tensor x = random_tensor({2, 3, 4});
  CHECK_THROWS_WITH_AS(
      sum(x, {3}),
      doctest::Contains("op `sum`: dimension out of range (expected to be in "
                        "range of [-3, 2], but got 3) for input of shape [2, 3, 4]"),
      Error);
  CHECK_THROWS_WITH_AS(mean(x, {-4}), doctest::Contains("op `mean`: dimension out of range"),
                       Error);
  CHECK_THROWS_WITH_AS(sum(x, {0, -3}),
                       doctest::Contains("op `sum`: dim 0 appears multiple times in the list of "
                                         "dims [0, -3]"),
                       Error);
  CHECK_THROWS_WITH_AS(amax(x, {1, 1}), doctest::Contains("appears multiple times"), Error);
  CHECK_THROWS_WITH_AS(max(x, 3), doctest::Contains("op `max`: dimension out of range"), Error);
  CHECK_THROWS_WITH_AS(argmin(x, -4), doctest::Contains("op `argmin`"), Error);
  CHECK_THROWS_WITH_AS(logsumexp(x, {5}), doctest::Contains("op `logsumexp`"), Error);
  Tensor i = from_f64({1, 2}, {2}, kInt64);
  CHECK_THROWS_WITH_AS(mean(i), doctest::Contains("op `mean`: could not infer output dtype"),
                       Error);
  CHECK_THROWS_WITH_AS(mean(i), doctest::Contains("Got: int64"), Error);
  CHECK_THROWS_WITH_AS(var(i), doctest::Contains("op `var`: std and var only support floating"),
                       Error);
  CHECK_THROWS_WITH_AS(minidl::std(i), doctest::Contains("op `std`"), Error);
}
