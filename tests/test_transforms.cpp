// Transform and dataset tests: Normalize against hand-computed values, RandomCrop windows of
// the zero-padded input (all offsets reachable, deterministic per generator state), Compose,
// collate errors, TensorDataset / Subset / TransformDataset.
#include <doctest/doctest.h>

#include <set>

#include "data/dataset.h"
#include "data/transforms.h"
#include "test_util.h"

using namespace minidl;
using namespace minidl::data;
using testutil::check_close;
using testutil::random_tensor;
using testutil::to_f64;

TEST_CASE("Normalize: per-channel values, broadcasting and batches") {
  Generator gen(0);
  Tensor x = tensor<float>({1, 2, 3, 4, 10, 20, 30, 40}, Shape{2, 2, 2});  // [C=2,H=2,W=2]
  Normalize norm({1.0, 10.0}, {2.0, 5.0});
  check_close(norm(x, gen), {0, 0.5, 1, 1.5, 0, 2, 4, 6});
  Normalize one({0.5}, {0.25});
  check_close(one(x, gen), {2, 6, 10, 14, 38, 78, 118, 158});
  // Batched form equals the per-sample form; dtype is kept.
  Tensor xb = random_tensor({3, 2, 4, 4}, kFloat64, 7);
  Tensor yb = norm.apply_batch(xb, gen);
  CHECK(yb.dtype() == kFloat64);
  for (int64_t b = 0; b < 3; ++b) check_close(yb[b], norm(xb[b], gen));
  CHECK(to_f64(yb[1])[16] == doctest::Approx((to_f64(xb[1])[16] - 10.0) / 5.0));
}

TEST_CASE("Normalize rejects bad arguments") {
  Generator gen(0);
  CHECK_THROWS_WITH_AS(Normalize({0.0}, {0.0}), doctest::Contains("std[0]"), Error);
  CHECK_THROWS_AS(Normalize({}, {1.0}), Error);
  CHECK_THROWS_AS(Normalize({0, 0}, {1, 1, 1}), Error);
  Normalize three({0, 0, 0}, {1, 1, 1});
  CHECK_THROWS_WITH_AS(three(zeros({2, 4, 4}), gen), doctest::Contains("2 channels"), Error);
  CHECK_THROWS_AS(three(zeros({4, 4}), gen), Error);
  CHECK_THROWS_WITH_AS(three(zeros({3, 4, 4}, kInt64), gen), doctest::Contains("floating"), Error);
}

TEST_CASE("RandomCrop: windows of the zero-padded input, every offset reachable") {
  const int64_t h = 4, w = 5, pad = 2, size = 4;
  Tensor x = arange(1, 1 + 2 * h * w, 1, kFloat32).reshape({2, h, w});  // [2,4,5], distinct
  const auto xv = to_f64(x);
  RandomCrop crop(size, pad);
  Generator gen(123);
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (int trial = 0; trial < 400; ++trial) {
    Tensor y = crop(x, gen);
    REQUIRE(y.shape() == Shape{2, size, size});
    const auto yv = to_f64(y);
    // Find the (top, left) of the padded image that reproduces y exactly.
    int found = 0;
    for (int64_t top = 0; top <= h + 2 * pad - size; ++top) {
      for (int64_t left = 0; left <= w + 2 * pad - size; ++left) {
        bool match = true;
        for (int64_t c = 0; c < 2 && match; ++c)
          for (int64_t i = 0; i < size && match; ++i)
            for (int64_t j = 0; j < size && match; ++j) {
              const int64_t r = top + i - pad, q = left + j - pad;
              const double want =
                  (r >= 0 && r < h && q >= 0 && q < w) ? xv[size_t((c * h + r) * w + q)] : 0.0;
              match = yv[size_t((c * size + i) * size + j)] == want;
            }
        if (match) {
          ++found;
          offsets.insert({top, left});
        }
      }
    }
    REQUIRE(found == 1);  // values are distinct and nonzero, so the window is unique
  }
  CHECK(offsets.size() == size_t((h + 2 * pad - size + 1) * (w + 2 * pad - size + 1)));
}

TEST_CASE("RandomCrop is deterministic for the same generator state") {
  Tensor x = random_tensor({3, 8, 8}, kFloat32, 3);
  RandomCrop crop(6, 3);
  Generator g1(99), g2(99), g3(100);
  std::vector<Tensor> a, b, c;
  for (int i = 0; i < 5; ++i) {
    a.push_back(crop(x, g1));
    b.push_back(crop(x, g2));
    c.push_back(crop(x, g3));
  }
  bool any_diff = false;
  for (int i = 0; i < 5; ++i) {
    CHECK(to_f64(a[size_t(i)]) == to_f64(b[size_t(i)]));
    any_diff = any_diff || to_f64(a[size_t(i)]) != to_f64(c[size_t(i)]);
  }
  CHECK(any_diff);
  CHECK(g1.offset() == 5);  // one Philox counter per crop
  // Identity crop: no padding, full size -> the input itself, no draw.
  Generator g4(1);
  CHECK(RandomCrop(8)(x, g4).is_same(x));
  CHECK(g4.offset() == 0);
  // Batched default = per-sample in order.
  Tensor xb = random_tensor({4, 1, 5, 5}, kFloat32, 4);
  Generator g5(7), g6(7);
  Tensor yb = crop.apply_batch(xb, g5);
  for (int64_t i = 0; i < 4; ++i) CHECK(to_f64(yb[i]) == to_f64(crop(xb[i], g6)));
  CHECK_THROWS_WITH_AS(RandomCrop(12, 1)(x, g1), doctest::Contains("larger than the padded"),
                       Error);
  CHECK_THROWS_AS(RandomCrop(0), Error);
  CHECK_THROWS_AS(RandomCrop(3, -1), Error);
}

TEST_CASE("Compose applies transforms in order") {
  Tensor x = random_tensor({1, 6, 6}, kFloat32, 5);
  auto crop = std::make_shared<RandomCrop>(4, 1);
  auto norm = std::make_shared<Normalize>(std::vector<double>{0.5}, std::vector<double>{2.0});
  Compose both({crop, norm});
  Generator g1(3), g2(3);
  check_close(both(x, g1), (*norm)((*crop)(x, g2), g2));
  CHECK_THROWS_AS(Compose({crop, nullptr}), Error);
}

TEST_CASE("collate stacks samples and names the mismatching one") {
  std::vector<Example> s = {{ones({2, 3}), tensor<int64_t>({1})},
                            {zeros({2, 3}), tensor<int64_t>({2})}};
  Example b = collate(s);
  CHECK(b.data.shape() == Shape{2, 2, 3});
  CHECK(b.target.tolist<int64_t>() == std::vector<int64_t>{1, 2});
  s.push_back({zeros({3, 2}), tensor<int64_t>({3})});
  CHECK_THROWS_WITH_AS(collate(s), doctest::Contains("sample 2 data has shape [3, 2]"), Error);
  s.back().data = zeros({2, 3}, kFloat64);
  CHECK_THROWS_WITH_AS(collate(s), doctest::Contains("sample 2"), Error);
  CHECK_THROWS_AS(collate({}), Error);
}

TEST_CASE("TensorDataset, Subset and TransformDataset") {
  Tensor data = random_tensor({6, 1, 4, 4}, kFloat32, 8);
  Tensor target = arange(6, kInt64);
  auto ds = std::make_shared<TensorDataset>(data, target);
  Generator gen(0);
  CHECK(ds->size() == 6);
  Example e = ds->get(4, gen);
  CHECK(to_f64(e.data) == to_f64(data[4]));
  CHECK(e.target.item<int64_t>() == 4);
  Example b = ds->get_batch({5, 0, 5}, gen);
  CHECK(b.target.tolist<int64_t>() == std::vector<int64_t>{5, 0, 5});
  CHECK(to_f64(b.data[0]) == to_f64(data[5]));
  // The default get_batch (collate of get) agrees with the index_select override.
  Example d = ds->Dataset::get_batch({5, 0, 5}, gen);
  CHECK(to_f64(d.data) == to_f64(b.data));
  CHECK_THROWS_WITH_AS(ds->get(6, gen), doctest::Contains("index 6"), Error);
  CHECK_THROWS_AS(ds->get_batch({1, -1}, gen), Error);
  CHECK_THROWS_WITH_AS(TensorDataset(zeros({3, 2}), zeros({4})), doctest::Contains("[3, 2]"),
                       Error);

  auto sub = std::make_shared<Subset>(ds, std::vector<int64_t>{3, 1});
  CHECK(sub->size() == 2);
  CHECK(sub->get(1, gen).target.item<int64_t>() == 1);
  CHECK(sub->get_batch({1, 0}, gen).target.tolist<int64_t>() == std::vector<int64_t>{1, 3});
  CHECK_THROWS_AS(sub->get(2, gen), Error);
  CHECK_THROWS_WITH_AS(Subset(ds, {0, 6}), doctest::Contains("indices[1] = 6"), Error);

  auto crop = std::make_shared<RandomCrop>(4, 1);
  TransformDataset tds(sub, crop);
  Generator g1(5), g2(5);
  Example tb = tds.get_batch({0, 1}, g1);
  CHECK(tb.target.tolist<int64_t>() == std::vector<int64_t>{3, 1});
  CHECK(to_f64(tb.data[0]) == to_f64(tds.get(0, g2).data));  // same draws, same order
  CHECK(to_f64(tb.data[1]) == to_f64(tds.get(1, g2).data));
  CHECK_THROWS_AS(TransformDataset(sub, nullptr), Error);
}
