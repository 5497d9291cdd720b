// random_split, ConcatDataset, SubsetRandomSampler and WeightedRandomSampler: index orders
// against PyTorch 1.13 (tools/golden/data_utils.py -> tests/data/data_utils.json), batches
// through a DataLoader, the weighted draws' frequencies, and PyTorch's errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/ops.h"
#include "data/dataloader.h"
#include "data/dataset_utils.h"
#include "data/sampler.h"
#include "golden.h"

using namespace minidl;
using namespace minidl::data;
using testutil::golden;
using testutil::json;

namespace {
// n samples whose data row i is [i, 10 i] and whose target is i (so an index is readable back).
std::shared_ptr<TensorDataset> numbered(int64_t n, int64_t first = 0) {
  Tensor t = arange(first, first + n, 1, kInt64);
  return std::make_shared<TensorDataset>(stack({t, mul(t, Scalar(10))}, 1), t);
}

std::vector<int64_t> targets(const Dataset& ds) {
  Generator gen(0);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < ds.size(); ++i) out.push_back(ds.get(i, gen).target.item<int64_t>());
  return out;
}

const json& G() {
  return golden("data_utils.json");
}
}  // namespace

TEST_CASE("random_split matches torch.utils.data.random_split (counts and fractions)") {
  for (const json& c : G()["random_split"]) {
    const int64_t n = c["n"].get<int64_t>();
    const uint64_t seed = c["seed"].get<uint64_t>();
    INFO("n=", n, " lengths=", c["lengths"].dump(), " seed=", seed);
    auto ds = numbered(n);
    const bool fractions = c["lengths"][0].is_number_float();
    auto parts = fractions ? random_split(ds, c["lengths"].get<std::vector<double>>(), seed)
                           : random_split(ds, c["lengths"].get<std::vector<int64_t>>(), seed);
    REQUIRE(parts.size() == c["subsets"].size());
    for (size_t k = 0; k < parts.size(); ++k)
      CHECK(targets(*parts[k]) == c["subsets"][k].get<std::vector<int64_t>>());
  }
  // braced lists pick the form by element type
  auto ds = numbered(10);
  CHECK(random_split(ds, {3, 7}, 0)[0]->size() == 3);
  CHECK(random_split(ds, {0.25, 0.75}, 0)[0]->size() == 3);  // floor 2.5 = 2, +1 remainder
  CHECK(split_lengths(13, {0.8, 0.2}) == std::vector<int64_t>{11, 2});
  CHECK(split_lengths(10, {0.3, 0.3, 0.4}) == std::vector<int64_t>{3, 3, 4});
}

TEST_CASE("random_split errors name the lengths and the dataset size") {
  auto ds = numbered(10);
  CHECK_THROWS_WITH_AS(random_split(ds, {3, 6}, 0),
                       doctest::Contains("lengths sum to 9, the dataset has 10 samples"), Error);
  CHECK_THROWS_WITH_AS(random_split(ds, {2.5, 7.5}, 0),
                       doctest::Contains("whole numbers, or fractions summing to 1"), Error);
  CHECK_THROWS_WITH_AS(random_split(ds, {-2, 12}, 0), doctest::Contains("negative"), Error);
  CHECK_THROWS_WITH_AS(split_lengths(10, {1.5, -0.5}),
                       doctest::Contains("Fraction at index 0 is not between 0 and 1"), Error);
  CHECK_THROWS_AS(random_split(nullptr, {1, 2}, 0), Error);
}

TEST_CASE("ConcatDataset: indices run through each dataset in turn, batches span them") {
  auto a = numbered(3), b = numbered(0), c = numbered(4, 100);
  ConcatDataset cat_ds({a, b, c});
  CHECK(cat_ds.size() == 7);
  CHECK(cat_ds.cumulative_sizes() == std::vector<int64_t>{3, 3, 7});
  CHECK(targets(cat_ds) == std::vector<int64_t>{0, 1, 2, 100, 101, 102, 103});
  Generator gen(0);
  // a batch that starts in `a`, crosses into `c` and comes back
  Example batch = cat_ds.get_batch({2, 3, 4, 0}, gen);
  CHECK(batch.data.shape() == Shape{4, 2});
  std::vector<int64_t> want{2, 20, 100, 1000, 101, 1010, 0, 0};
  CHECK(batch.data.reshape({8}).tolist<int64_t>() == want);
  // through a shuffled DataLoader: every sample exactly once per epoch
  auto shared = std::make_shared<ConcatDataset>(std::vector<std::shared_ptr<const Dataset>>{a, c});
  DataLoader loader(shared, {.batch_size = 3, .shuffle = true, .seed = 5, .num_workers = 2});
  std::vector<int64_t> seen;
  for (Example& e : loader.epoch(0))
    for (int64_t t : e.target.tolist<int64_t>()) seen.push_back(t);
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<int64_t>{0, 1, 2, 100, 101, 102, 103});
  CHECK_THROWS_WITH_AS(cat_ds.get(7, gen), doctest::Contains("index 7 is out of range"), Error);
  CHECK_THROWS_AS(ConcatDataset({}), Error);
  // samples of different shapes cannot share a batch
  auto wide = std::make_shared<TensorDataset>(zeros({2, 5}, kInt64), zeros({2}, kInt64));
  ConcatDataset mixed({a, wide});
  CHECK_NOTHROW(mixed.get_batch({0, 1}, gen));
  CHECK_THROWS_WITH_AS(mixed.get_batch({2, 3}, gen),
                       doctest::Contains("spans datasets 0 and 1 whose samples differ"), Error);
}

TEST_CASE("SubsetRandomSampler matches torch's order, epochs reshuffle") {
  for (const json& c : G()["subset_random_sampler"]) {
    SubsetRandomSampler s(c["indices"].get<std::vector<int64_t>>(), c["seed"].get<uint64_t>());
    INFO("indices=", c["indices"].dump());
    CHECK(s.indices(0) == c["order"].get<std::vector<int64_t>>());
  }
  SubsetRandomSampler s({10, 20, 30, 40, 50, 60}, 3);
  CHECK(s.size() == 6);
  auto e0 = s.indices(0), e1 = s.indices(1);
  CHECK(e0 != e1);
  std::sort(e1.begin(), e1.end());
  CHECK(e1 == std::vector<int64_t>{10, 20, 30, 40, 50, 60});
}

TEST_CASE("WeightedRandomSampler matches torch.multinomial's CPU draws (PyTorch 1.13)") {
  for (const json& c : G()["weighted_random_sampler"]) {
    WeightedRandomSampler s(c["weights"].get<std::vector<double>>(),
                            c["num_samples"].get<int64_t>(), c["replacement"].get<bool>(),
                            c["seed"].get<uint64_t>());
    INFO("weights=", c["weights"].dump(), " replacement=", c["replacement"].get<bool>());
    CHECK(s.indices(0) == c["order"].get<std::vector<int64_t>>());
  }
}

TEST_CASE("WeightedRandomSampler: frequencies follow the weights, errors as torch") {
  const std::vector<double> w{1, 0, 3, 6};
  WeightedRandomSampler s(w, 100000, true, 11);
  std::vector<double> count(4, 0);
  for (int64_t i : s.indices(0)) count[size_t(i)] += 1;
  CHECK(count[1] == 0);  // a zero weight is never drawn
  for (size_t i : {0u, 2u, 3u}) CHECK(std::abs(count[i] / 1e5 - w[i] / 10) < 0.01);
  CHECK(s.indices(1) != s.indices(0));
  // without replacement: distinct indices, never a zero weight
  WeightedRandomSampler once(w, 3, false, 2);
  auto idx = once.indices(0);
  std::sort(idx.begin(), idx.end());
  CHECK(idx == std::vector<int64_t>{0, 2, 3});
  CHECK_THROWS_WITH_AS(WeightedRandomSampler(w, 4, false, 0),
                       doctest::Contains("cannot draw 4 samples without replacement from 3"),
                       Error);
  CHECK_THROWS_WITH_AS(WeightedRandomSampler(w, 0), doctest::Contains("num_samples=0"), Error);
  CHECK_THROWS_WITH_AS(WeightedRandomSampler({1, -1}, 2), doctest::Contains("weights[1] = -1"),
                       Error);
  CHECK_THROWS_WITH_AS(WeightedRandomSampler({0, 0}, 2), doctest::Contains("sum of probabilities"),
                       Error);
  CHECK_THROWS_WITH_AS(WeightedRandomSampler({1, NAN}, 2), doctest::Contains("finite"), Error);
}
