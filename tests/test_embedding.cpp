// embedding and embedding_backward: hand-worked cases, naive f64 references on random indices
// in several dtypes with non-contiguous weights, indices and gradients, padding_idx, the
// parallel paths, determinism and index/shape/dtype errors.
#include <doctest/doctest.h>

#include <vector>

#include "index_test_util.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;
using namespace index_test;

namespace {

const DType kAllNumeric[] = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8};

}  // namespace

// ------------------------------------------------------------------------------ embedding

TEST_CASE("embedding: hand-worked, int32 indices, 0-d and empty indices") {
  Tensor w = from_f64({0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor out = embedding(w, ints({0, 2, 1, 1}, {2, 2}));
  CHECK(out.shape() == Shape{2, 2, 2});
  check_close(out, {0, 1, 4, 5, 2, 3, 2, 3});
  check_close(embedding(w, ints({2, 0}, {2}).to(kInt32)), {4, 5, 0, 1});
  Tensor s = embedding(w, ints({1}, {}));
  CHECK(s.shape() == Shape{2});
  check_close(s, {2, 3});
  CHECK(embedding(w, ints({}, {0})).shape() == Shape{0, 2});
  CHECK(embedding(empty({0, 4}), ints({}, {2, 0})).shape() == Shape{2, 0, 4});
}

TEST_CASE("embedding: random vs reference, dtypes, non-contiguous weight and indices") {
  for (DType dt : kAllNumeric) {
    CAPTURE(dt);
    const int64_t V = 7, D = 5;
    Tensor w = random_tensor({V, D}, dt, 1, -50, 50);
    Tensor idx = rand_index({3, 4}, V, 2);
    std::vector<double> wv = to_f64(w);
    std::vector<int64_t> iv = idx.tolist<int64_t>();
    std::vector<double> ref;
    for (int64_t i : iv)
      for (int64_t c = 0; c < D; ++c) ref.push_back(wv[size_t(i * D + c)]);
    Tensor out = embedding(w, idx);
    CHECK(out.dtype() == dt);
    CHECK(out.shape() == Shape{3, 4, D});
    check_close(out, ref, 0, 0);
    check_close(embedding(noncontiguous(w), noncontiguous(idx)), ref, 0, 0);
    Tensor wt = w.t().contiguous().t();  // column-major weight
    CHECK(!wt.is_contiguous());
    check_close(embedding(wt, idx.t()), to_f64(embedding(w, idx.t().contiguous())), 0, 0);
  }
}

TEST_CASE("embedding: large (parallel path) matches reference") {
  const int64_t V = 100, D = 64, N = 3000;
  Tensor w = random_tensor({V, D}, kFloat32, 3);
  Tensor idx = rand_index({N}, V, 4);
  std::vector<double> wv = to_f64(w), ref;
  for (int64_t i : idx.tolist<int64_t>())
    for (int64_t c = 0; c < D; ++c) ref.push_back(wv[size_t(i * D + c)]);
  check_close(embedding(w, idx), ref, 0, 0);
  check_close(embedding(noncontiguous(w), idx), ref, 0, 0);
}

TEST_CASE("embedding: errors") {
  Tensor w = from_f64({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {5, 2});
  CHECK_THROWS_WITH_AS(embedding(w, ints({0, 7}, {2})),
                       doctest::Contains("op `embedding`: index 7 is out of bounds for dimension 0 "
                                         "with size 5"),
                       Error);
  CHECK_THROWS_WITH_AS(embedding(w, ints({-1}, {1})),
                       doctest::Contains("index -1 is out of bounds"), Error);
  CHECK_THROWS_WITH_AS(embedding(from_f64({1, 2}, {2}), ints({0}, {1})),
                       doctest::Contains("'weight' must be 2-D, got shape [2]"), Error);
  CHECK_THROWS_WITH_AS(embedding(w, from_f64({0}, {1})),
                       doctest::Contains("op `embedding`: expected dtype int64 or int32 for index, "
                                         "got float32"),
                       Error);
}

// --------------------------------------------------------------------- embedding_backward

namespace {
std::vector<double> embedding_backward_ref(const Tensor& g, const Tensor& idx, int64_t V,
                                           int64_t pad) {
  const int64_t D = g.size(-1);
  std::vector<double> gv = to_f64(g), out(size_t(V * D), 0.0);
  std::vector<int64_t> iv = idx.tolist<int64_t>();
  for (size_t p = 0; p < iv.size(); ++p)
    if (iv[p] != pad)
      for (int64_t c = 0; c < D; ++c) out[size_t(iv[p] * D + c)] += gv[p * size_t(D) + size_t(c)];
  return out;
}
}  // namespace

TEST_CASE("embedding_backward: hand-worked with repeated indices and padding_idx") {
  Tensor g = from_f64({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor idx = ints({0, 2, 0}, {3});
  Tensor gw = embedding_backward(g, idx, 4);
  CHECK(gw.shape() == Shape{4, 2});
  check_close(gw, {6, 8, 0, 0, 3, 4, 0, 0});
  check_close(embedding_backward(g, idx, 4, 0), {0, 0, 0, 0, 3, 4, 0, 0});
  check_close(embedding_backward(g, idx, 4, 2), {6, 8, 0, 0, 0, 0, 0, 0});
  check_close(embedding_backward(g, idx.to(kInt32), 3), {6, 8, 0, 0, 3, 4});
  // no indices: all-zero gradient
  check_close(embedding_backward(empty({0, 2}), ints({}, {0}), 2), {0, 0, 0, 0});
}

TEST_CASE("embedding_backward: random vs reference, dtypes, non-contiguous grad") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dt);
    const int64_t V = 6, D = 3;
    Tensor idx = rand_index({4, 5}, V, 10);
    Tensor g = random_tensor({4, 5, D}, dt, 11);
    for (int64_t pad : {int64_t(-1), int64_t(2)}) {
      std::vector<double> ref = embedding_backward_ref(g, idx, V, pad);
      Tensor gw = embedding_backward(g, idx, V, pad);
      CHECK(gw.dtype() == dt);
      CHECK(gw.shape() == Shape{V, D});
      check_close(gw, ref);
      check_close(embedding_backward(noncontiguous(g), noncontiguous(idx), V, pad), ref);
      check_close(embedding_backward(g.transpose(0, 1), idx.t(), V, pad), ref);
    }
  }
}

TEST_CASE("embedding_backward: large, many repeats, deterministic") {
  const int64_t V = 40, D = 16, N = 5000;
  Tensor idx = rand_index({N}, V, 12);
  Tensor g = random_tensor({N, D}, kFloat32, 13);
  Tensor a = embedding_backward(g, idx, V, 3), b = embedding_backward(g, idx, V, 3);
  CHECK(a.tolist<float>() == b.tolist<float>());  // bitwise identical
  check_close(a, embedding_backward_ref(g, idx, V, 3), 1e-4, 1e-4);
}

TEST_CASE("embedding_backward: errors") {
  Tensor g = from_f64({1, 2, 3, 4}, {2, 2});
  CHECK_THROWS_WITH_AS(embedding_backward(g, ints({0, 5}, {2}), 5),
                       doctest::Contains("op `embedding_backward`: index 5 is out of bounds for "
                                         "dimension 0 with size 5"),
                       Error);
  CHECK_THROWS_WITH_AS(embedding_backward(g, ints({0, 1, 1}, {3}), 5),
                       doctest::Contains("grad_out shape [2, 2] does not match indices shape [3]"),
                       Error);
  CHECK_THROWS_WITH_AS(embedding_backward(g, ints({0, 1}, {2}), 3, 3),
                       doctest::Contains("padding_idx 3 must be within num_weights 3"), Error);
  CHECK_THROWS_WITH_AS(embedding_backward(g, from_f64({0, 1}, {2}), 3),
                       doctest::Contains("expected dtype int64 or int32"), Error);
}
