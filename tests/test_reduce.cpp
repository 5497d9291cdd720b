// Reduction tests: sum/mean/var/std/amax/amin/logsumexp over every dim subset of 3-D and 4-D
// tensors vs naive f64 reference loops (keepdim both ways, non-contiguous inputs, all float
// dtypes, integers), max/min/argmax/argmin with ties and NaN, long-row accuracy, zero-size
// dims, sum_to_shape, and error messages.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Groups the elements of a row-major tensor of shape `s` by their output position when
// reducing `dims` (sorted, normalised; empty = all). Each group is in increasing order of
// its position along the reduced dims.
std::vector<std::vector<double>> groups(const std::vector<double>& v, const Shape& s,
                                        const DimList& dims_in) {
  DimList dims = dims_in;
  if (dims.empty())
    for (int64_t d = 0; d < int64_t(s.size()); ++d) dims.push_back(d);
  Shape ks = s;
  for (int64_t d : dims) ks[size_t(d)] = 1;
  std::vector<std::vector<double>> g(size_t(shape_numel(ks)));
  std::vector<int64_t> idx(s.size(), 0);
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < s.size(); ++d) o = o * ks[d] + (ks[d] == 1 ? 0 : idx[d]);
    g[size_t(o)].push_back(v[i]);
    for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < s[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  return g;
}

using RefFn = std::function<double(const std::vector<double>&)>;

std::vector<double> ref_reduce(const Tensor& x, const DimList& dims, const RefFn& f) {
  std::vector<double> out;
  for (auto& g : groups(to_f64(x), x.shape(), dims)) out.push_back(f(g));
  return out;
}

double ref_sum(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}
double ref_mean(const std::vector<double>& g) {
  return ref_sum(g) / double(g.size());
}
double ref_var(const std::vector<double>& g, double correction) {
  double m = ref_mean(g), s = 0;
  for (double v : g) s += (v - m) * (v - m);
  return s / std::max(0.0, double(g.size()) - correction);
}
double ref_max(const std::vector<double>& g) {
  double m = -kInf;
  for (double v : g) m = (std::isnan(v) || v > m) && !std::isnan(m) ? v : m;
  return m;
}
double ref_min(const std::vector<double>& g) {
  double m = kInf;
  for (double v : g) m = (std::isnan(v) || v < m) && !std::isnan(m) ? v : m;
  return m;
}
double ref_lse(const std::vector<double>& g) {
  double m = ref_max(g);
  if (std::isinf(m)) return m;
  double s = 0;
  for (double v : g) s += std::exp(v - m);
  return m + std::log(s);
}
int64_t ref_argmax(const std::vector<double>& g, bool is_max) {
  int64_t best = 0;
  for (size_t i = 1; i < g.size(); ++i) {
    double v = g[i], c = g[size_t(best)];
    if (std::isnan(c)) break;
    if (std::isnan(v) || (is_max ? v > c : v < c)) best = int64_t(i);
  }
  return best;
}

// Expected output shape of a reduction.
Shape out_shape(const Shape& s, const DimList& dims, bool keepdim) {
  Shape r;
  for (size_t d = 0; d < s.size(); ++d) {
    bool red = dims.empty() || std::find(dims.begin(), dims.end(), int64_t(d)) != dims.end();
    if (!red)
      r.push_back(s[d]);
    else if (keepdim)
      r.push_back(1);
  }
  return r;
}

// Every subset of {0..nd-1} (the empty subset meaning all dims).
std::vector<DimList> all_subsets(int64_t nd) {
  std::vector<DimList> r;
  for (int mask = 0; mask < (1 << nd); ++mask) {
    DimList d;
    for (int64_t i = 0; i < nd; ++i)
      if (mask & (1 << i)) d.push_back(i);
    r.push_back(d);
  }
  return r;
}

// Input variants: contiguous, strided (noncontiguous), and a transposed view.
std::vector<Tensor> layouts(const Tensor& x) {
  Tensor tr = x.transpose(0, x.dim() - 1).contiguous().transpose(0, x.dim() - 1);
  return {x, noncontiguous(x), tr};
}

// Checks f(x, dims, keepdim) against ref over every dim subset, both keepdims, all layouts.
void check_all_dims(const Shape& shape, DType dt, const RefFn& ref,
                    const std::function<Tensor(const Tensor&, const DimList&, bool)>& f,
                    DType out_dt, double rtol = -1, double atol = -1) {
  Tensor x0 = random_tensor(shape, dt, 7 + shape.size(), -3, 3);
  for (const Tensor& x : layouts(x0)) {
    for (const DimList& dims : all_subsets(int64_t(shape.size()))) {
      for (bool keepdim : {false, true}) {
        CAPTURE(shape_str(dims));
        CAPTURE(keepdim);
        Tensor y = f(x, dims, keepdim);
        CHECK(y.dtype() == out_dt);
        REQUIRE(y.shape() == out_shape(shape, dims, keepdim));
        if (rtol < 0)
          check_close(y, ref_reduce(x, dims, ref));
        else
          check_close(y, ref_reduce(x, dims, ref), rtol, atol);
      }
    }
  }
}

const std::vector<DType> kFloatTypes = {kFloat32, kFloat64, kFloat16, kBFloat16};
const std::vector<Shape> kShapes = {{3, 4, 5}, {2, 3, 1, 17}, {4, 33, 2}};

}  // namespace

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
