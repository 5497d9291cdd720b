// topk tests: hand-worked cases (NaN largest, ties keep the lower index), 0-d and zero-size,
// random shapes vs a reference ordering on every dim and dtype, long rows, and errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Random shape of rank r with sizes in [1, 5].
Shape rand_shape(int64_t r, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Shape s(static_cast<size_t>(r));
  for (auto& v : s) v = int64_t(rng() % 5) + 1;
  return s;
}

const DType kAllNumeric[] = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8};

// "a comes before b": largest/smallest first, NaN largest, ties by lower index.
bool ref_before(double a, int64_t ia, double b, int64_t ib, bool largest) {
  auto gt = [](double x, double y) {
    if (std::isnan(x)) return !std::isnan(y);
    if (std::isnan(y)) return false;
    return x > y;
  };
  bool ab = largest ? gt(a, b) : gt(b, a), ba = largest ? gt(b, a) : gt(a, b);
  return ab || (!ba && ia < ib);
}

// Reference topk along d: (values, indices) in row-major order of the output shape.
std::pair<std::vector<double>, std::vector<int64_t>> topk_ref(const Tensor& x, int64_t k, int64_t d,
                                                              bool largest) {
  Shape s = x.shape(), os = s;
  os[size_t(d)] = k;
  std::vector<double> xv = to_f64(x), vals(static_cast<size_t>(shape_numel(os)));
  std::vector<int64_t> idxs(vals.size());
  for (int64_t p = 0; p < int64_t(vals.size()); ++p) {
    std::vector<int64_t> pi = unravel(p, os);
    const int64_t j = pi[size_t(d)];
    std::vector<int64_t> order(static_cast<size_t>(s[size_t(d)]));
    std::iota(order.begin(), order.end(), 0);
    auto val = [&](int64_t i) {
      pi[size_t(d)] = i;
      return xv[size_t(ravel(pi, s))];
    };
    std::vector<double> row;
    for (int64_t i : order) row.push_back(val(i));
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return ref_before(row[size_t(a)], a, row[size_t(b)], b, largest);
    });
    vals[size_t(p)] = row[size_t(order[size_t(j)])];
    idxs[size_t(p)] = order[size_t(j)];
  }
  return {vals, idxs};
}
}  // namespace

TEST_CASE("topk: hand-worked, NaN is largest, ties keep lower index first") {
  Tensor x = from_f64({1, kNaN, 3, 3, kNaN, 0}, {6});
  auto [v, i] = topk(x, 4);
  check_close(v, {kNaN, kNaN, 3, 3});
  CHECK(i.dtype() == kInt64);
  CHECK(i.tolist<int64_t>() == std::vector<int64_t>{1, 4, 2, 3});
  auto [vs, is] = topk(x, 4, 0, false);
  check_close(vs, {0, 1, 3, 3});
  CHECK(is.tolist<int64_t>() == std::vector<int64_t>{5, 0, 2, 3});
  Tensor t = from_f64({2, 5, 5, 5, 1, 5}, {6});
  CHECK(topk(t, 3).second.tolist<int64_t>() == std::vector<int64_t>{1, 2, 3});
  auto [v2, i2] = topk(t, 3, -1, false);
  check_close(v2, {1, 2, 5});
  CHECK(i2.tolist<int64_t>() == std::vector<int64_t>{4, 0, 1});
  // 2-D along dim 0
  auto [v3, i3] = topk(from_f64({1, 9, 4, 2, 7, 3}, {3, 2}), 2, 0);
  check_close(v3, {7, 9, 4, 3});
  CHECK(i3.tolist<int64_t>() == std::vector<int64_t>{2, 0, 1, 2});
}

TEST_CASE("topk: 0-d and zero-size") {
  auto [v, i] = topk(from_f64({3}, {}), 1);
  CHECK(v.dim() == 0);
  CHECK(v.item<double>() == 3.0);
  CHECK(i.item<int64_t>() == 0);
  auto [v0, i0] = topk(zeros({0, 3}), 2, 1);
  CHECK(v0.shape() == Shape{0, 2});
  CHECK(i0.shape() == Shape{0, 2});
  CHECK(topk(zeros({3, 4}), 0, 1).first.shape() == Shape{3, 0});
  CHECK(topk(zeros({3, 0}), 0, 1).second.shape() == Shape{3, 0});
}

TEST_CASE("topk: random vs reference, every dim, both directions, dtypes, non-contiguous") {
  uint64_t seed = 400;
  for (int64_t rank = 1; rank <= 3; ++rank) {
    for (DType dt : kAllNumeric) {
      Shape shape = rand_shape(rank, ++seed);
      // few distinct values: many ties
      Tensor x = random_tensor(shape, dt, ++seed, 0, 4);
      for (int64_t d = 0; d < rank; ++d) {
        const int64_t n = shape[size_t(d)];
        for (int64_t k : {int64_t(0), int64_t(1), n / 2, n}) {
          for (bool largest : {true, false}) {
            CAPTURE(dt);
            CAPTURE(shape_str(shape));
            CAPTURE(d);
            CAPTURE(k);
            CAPTURE(largest);
            auto [rv, ri] = topk_ref(x, k, d, largest);
            auto [v, i] = topk(x, k, d, largest);
            CHECK(v.dtype() == dt);
            check_close(v, rv, 0, 0);
            CHECK(i.tolist<int64_t>() == ri);
            auto [vn, in] = topk(noncontiguous(x), k, d - rank, largest);
            check_close(vn, rv, 0, 0);
            CHECK(in.tolist<int64_t>() == ri);
          }
        }
      }
    }
  }
}

TEST_CASE("topk: long rows (partial_sort / nth_element paths), NaNs, sorted=false") {
  std::vector<double> vals(200);
  std::mt19937_64 rng(7);
  for (auto& v : vals) v = double(rng() % 50) - 25;
  vals[17] = kNaN;
  vals[150] = kNaN;
  Tensor x = from_f64(vals, {2, 100});
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    Tensor xd = x.to(dt);
    for (int64_t k : {int64_t(2), int64_t(50), int64_t(100)}) {
      for (bool largest : {true, false}) {
        CAPTURE(dt);
        CAPTURE(k);
        CAPTURE(largest);
        auto [rv, ri] = topk_ref(xd, k, 1, largest);
        auto [v, i] = topk(xd, k, 1, largest, true);
        check_close(v, rv, 0, 0);
        CHECK(i.tolist<int64_t>() == ri);
        // unsorted: the same set per row
        auto [vu, iu] = topk(xd, k, 1, largest, false);
        std::vector<int64_t> got = iu.tolist<int64_t>();
        for (int64_t r = 0; r < 2; ++r) {
          std::sort(got.begin() + r * k, got.begin() + (r + 1) * k);
          std::sort(ri.begin() + r * k, ri.begin() + (r + 1) * k);
        }
        CHECK(got == ri);
        CHECK(gather(xd, 1, iu).tolist<double>().size() == size_t(2 * k));
        check_close(gather(xd, 1, iu), to_f64(vu), 0, 0);
      }
    }
  }
}

TEST_CASE("topk: errors") {
  Tensor x = from_f64({1, 2, 3, 4, 5, 6}, {6});
  CHECK_THROWS_WITH_AS(topk(x, 7),
                       doctest::Contains("op `topk`: selected index k out of range: "
                                         "k = 7 but dimension 0 has size 6"),
                       Error);
  CHECK_THROWS_WITH_AS(topk(x, -1), doctest::Contains("selected index k out of range"), Error);
  CHECK_THROWS_WITH_AS(topk(from_f64({3}, {}), 2), doctest::Contains("k out of range"), Error);
  CHECK_THROWS_WITH_AS(topk(x, 1, 1), doctest::Contains("dimension out of range"), Error);
  CHECK_THROWS_WITH_AS(topk(x.to(kBool), 1),
                       doctest::Contains("op `topk`: not implemented for "
                                         "dtype bool"),
                       Error);
}
