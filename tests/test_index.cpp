// Indexing ops: index_select, gather, scatter_add(_), one_hot (embedding: test_embedding.cpp).
// Hand-worked cases, naive f64 reference loops on random shapes for every dim, non-contiguous
// and zero-size inputs, several dtypes, determinism and index/shape/dtype errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "index_test_util.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;
using namespace index_test;

namespace {

// Random shape of rank r with sizes in [1, 5].
Shape rand_shape(int64_t r, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Shape s(static_cast<size_t>(r));
  for (auto& v : s) v = int64_t(rng() % 5) + 1;
  return s;
}

}  // namespace

// --------------------------------------------------------------------------- index_select

TEST_CASE("index_select: hand-worked") {
  Tensor x = from_f64({1, 2, 3, 4, 5, 6}, {2, 3});
  check_close(index_select(x, 1, ints({2, 0, 2}, {3})), {3, 1, 3, 6, 4, 6});
  check_close(index_select(x, 0, ints({1}, {1}).to(kInt32)), {4, 5, 6});
  check_close(index_select(x, -2, ints({1}, {})), {4, 5, 6});  // 0-d index
  CHECK(index_select(x, 1, ints({}, {0})).shape() == Shape{2, 0});
  Tensor s = index_select(from_f64({5}, {}), 0, ints({0}, {1}));
  CHECK(s.dim() == 0);
  CHECK(s.item<double>() == 5.0);
}

TEST_CASE("index_select: random shapes, every dim, dtypes, non-contiguous") {
  uint64_t seed = 100;
  for (int64_t rank = 1; rank <= 4; ++rank) {
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool}) {
      Shape shape = rand_shape(rank, ++seed);
      Tensor x = random_tensor(shape, dt, ++seed, -20, 20);
      std::vector<double> xv = to_f64(x);
      for (int64_t d = 0; d < rank; ++d) {
        CAPTURE(dt);
        CAPTURE(shape_str(shape));
        CAPTURE(d);
        const int64_t m = int64_t(seed % 6);  // 0..5 entries, with repeats
        Tensor idx = rand_index({m}, shape[size_t(d)], ++seed);
        std::vector<int64_t> iv = idx.tolist<int64_t>();
        Shape os = shape;
        os[size_t(d)] = m;
        std::vector<double> ref(static_cast<size_t>(shape_numel(os)));
        for (int64_t p = 0; p < int64_t(ref.size()); ++p) {
          std::vector<int64_t> pi = unravel(p, os);
          pi[size_t(d)] = iv[size_t(pi[size_t(d)])];
          ref[size_t(p)] = xv[size_t(ravel(pi, shape))];
        }
        Tensor out = index_select(x, d, idx);
        CHECK(out.shape() == os);
        CHECK(out.dtype() == dt);
        check_close(out, ref, 0, 0);
        check_close(index_select(noncontiguous(x), d - rank, noncontiguous(idx)), ref, 0, 0);
        // a permuted (transposed) input gives the same values
        Tensor xp = x.transpose(0, rank - 1).contiguous().transpose(0, rank - 1);
        check_close(index_select(xp, d, idx), ref, 0, 0);
      }
    }
  }
}

TEST_CASE("index_select: errors") {
  Tensor x = from_f64({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 5});
  CHECK_THROWS_WITH_AS(index_select(x, 1, ints({0, 5}, {2})),
                       doctest::Contains("op `index_select`: index 5 is out of bounds for "
                                         "dimension 1 with size 5"),
                       Error);
  CHECK_THROWS_WITH_AS(index_select(x, 0, ints({-1}, {1})),
                       doctest::Contains("index -1 is out of bounds for dimension 0 with size 2"),
                       Error);
  CHECK_THROWS_WITH_AS(index_select(x, 0, ints({0, 1}, {1, 2})),
                       doctest::Contains("index is supposed to be a vector, got shape [1, 2]"),
                       Error);
  CHECK_THROWS_WITH_AS(index_select(x, 2, ints({0}, {1})),
                       doctest::Contains("dimension out of range"), Error);
  CHECK_THROWS_WITH_AS(index_select(x, 0, from_f64({0}, {1})),
                       doctest::Contains("expected dtype int64 or int32 for index, got float32"),
                       Error);
  CHECK_THROWS_WITH_AS(index_select(from_f64({5}, {}), 0, ints({0, 0}, {2})),
                       doctest::Contains("only 1 value"), Error);
}

// --------------------------------------------------------------------------------- gather

TEST_CASE("gather: hand-worked") {
  Tensor x = from_f64({1, 2, 3, 4}, {2, 2});
  check_close(gather(x, 1, ints({0, 0, 1, 0}, {2, 2})), {1, 1, 4, 3});
  check_close(gather(x, 0, ints({1, 0}, {1, 2})), {3, 2});
  // index may be longer than the input along dim
  check_close(gather(x, 1, ints({1, 1, 1, 0, 0, 0}, {2, 3})), {2, 2, 2, 3, 3, 3});
  check_close(gather(from_f64({3, 4}, {2}), 0, ints({1}, {})), {4});
  check_close(gather(from_f64({3}, {}), 0, ints({0, 0}, {2})), {3, 3});
  CHECK(gather(x, 1, ints({}, {0, 2})).shape() == Shape{0, 2});
}

TEST_CASE("gather: random shapes, every dim, dtypes, non-contiguous") {
  uint64_t seed = 200;
  for (int64_t rank = 1; rank <= 4; ++rank) {
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool}) {
      Shape shape = rand_shape(rank, ++seed);
      Tensor x = random_tensor(shape, dt, ++seed, -20, 20);
      std::vector<double> xv = to_f64(x);
      for (int64_t d = 0; d < rank; ++d) {
        CAPTURE(dt);
        CAPTURE(shape_str(shape));
        CAPTURE(d);
        std::mt19937_64 rng(++seed);
        Shape is = shape;
        for (int64_t k = 0; k < rank; ++k)
          is[size_t(k)] =
              k == d ? int64_t(rng() % 6) + 1 : int64_t(rng() % uint64_t(shape[size_t(k)])) + 1;
        Tensor idx = rand_index(is, shape[size_t(d)], ++seed);
        std::vector<int64_t> iv = idx.tolist<int64_t>();
        std::vector<double> ref(iv.size());
        for (int64_t p = 0; p < int64_t(iv.size()); ++p) {
          std::vector<int64_t> pi = unravel(p, is);
          pi[size_t(d)] = iv[size_t(p)];
          ref[size_t(p)] = xv[size_t(ravel(pi, shape))];
        }
        Tensor out = gather(x, d, idx);
        CHECK(out.shape() == is);
        CHECK(out.dtype() == dt);
        check_close(out, ref, 0, 0);
        check_close(gather(noncontiguous(x), d - rank, noncontiguous(idx)), ref, 0, 0);
        Tensor ip = idx.transpose(0, rank - 1).contiguous().transpose(0, rank - 1);
        check_close(gather(x, d, ip), ref, 0, 0);
      }
    }
  }
}

TEST_CASE("gather: large (parallel path)") {
  Tensor x = random_tensor({300, 400}, kFloat32, 5);
  Tensor idx = rand_index({300, 400}, 300, 6);
  std::vector<double> xv = to_f64(x), ref;
  std::vector<int64_t> iv = idx.tolist<int64_t>();
  for (int64_t p = 0; p < 300 * 400; ++p) ref.push_back(xv[size_t(iv[size_t(p)] * 400 + p % 400)]);
  check_close(gather(x, 0, idx), ref, 0, 0);
}

TEST_CASE("gather: errors") {
  Tensor x = from_f64({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK_THROWS_WITH_AS(gather(x, 1, ints({0, 3}, {1, 2})),
                       doctest::Contains("op `gather`: index 3 is out of bounds for dimension 1 "
                                         "with size 3"),
                       Error);
  CHECK_THROWS_WITH_AS(gather(x, 0, ints({-1}, {1, 1})),
                       doctest::Contains("index -1 is out of bounds for dimension 0 with size 2"),
                       Error);
  CHECK_THROWS_WITH_AS(gather(x, 1, ints({0, 0}, {1, 2}).to(kInt32)),
                       doctest::Contains("op `gather`: expected dtype int64 for index, got int32"),
                       Error);
  CHECK_THROWS_WITH_AS(gather(x, 1, ints({0, 0}, {2})),
                       doctest::Contains("same number of dimensions"), Error);
  CHECK_THROWS_WITH_AS(gather(x, 1, ints({0, 0, 0}, {3, 1})),
                       doctest::Contains("size does not match at dimension 0: expected index "
                                         "[3, 1] to be smaller than input [2, 3] apart from "
                                         "dimension 1"),
                       Error);
  CHECK_THROWS_WITH_AS(gather(x, -3, ints({0}, {1, 1})),
                       doctest::Contains("dimension out of range"), Error);
}

// ---------------------------------------------------------------------------- scatter_add

TEST_CASE("scatter_add: hand-worked (PyTorch docs examples)") {
  Tensor src = from_f64({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 5});
  Tensor idx = ints({0, 1, 2, 0, 0, 2, 0, 0, 1, 2}, {2, 5});
  Tensor x = zeros({3, 5});
  Tensor out = scatter_add(x, 0, idx, src);
  check_close(out, {1, 7, 8, 4, 5, 0, 2, 0, 9, 0, 6, 0, 3, 0, 10});
  check_close(x, std::vector<double>(15, 0.0));  // out of place leaves x alone
  // index smaller than src; dim 1 with repeats
  Tensor o2 = scatter_add(zeros({2, 4}), 1, ints({3, 3, 0, 1}, {2, 2}),
                          from_f64({1, 2, 9, 3, 4, 9}, {2, 3}));
  check_close(o2, {0, 0, 0, 3, 3, 4, 0, 0});
  // 0-d self, index and src
  check_close(scatter_add(from_f64({3}, {}), 0, ints({0}, {}), from_f64({2}, {})), {5});
  // empty index: no-op
  check_close(scatter_add(ones({3}), 0, ints({}, {0}), ones({0})), {1, 1, 1});
}

TEST_CASE("scatter_add_: in place through a non-contiguous view, bumps the version") {
  Tensor base = zeros({3, 4});
  Tensor view = base.t();  // [4, 3], non-contiguous
  const uint64_t v0 = base.version();
  scatter_add_(view, 1, ints({2, 2, 0, 1}, {4, 1}), from_f64({1, 2, 3, 4}, {4, 1}));
  CHECK(base.version() > v0);
  check_close(base, {0, 0, 3, 0, 0, 0, 0, 4, 1, 2, 0, 0});
}

TEST_CASE("scatter_add: random shapes, every dim, dtypes, non-contiguous") {
  uint64_t seed = 300;
  for (int64_t rank = 1; rank <= 4; ++rank) {
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool}) {
      Shape shape = rand_shape(rank, ++seed);
      // small integer values: every partial sum is exact in f16/bf16 too
      Tensor self = random_tensor(shape, kInt32, ++seed, -8, 8).to(dt);
      std::vector<double> sv = to_f64(self);
      for (int64_t d = 0; d < rank; ++d) {
        CAPTURE(dt);
        CAPTURE(shape_str(shape));
        CAPTURE(d);
        std::mt19937_64 rng(++seed);
        Shape is = shape, ss = shape;
        for (int64_t k = 0; k < rank; ++k) {
          is[size_t(k)] =
              k == d ? int64_t(rng() % 7) + 1 : int64_t(rng() % uint64_t(shape[size_t(k)])) + 1;
          ss[size_t(k)] = is[size_t(k)] + int64_t(rng() % 2);
        }
        Tensor idx = rand_index(is, shape[size_t(d)], ++seed);
        Tensor src = random_tensor(ss, kInt32, ++seed, -8, 8).to(dt);
        std::vector<int64_t> iv = idx.tolist<int64_t>();
        std::vector<double> srcv = to_f64(src), ref = sv;
        for (int64_t p = 0; p < int64_t(iv.size()); ++p) {
          std::vector<int64_t> pi = unravel(p, is);
          double v = srcv[size_t(ravel(pi, ss))];
          pi[size_t(d)] = iv[size_t(p)];
          double& r = ref[size_t(ravel(pi, shape))];
          r = dt == kBool ? double(r != 0 || v != 0) : r + v;
        }
        Tensor out = scatter_add(self, d, idx, src);
        CHECK(out.shape() == shape);
        CHECK(out.dtype() == dt);
        check_close(out, ref, 0, 0);
        Tensor nc = noncontiguous(self);
        scatter_add_(nc, d - rank, noncontiguous(idx), noncontiguous(src));
        check_close(nc, ref, 0, 0);
        Tensor ip = idx.transpose(0, rank - 1).contiguous().transpose(0, rank - 1);
        check_close(scatter_add(self, d, ip, src), ref, 0, 0);
      }
    }
  }
}

TEST_CASE("scatter_add: large, both dims (parallel paths), deterministic") {
  for (int64_t d : {0, 1}) {
    CAPTURE(d);
    Shape shape = d == 0 ? Shape{40, 1000} : Shape{5000, 20};
    Tensor src = random_tensor(shape, kFloat32, 20 + uint64_t(d));
    Tensor idx = rand_index(shape, shape[size_t(d)] / 4, 30 + uint64_t(d));  // many repeats
    Tensor a = scatter_add(zeros(shape), d, idx, src);
    Tensor b = scatter_add(zeros(shape), d, idx, src);
    CHECK(a.tolist<float>() == b.tolist<float>());
    std::vector<double> sv = to_f64(src), ref(sv.size(), 0.0);
    std::vector<int64_t> iv = idx.tolist<int64_t>();
    for (int64_t p = 0; p < int64_t(iv.size()); ++p) {
      std::vector<int64_t> pi = unravel(p, shape);
      pi[size_t(d)] = iv[size_t(p)];
      ref[size_t(ravel(pi, shape))] += sv[size_t(p)];
    }
    check_close(a, ref, 1e-4, 1e-4);
  }
}

TEST_CASE("scatter_add: errors") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH_AS(scatter_add(x, 0, ints({0, 2}, {1, 2}), ones({1, 2})),
                       doctest::Contains("op `scatter_add`: index 2 is out of bounds for "
                                         "dimension 0 with size 2"),
                       Error);
  CHECK_THROWS_WITH_AS(scatter_add(x, 1, ints({-1}, {1, 1}), ones({1, 1})),
                       doctest::Contains("index -1 is out of bounds for dimension 1 with size 3"),
                       Error);
  CHECK_THROWS_WITH_AS(scatter_add(x, 0, ints({0}, {1, 1}), ones({1, 1}, kFloat64)),
                       doctest::Contains("expected self.dtype to be equal to src.dtype, got "
                                         "float32 and float64"),
                       Error);
  CHECK_THROWS_WITH_AS(scatter_add(x, 0, ints({0}, {1, 1}).to(kInt32), ones({1, 1})),
                       doctest::Contains("expected dtype int64 for index, got int32"), Error);
  CHECK_THROWS_WITH_AS(scatter_add(x, 0, ints({0}, {1}), ones({1, 1})),
                       doctest::Contains("same number of dimensions"), Error);
  CHECK_THROWS_WITH_AS(scatter_add(x, 0, ints({0, 0, 0, 0}, {1, 4}), ones({1, 4})),
                       doctest::Contains("expected index [1, 4] to be smaller than self [2, 3] "
                                         "apart from dimension 0"),
                       Error);
  CHECK_THROWS_WITH_AS(scatter_add(x, 0, ints({0, 0, 0}, {1, 3}), ones({1, 2})),
                       doctest::Contains("to be smaller than src [1, 2]"), Error);
  CHECK_THROWS_WITH_AS(scatter_add(x, 2, ints({0}, {1, 1}), ones({1, 1})),
                       doctest::Contains("dimension out of range"), Error);
  Tensor expanded = zeros({1, 3}).expand({2, 3});
  CHECK_THROWS_WITH_AS(scatter_add_(expanded, 0, ints({0}, {1, 1}), ones({1, 1})),
                       doctest::Contains("has stride 0 in dimension 0"), Error);
  // the error leaves self untouched (validated before any write)
  Tensor y = zeros({3});
  CHECK_THROWS_AS(scatter_add_(y, 0, ints({0, 1, 9}, {3}), ones({3})), Error);
  check_close(y, {0, 0, 0});
}

// -------------------------------------------------------------------------------- one_hot

TEST_CASE("one_hot: hand-worked, inferred classes, shapes") {
  Tensor o = one_hot(ints({0, 2, 1}, {3}));
  CHECK(o.dtype() == kInt64);
  CHECK(o.shape() == Shape{3, 3});
  check_close(o, {1, 0, 0, 0, 0, 1, 0, 1, 0});
  Tensor o5 = one_hot(ints({3, 0, 1, 3}, {2, 2}), 5);
  CHECK(o5.shape() == Shape{2, 2, 5});
  check_close(o5, {0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0});
  check_close(one_hot(ints({1}, {}), 3), {0, 1, 0});
  CHECK(one_hot(ints({}, {0}), 3).shape() == Shape{0, 3});
  CHECK(one_hot(noncontiguous(ints({2, 0}, {2}))).tolist<int64_t>() ==
        std::vector<int64_t>{0, 0, 1, 1, 0, 0});
}

TEST_CASE("one_hot: errors") {
  CHECK_THROWS_WITH_AS(one_hot(ints({0, 2, -1}, {3})),
                       doctest::Contains("op `one_hot`: class values must be non-negative, got -1"),
                       Error);
  CHECK_THROWS_WITH_AS(one_hot(ints({0, 2, 1}, {3}), 2),
                       doctest::Contains("class values must be smaller than num_classes 2, got 2"),
                       Error);
  CHECK_THROWS_WITH_AS(one_hot(ints({}, {0})),
                       doctest::Contains("can not infer total number of classes from empty tensor"),
                       Error);
  CHECK_THROWS_WITH_AS(one_hot(ints({0}, {1}).to(kInt32), 2),
                       doctest::Contains("only applicable to index tensors (int64), got int32"),
                       Error);
  CHECK_THROWS_WITH_AS(one_hot(ints({0}, {1}), -2),
                       doctest::Contains("num_classes must be -1 or non-negative, got -2"), Error);
}
