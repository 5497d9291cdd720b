// Sampler tests: torch_randperm and DistributedSampler against PyTorch goldens
// (tools/golden/distributed_sampler.py), Random/Sequential samplers, rank coverage, bad args.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "data/sampler.h"
#include "golden.h"

using namespace minidl;
using namespace minidl::data;
using testutil::golden;

namespace {
bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  if (int64_t(v.size()) != n) return false;
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < n; ++i)
    if (v[size_t(i)] != i) return false;
  return true;
}
}  // namespace

TEST_CASE("torch_randperm matches torch.randperm with a seeded generator") {
  const auto& cases = golden("distributed_sampler.json")["randperm"];
  REQUIRE(cases.size() >= 8);
  for (const auto& c : cases) {
    const auto n = c["n"].get<int64_t>();
    const auto seed = c["seed"].get<uint64_t>();
    INFO("n=", n, " seed=", seed);
    CHECK(torch_randperm(n, seed) == c["perm"].get<std::vector<int64_t>>());
  }
  // Only the low 32 bits of the seed matter (at::mt19937 seeds with a uint32).
  CHECK(torch_randperm(50, 9) == torch_randperm(50, 9 + (uint64_t(1) << 32)));
  CHECK(torch_randperm(50, 9) != torch_randperm(50, 10));
  CHECK_THROWS_AS(torch_randperm(-1, 0), Error);
}

TEST_CASE("DistributedSampler matches torch.utils.data.DistributedSampler") {
  const auto& cases = golden("distributed_sampler.json")["distributed"];
  REQUIRE(cases.size() >= 40);
  for (const auto& c : cases) {
    const auto n = c["n"].get<int64_t>(), world = c["world"].get<int64_t>();
    const auto rank = c["rank"].get<int64_t>(), epoch = c["epoch"].get<int64_t>();
    const bool shuffle = c["shuffle"].get<bool>(), drop_last = c["drop_last"].get<bool>();
    const auto seed = c["seed"].get<uint64_t>();
    INFO("n=", n, " world=", world, " rank=", rank, " epoch=", epoch, " shuffle=", shuffle,
         " drop_last=", drop_last, " seed=", seed);
    DistributedSampler s(n, world, rank, shuffle, seed, drop_last);
    CHECK(s.size() == c["num_samples"].get<int64_t>());
    CHECK(s.indices(epoch) == c["indices"].get<std::vector<int64_t>>());
  }
}

TEST_CASE("DistributedSampler ranks cover the dataset and epochs reshuffle") {
  for (int64_t n : {0, 1, 3, 10, 16, 23}) {
    for (int64_t world : {1, 2, 3, 5}) {
      for (bool drop_last : {false, true}) {
        std::vector<int64_t> all;
        for (int64_t r = 0; r < world; ++r) {
          DistributedSampler s(n, world, r, true, 11, drop_last);
          auto idx = s.indices(2);
          CHECK(int64_t(idx.size()) == s.size());
          all.insert(all.end(), idx.begin(), idx.end());
          for (int64_t i : idx) CHECK((i >= 0 && i < n));
        }
        INFO("n=", n, " world=", world, " drop_last=", drop_last);
        std::sort(all.begin(), all.end());
        const auto distinct = std::unique(all.begin(), all.end()) - all.begin();
        if (drop_last)
          CHECK(distinct == n - n % world);  // every kept index once
        else
          CHECK(distinct == n);  // padding only repeats
      }
    }
  }
  DistributedSampler s(100, 4, 1, true, 5);
  CHECK(s.indices(0) != s.indices(1));
  CHECK(s.indices(3) == s.indices(3));
  CHECK(s.total_size() == 100);
  DistributedSampler seq(10, 3, 2, false);
  CHECK(seq.indices(0) == std::vector<int64_t>{2, 5, 8, 1});  // padded with 0, 1
}

TEST_CASE("DistributedSampler rejects bad arguments") {
  CHECK_THROWS_WITH_AS(DistributedSampler(10, 2, 2), doctest::Contains("invalid rank 2"), Error);
  CHECK_THROWS_AS(DistributedSampler(10, 2, -1), Error);
  CHECK_THROWS_WITH_AS(DistributedSampler(10, 0, 0), doctest::Contains("num_replicas"), Error);
  CHECK_THROWS_AS(DistributedSampler(-3, 2, 0), Error);
}

TEST_CASE("RandomSampler and SequentialSampler") {
  RandomSampler r(1000, 42);
  CHECK(r.size() == 1000);
  auto e0 = r.indices(0), e1 = r.indices(1);
  CHECK(is_permutation_of_range(e0, 1000));
  CHECK(is_permutation_of_range(e1, 1000));
  CHECK(e0 != e1);
  CHECK(e0 == torch_randperm(1000, 42));  // epoch 0 is randperm(seed)
  CHECK(e1 == torch_randperm(1000, 43));
  CHECK(r.indices(1) == e1);
  SequentialSampler s(5);
  CHECK(s.size() == 5);
  CHECK(s.indices(7) == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(SequentialSampler(0).indices(0).empty());
  CHECK_THROWS_AS(SequentialSampler(-1), Error);
  CHECK_THROWS_AS(RandomSampler(-1, 0), Error);
}
