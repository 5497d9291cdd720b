// Samplers: torch_randperm (bit-exact torch.randperm on CPU), Sequential, Random and
// Distributed samplers with PyTorch's padding/striding semantics.
#include "data/sampler.h"

#include <numeric>
#include <random>

#include "tensor/error.h"

namespace minidl::data {

// PyTorch's CPUGeneratorImpl: at::mt19937 seeded with the low 32 bits of the seed (identical to
// std::mt19937); random() = one 32-bit output. randperm_cpu of PyTorch 1.13 (the reference
// installed here, verified up to n = 214748364): r = arange(n); for i in [0, n-1):
// swap(r[i], r[i + random() % (n - i)]). PyTorch >= 2.1 switched n >= UINT32_MAX / 20 to an
// inside-out shuffle with random64(); we keep the 1.13 order for every n (documented deviation).
std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed) {
  MINIDL_CHECK(n >= 0, "torch_randperm: n must be non-negative, got ", n);
  std::mt19937 gen{uint32_t(seed & 0xffffffffu)};
  std::vector<int64_t> r(static_cast<size_t>(n));
  std::iota(r.begin(), r.end(), int64_t(0));
  for (int64_t i = 0; i + 1 < n; ++i) {
    int64_t z = int64_t(gen() % uint64_t(n - i));
    std::swap(r[size_t(i)], r[size_t(z + i)]);
  }
  return r;
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  MINIDL_CHECK(n >= 0, "SequentialSampler: dataset size must be non-negative, got ", n);
}

std::vector<int64_t> SequentialSampler::indices(int64_t /*epoch*/) const {
  std::vector<int64_t> r(static_cast<size_t>(n_));
  std::iota(r.begin(), r.end(), int64_t(0));
  return r;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  MINIDL_CHECK(n >= 0, "RandomSampler: dataset size must be non-negative, got ", n);
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  return torch_randperm(n_, seed_ + uint64_t(epoch));
}

DistributedSampler::DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : n_(n),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      drop_last_(drop_last),
      seed_(seed) {
  MINIDL_CHECK(n >= 0, "DistributedSampler: dataset size must be non-negative, got ", n);
  MINIDL_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got ",
               num_replicas);
  MINIDL_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: invalid rank ", rank,
               ", rank should be in the interval [0, ", num_replicas - 1, "]");
  if (drop_last && n % num_replicas != 0) {
    // math.ceil((n - R) / R): 0 when n < R (the ceiling of a fraction in (-1, 0)).
    num_samples_ = n < num_replicas ? 0 : (n - num_replicas + num_replicas - 1) / num_replicas;
  } else {
    num_samples_ = (n + num_replicas - 1) / num_replicas;
  }
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> all;
  if (shuffle_) {
    all = torch_randperm(n_, seed_ + uint64_t(epoch));
  } else {
    all.resize(static_cast<size_t>(n_));
    std::iota(all.begin(), all.end(), int64_t(0));
  }
  // Pad by cycling from the front (no-op when drop_last: total_size <= n), then stride.
  const int64_t total = total_size();
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += num_replicas_) mine.push_back(all[size_t(i % n_)]);
  MINIDL_CHECK(int64_t(mine.size()) == num_samples_, "DistributedSampler: rank ", rank_, " got ",
               mine.size(), " indices, expected ", num_samples_);
  return mine;
}

}  // namespace minidl::data
