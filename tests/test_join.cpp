// Joining and splitting: cat, stack (copies, PyTorch dtype promotion, legacy empty inputs)
// and split (size / sizes), chunk (views). Reference loops on random shapes for every dim,
// non-contiguous and zero-size inputs, several dtypes, and the error messages.
#include <doctest/doctest.h>

#include <random>

#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

// Reference cat along d: walks the output, finds the input that holds each position.
std::vector<double> cat_ref(const std::vector<Tensor>& ts, int64_t d, const Shape& out_shape) {
  std::vector<std::vector<double>> vals;
  for (const Tensor& t : ts) vals.push_back(to_f64(t));
  std::vector<double> out;
  for (int64_t p = 0; p < shape_numel(out_shape); ++p) {
    std::vector<int64_t> pi = unravel(p, out_shape);
    int64_t k = pi[size_t(d)];
    size_t which = 0;
    while (k >= ts[which].size(d)) k -= ts[which++].size(d);
    pi[size_t(d)] = k;
    out.push_back(vals[which][size_t(ravel(pi, ts[which].shape()))]);
  }
  return out;
}

Tensor iota(const Shape& s, DType dt = kFloat32, double start = 0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + double(i);
  return from_f64(v, s, dt);
}

}  // namespace

// ------------------------------------------------------------------------------------ cat

TEST_CASE("cat: hand-worked, negative dims, result is a copy") {
  Tensor a = iota({2, 2}), b = iota({1, 2}, kFloat32, 10), c = iota({2, 1}, kFloat32, 20);
  Tensor r0 = cat({a, b}, 0);
  CHECK(r0.shape() == Shape{3, 2});
  check_close(r0, {0, 1, 2, 3, 10, 11});
  Tensor r1 = cat({a, c, a}, -1);
  CHECK(r1.shape() == Shape{2, 5});
  check_close(r1, {0, 1, 20, 0, 1, 2, 3, 21, 2, 3});
  Tensor single = cat({a});
  CHECK(!single.shares_storage(a));
  check_close(single, {0, 1, 2, 3});
  a.fill_(7);
  check_close(r0, {0, 1, 2, 3, 10, 11});  // unaffected by later writes to the inputs
}

TEST_CASE("cat: random shapes, every dim, dtypes, zero-size pieces, non-contiguous") {
  uint64_t seed = 1;
  for (int64_t rank = 1; rank <= 4; ++rank) {
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool}) {
      std::mt19937_64 rng(++seed);
      Shape base(static_cast<size_t>(rank));
      for (auto& s : base) s = int64_t(rng() % 4) + 1;
      for (int64_t d = 0; d < rank; ++d) {
        CAPTURE(dt);
        CAPTURE(shape_str(base));
        CAPTURE(d);
        const size_t n = size_t(rng() % 4) + 1;
        std::vector<Tensor> ts, nc;
        Shape os = base;
        os[size_t(d)] = 0;
        for (size_t i = 0; i < n; ++i) {
          Shape s = base;
          s[size_t(d)] = int64_t(rng() % 4);  // 0..3, zero-size pieces included
          os[size_t(d)] += s[size_t(d)];
          ts.push_back(random_tensor(s, dt, ++seed, -10, 10));
          // alternate layouts: strided copy and a transposed-contiguous buffer
          nc.push_back(i % 2
                           ? noncontiguous(ts.back())
                           : ts.back().transpose(0, rank - 1).contiguous().transpose(0, rank - 1));
        }
        std::vector<double> ref = cat_ref(ts, d, os);
        Tensor out = cat(ts, d);
        CHECK(out.shape() == os);
        CHECK(out.dtype() == dt);
        CHECK(out.is_contiguous());
        check_close(out, ref, 0, 0);
        check_close(cat(nc, d - rank), ref, 0, 0);
      }
    }
  }
}

TEST_CASE("cat: mixed dtypes promote like PyTorch") {
  Tensor i32 = from_f64({1, 2, 3, 4}, {2, 2}, kInt32);
  Tensor f32 = from_f64({0.5, 1.5}, {1, 2}, kFloat32);
  Tensor r = cat({i32, f32});
  CHECK(r.dtype() == kFloat32);
  check_close(r, {1, 2, 3, 4, 0.5, 1.5});
  Tensor rb = cat({i32, from_f64({1, 0}, {1, 2}, kBool)});
  CHECK(rb.dtype() == kInt32);
  check_close(rb, {1, 2, 3, 4, 1, 0});
  CHECK(cat({ones({2}, kFloat16), ones({2}, kBFloat16)}).dtype() == kFloat32);
  CHECK(cat({ones({2}, kUInt8), ones({2}, kInt64)}).dtype() == kInt64);
  CHECK(cat({ones({1, 1}, kFloat64), ones({1, 1}, kFloat32)}).dtype() == kFloat64);
  // bool first, then float: values cast, not reinterpreted
  Tensor bf = cat({from_f64({1, 0}, {2}, kBool), from_f64({2.5}, {1}, kFloat64)});
  CHECK(bf.dtype() == kFloat64);
  check_close(bf, {1, 0, 2.5});
  // a legacy empty [0] input still takes part in promotion
  CHECK(cat({zeros({2, 3}, kInt32), zeros({0}, kFloat64)}).dtype() == kFloat64);
}

TEST_CASE("cat: legacy 1-D empty inputs are skipped") {
  Tensor x = iota({2, 3});
  Tensor r = cat({x, zeros({0})});
  CHECK(r.shape() == Shape{2, 3});
  check_close(r, to_f64(x));
  CHECK(cat({zeros({0}), x}, 1).shape() == Shape{2, 3});
  CHECK(cat({zeros({0}), zeros({0})}).shape() == Shape{0});
  CHECK(cat({zeros({0, 3}), zeros({0, 3})}).shape() == Shape{0, 3});
  CHECK(cat({zeros({2, 0}), zeros({2, 0})}, 1).shape() == Shape{2, 0});
  check_close(cat({zeros({0, 3}), x}), to_f64(x));
}

TEST_CASE("cat: errors") {
  CHECK_THROWS_WITH_AS(cat({}), doctest::Contains("op `cat`: expected a non-empty list"), Error);
  CHECK_THROWS_WITH_AS(cat({zeros({2, 3}), zeros({2, 4})}),
                       doctest::Contains("sizes of tensors must match except in dimension 0. "
                                         "Expected size 3 but got size 4 for tensor number 1"),
                       Error);
  CHECK_THROWS_WITH_AS(cat({zeros({2, 3}), zeros({3})}),
                       doctest::Contains("tensors must have the same number of dimensions"), Error);
  CHECK_THROWS_WITH_AS(cat({zeros({2, 3}), zeros({0, 4})}),
                       doctest::Contains("Expected size 3 but got size 4"), Error);
  CHECK_THROWS_WITH_AS(cat({scalar_tensor(1, kFloat32), scalar_tensor(2, kFloat32)}),
                       doctest::Contains("zero-dimensional tensor cannot be concatenated"), Error);
  CHECK_THROWS_WITH_AS(cat({zeros({2, 3})}, 2), doctest::Contains("dimension out of range"), Error);
  CHECK_THROWS_WITH_AS(cat({zeros({2, 3}), Tensor()}), doctest::Contains("undefined tensor"),
                       Error);
}

// ---------------------------------------------------------------------------------- stack

TEST_CASE("stack: every dim (incl. negative), values, 0-d inputs, mixed dtypes") {
  Tensor a = iota({2, 3}), b = iota({2, 3}, kFloat32, 10);
  std::vector<double> av = to_f64(a), bv = to_f64(b);
  for (int64_t d = -3; d <= 2; ++d) {
    CAPTURE(d);
    Tensor s = stack({a, noncontiguous(b)}, d);
    const int64_t nd = d < 0 ? d + 3 : d;
    Shape es{2, 3};
    es.insert(es.begin() + nd, 2);
    CHECK(s.shape() == es);
    for (int64_t p = 0; p < s.numel(); ++p) {
      std::vector<int64_t> pi = unravel(p, es);
      const int64_t which = pi[size_t(nd)];
      pi.erase(pi.begin() + nd);
      CHECK(s.at(unravel(p, es)) == (which ? bv : av)[size_t(ravel(pi, {2, 3}))]);
    }
  }
  Tensor s0 = stack({scalar_tensor(1, kFloat32), scalar_tensor(2, kInt64)});
  CHECK(s0.shape() == Shape{2});
  CHECK(s0.dtype() == kFloat32);
  check_close(s0, {1, 2});
  CHECK(stack({zeros({0, 2}), zeros({0, 2}), zeros({0, 2})}, 1).shape() == Shape{0, 3, 2});
  Tensor mixed = stack({from_f64({1, 2}, {2}, kInt32), from_f64({0.25, 3}, {2}, kFloat64)});
  CHECK(mixed.dtype() == kFloat64);
  check_close(mixed, {1, 2, 0.25, 3});
}

TEST_CASE("stack: errors") {
  CHECK_THROWS_WITH_AS(stack({}), doctest::Contains("op `stack`: expected a non-empty list"),
                       Error);
  CHECK_THROWS_WITH_AS(stack({zeros({2, 3}), zeros({3, 2})}),
                       doctest::Contains("stack expects each tensor to be equal size, but got "
                                         "[2, 3] at entry 0 and [3, 2] at entry 1"),
                       Error);
  CHECK_THROWS_WITH_AS(stack({zeros({2, 3})}, 3), doctest::Contains("dimension out of range"),
                       Error);
  CHECK_THROWS_WITH_AS(stack({zeros({2, 3})}, -4), doctest::Contains("dimension out of range"),
                       Error);
}

// ---------------------------------------------------------------------------------- split

TEST_CASE("split by size: pieces are views with the right shapes and values") {
  Tensor x = iota({5, 2});
  auto parts = split(x, 2);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].shape() == Shape{2, 2});
  CHECK(parts[2].shape() == Shape{1, 2});
  check_close(parts[1], {4, 5, 6, 7});
  check_close(parts[2], {8, 9});
  for (auto& p : parts) CHECK(p.shares_storage(x));
  parts[1].fill_(-1);  // writes go through to x
  CHECK(x.at({2, 0}) == -1.0);
  CHECK(x.at({4, 0}) == 8.0);
  // along the last dim, negative dim, of a non-contiguous input
  Tensor y = iota({3, 5}).t();  // [5, 3]
  auto cols = split(y, 2, -1);
  REQUIRE(cols.size() == 2);
  check_close(cols[0], {0, 5, 1, 6, 2, 7, 3, 8, 4, 9});
  check_close(cols[1], {10, 11, 12, 13, 14});
  // split_size larger than the dim: one piece; the Tensor method forwards
  auto whole = x.split(7);
  REQUIRE(whole.size() == 1);
  CHECK(whole[0].shape() == Shape{5, 2});
  // zero-size dim with split_size 0 or > 0: one empty piece
  CHECK(split(zeros({0, 2}), 0).size() == 1);
  auto e = split(zeros({0, 2}), 2);
  REQUIRE(e.size() == 1);
  CHECK(e[0].shape() == Shape{0, 2});
}

TEST_CASE("split by sizes: zero-size pieces, round trip with cat") {
  Tensor x = iota({5, 2});
  auto parts = split(x, std::vector<int64_t>{1, 0, 4});
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].shape() == Shape{1, 2});
  CHECK(parts[1].shape() == Shape{0, 2});
  CHECK(parts[2].shape() == Shape{4, 2});
  check_close(parts[2], {2, 3, 4, 5, 6, 7, 8, 9});
  check_close(cat(parts), to_f64(x));
  uint64_t seed = 50;
  for (int64_t rank = 1; rank <= 3; ++rank) {
    Tensor r = noncontiguous(random_tensor({4, 3, 5}, kFloat64, ++seed).narrow(0, 0, 4 - rank));
    for (int64_t d = 0; d < r.dim(); ++d) {
      CAPTURE(d);
      std::vector<double> rv = to_f64(r);
      check_close(cat(split(r, 2, d), d), rv, 0, 0);
      check_close(cat(r.chunk(3, d), d), rv, 0, 0);
      const int64_t n = r.size(d);
      check_close(cat(split(r, std::vector<int64_t>{n - 1, 0, 1}, d), d), rv, 0, 0);
    }
  }
}

TEST_CASE("split: errors") {
  Tensor x = zeros({5, 2});
  CHECK_THROWS_WITH_AS(split(x, 0),
                       doctest::Contains("split_size can only be 0 if dimension 0 has size 0, "
                                         "but got size 5"),
                       Error);
  CHECK_THROWS_WITH_AS(split(x, -1), doctest::Contains("split_size must be non-negative"), Error);
  CHECK_THROWS_WITH_AS(split(x, std::vector<int64_t>{1, 3}),
                       doctest::Contains("split sizes [1, 3] sum to 4 but dimension 0 has size 5"),
                       Error);
  CHECK_THROWS_WITH_AS(split(x, std::vector<int64_t>{6, -1}),
                       doctest::Contains("split sizes must be non-negative"), Error);
  CHECK_THROWS_WITH_AS(split(scalar_tensor(1, kFloat32), 1),
                       doctest::Contains("op `split`: expects at least a 1-dimensional tensor"),
                       Error);
  CHECK_THROWS_WITH_AS(split(x, 1, 2), doctest::Contains("dimension out of range"), Error);
}

// ---------------------------------------------------------------------------------- chunk

TEST_CASE("chunk: piece sizes like PyTorch") {
  auto shapes = [](const std::vector<Tensor>& ts) {
    std::vector<Shape> s;
    for (auto& t : ts) s.push_back(t.shape());
    return s;
  };
  CHECK(shapes(chunk(zeros({5, 2}), 3)) == std::vector<Shape>{{2, 2}, {2, 2}, {1, 2}});
  // 6 in 4 chunks: ceil(6/4) = 2 per piece, so only 3 pieces
  CHECK(shapes(chunk(zeros({6, 2}), 4)) == std::vector<Shape>{{2, 2}, {2, 2}, {2, 2}});
  CHECK(shapes(chunk(zeros({0, 2}), 3)) == std::vector<Shape>{{0, 2}, {0, 2}, {0, 2}});
  CHECK(chunk(zeros({5, 2}), 10).size() == 5);
  CHECK(shapes(chunk(zeros({5, 2}), 2, -1)) == std::vector<Shape>{{5, 1}, {5, 1}});
  Tensor x = iota({4, 3});
  auto c = x.chunk(2, 1);
  REQUIRE(c.size() == 2);
  CHECK(c[0].shares_storage(x));
  check_close(c[1], {2, 5, 8, 11});
  CHECK_THROWS_WITH_AS(
      chunk(x, 0), doctest::Contains("op `chunk`: number of chunks must be greater than 0"), Error);
  CHECK_THROWS_WITH_AS(chunk(scalar_tensor(1, kFloat32), 1),
                       doctest::Contains("expects at least a 1-dimensional tensor"), Error);
  CHECK_THROWS_WITH_AS(chunk(x, 2, 2), doctest::Contains("dimension out of range"), Error);
}
