// Reduction tests: sum/mean/var/std/amax/amin/logsumexp over every dim subset of 3-D and 4-D
// tensors vs naive f64 reference loops (keepdim both ways, non-contiguous inputs, all float
// dtypes, integers), integer sums and long-row accuracy (the rest: test_reduce_dim.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "reduce_reference.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;
using namespace reduce_reference;

TEST_CASE("reductions: hand-worked values") {
  Tensor x = from_f64({1, 2, 3, 4, 5, 6}, {2, 3});
  check_close(sum(x), {21});
  CHECK(sum(x).dim() == 0);
  check_close(sum(x, {0}), {5, 7, 9});
  check_close(sum(x, {1}, true), {6, 15});
  CHECK(sum(x, {1}, true).shape() == Shape{2, 1});
  check_close(sum(x, {-1, 0}), {21});
  check_close(mean(x, {1}), {2, 5});
  check_close(mean(x), {3.5});
  check_close(var(x, {1}), {1, 1});
  check_close(var(x, {1}, 0), {2.0 / 3, 2.0 / 3});
  check_close(var(x), {3.5});
  check_close(minidl::std(x, {0}), {std::sqrt(4.5), std::sqrt(4.5), std::sqrt(4.5)});
  check_close(amax(x, {0}), {4, 5, 6});
  check_close(amin(x, {1}), {1, 4});
  check_close(max(x), {6});
  check_close(min(x), {1});
  auto [v, i] = max(x, 1);
  check_close(v, {3, 6});
  CHECK(i.dtype() == kInt64);
  CHECK(i.tolist<int64_t>() == std::vector<int64_t>{2, 2});
  auto [v2, i2] = min(x, 0, true);
  CHECK(v2.shape() == Shape{1, 3});
  CHECK(i2.tolist<int64_t>() == std::vector<int64_t>{0, 0, 0});
  CHECK(argmax(x).item<int64_t>() == 5);
  CHECK(argmin(x).item<int64_t>() == 0);
  CHECK(argmax(x, std::nullopt, true).shape() == Shape{1, 1});
  CHECK(argmax(x, 0).tolist<int64_t>() == std::vector<int64_t>{1, 1, 1});
  check_close(logsumexp(x, {1}), {ref_lse({1, 2, 3}), ref_lse({4, 5, 6})});
}

TEST_CASE("sum/mean/var/std/logsumexp over every dim subset vs f64 reference") {
  for (const Shape& s : kShapes) {
    for (DType dt : kFloatTypes) {
      CAPTURE(dtype_name(dt));
      CAPTURE(shape_str(s));
      check_all_dims(
          s, dt, ref_sum, [](auto& x, auto& d, bool k) { return sum(x, d, k); }, dt);
      check_all_dims(
          s, dt, ref_mean, [](auto& x, auto& d, bool k) { return mean(x, d, k); }, dt);
      check_all_dims(
          s, dt, [](auto& g) { return ref_var(g, 1); },
          [](auto& x, auto& d, bool k) { return var(x, d, 1, k); }, dt);
      check_all_dims(
          s, dt, [](auto& g) { return ref_var(g, 0); },
          [](auto& x, auto& d, bool k) { return var(x, d, 0, k); }, dt);
      check_all_dims(
          s, dt, [](auto& g) { return std::sqrt(ref_var(g, 1)); },
          [](auto& x, auto& d, bool k) { return minidl::std(x, d, 1, k); }, dt);
      check_all_dims(
          s, dt, ref_lse, [](auto& x, auto& d, bool k) { return logsumexp(x, d, k); }, dt);
    }
  }
}

TEST_CASE("amax/amin over every dim subset, float and integer dtypes") {
  for (const Shape& s : kShapes) {
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(shape_str(s));
      check_all_dims(
          s, dt, ref_max, [](auto& x, auto& d, bool k) { return amax(x, d, k); }, dt);
      check_all_dims(
          s, dt, ref_min, [](auto& x, auto& d, bool k) { return amin(x, d, k); }, dt);
    }
  }
}

TEST_CASE("sum of integers and bool gives int64 and honours the dtype argument") {
  for (const Shape& s : kShapes) {
    for (DType dt : {kInt32, kInt64, kUInt8, kBool}) {
      CAPTURE(dtype_name(dt));
      check_all_dims(
          s, dt, ref_sum, [](auto& x, auto& d, bool k) { return sum(x, d, k); }, kInt64, 0, 0);
    }
  }
  Tensor b = from_f64({1, 0, 1, 1}, {4}, kBool);
  CHECK(sum(b).dtype() == kInt64);
  CHECK(sum(b).item<int64_t>() == 3);
  Tensor i = from_f64({1, 2, 3}, {3}, kInt32);
  CHECK(sum(i, {}, false, kInt32).dtype() == kInt32);
  CHECK(sum(i, {}, false, kFloat64).dtype() == kFloat64);
  check_close(sum(i, {}, false, kFloat32), {6});
  // int64 sums stay exact beyond 2^53
  Tensor big = from_f64({0, 0}, {2}, kInt64);
  big.select(0, 0).fill_(int64_t(1) << 60);
  big.select(0, 1).fill_(int64_t(1));
  CHECK(sum(big).item<int64_t>() == (int64_t(1) << 60) + 1);
  CHECK(amax(big).item<int64_t>() == int64_t(1) << 60);
  // f16 input with dtype=f32 sums in the requested dtype
  Tensor h = from_f64(std::vector<double>(4096, 1.0), {4096}, kFloat16);
  CHECK(sum(h, {}, false, kFloat32).item<float>() == 4096.0f);
}

TEST_CASE("long rows: chunked parallel reductions match the reference") {
  // 1e6 x 0.1f: f32 accumulation would drift by ~1e-3 relative
  Tensor x = from_f64(std::vector<double>(1000000, 0.1), {1000000}, kFloat32);
  const double exact = 1000000 * double(0.1f);
  check_close(sum(x), {exact}, 1e-6, 0);
  check_close(mean(x), {double(0.1f)}, 1e-6, 0);
  check_close(var(x), {0.0}, 0, 1e-9);
  check_close(logsumexp(x, {0}), {0.1f + std::log(1e6)}, 1e-6, 0);
  // random long rows (2 rows of 100003: several chunks each, ragged last chunk)
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor r = random_tensor({2, 100003}, dt, 3, -5, 5);
    for (const Tensor& t : {r, noncontiguous(r)}) {
      check_close(sum(t, {1}), ref_reduce(t, {1}, ref_sum));
      check_close(mean(t, {1}), ref_reduce(t, {1}, ref_mean));
      check_close(var(t, {1}), ref_reduce(t, {1}, [](auto& g) { return ref_var(g, 1); }));
      check_close(amax(t, {1}), ref_reduce(t, {1}, ref_max));
      check_close(amin(t, {1}), ref_reduce(t, {1}, ref_min));
      check_close(logsumexp(t, {1}), ref_reduce(t, {1}, ref_lse));
      check_close(sum(t, {0}), ref_reduce(t, {0}, ref_sum));  // column path
      check_close(amax(t, {0}), ref_reduce(t, {0}, ref_max));
    }
  }
  // var of large-mean data stays accurate (two-pass per chunk + Chan merge)
  std::vector<double> v(70000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1e4 + double(i % 7);
  Tensor m = from_f64(v, {70000}, kFloat64);
  check_close(var(m), {ref_var(v, 1)}, 1e-10, 0);
  // argmax in a later chunk; ties across chunks pick the first
  std::vector<double> a(100000, 0.0);
  a[40000] = 5;
  a[90000] = 5;
  Tensor at = from_f64(a, {100000});
  CHECK(argmax(at).item<int64_t>() == 40000);
  CHECK(argmin(at).item<int64_t>() == 0);
  a[99999] = kNaN;
  CHECK(argmax(from_f64(a, {100000})).item<int64_t>() == 99999);
}
