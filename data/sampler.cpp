// Samplers: torch_randperm (bit-exact torch.randperm on CPU), Sequential, Random and
// Distributed samplers with PyTorch's padding/striding semantics, SubsetRandomSampler and
// WeightedRandomSampler (torch.multinomial's CPU draws), and BatchSampler.
#include "data/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <utility>

#include "tensor/error.h"

namespace minidl::data {

namespace {

// PyTorch's CPUGeneratorImpl: at::mt19937 seeded with the low 32 bits of the seed (identical to
// std::mt19937); random() is one 32-bit output, random64() joins two (the first is the high
// word), and uniform_real_distribution<double>(0, 1) keeps 53 bits of random64().
class TorchCpuGenerator {
 public:
  explicit TorchCpuGenerator(uint64_t seed) : engine_(uint32_t(seed & 0xffffffffu)) {}
  uint32_t random() { return engine_(); }
  double uniform_double() {
    const uint64_t hi = engine_(), lo = engine_();
    const uint64_t r = (hi << 32) | lo;
    return double(r & ((uint64_t(1) << 53) - 1)) * std::ldexp(1.0, -53);
  }

 private:
  std::mt19937 engine_;
};

}  // namespace

// randperm_cpu of PyTorch 1.13 (the reference installed here, verified up to n = 214748364):
// r = arange(n); for i in [0, n-1): swap(r[i], r[i + random() % (n - i)]). PyTorch >= 2.1
// switched n >= UINT32_MAX / 20 to an inside-out shuffle with random64(); we keep the 1.13 order
// for every n (documented deviation).
std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed) {
  MINIDL_CHECK(n >= 0, "torch_randperm: n must be non-negative, got ", n);
  TorchCpuGenerator gen(seed);
  std::vector<int64_t> r(static_cast<size_t>(n));
  std::iota(r.begin(), r.end(), int64_t(0));
  for (int64_t i = 0; i + 1 < n; ++i) {
    int64_t z = int64_t(gen.random() % uint64_t(n - i));
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

// ---- SubsetRandomSampler

SubsetRandomSampler::SubsetRandomSampler(std::vector<int64_t> indices, uint64_t seed)
    : indices_(std::move(indices)), seed_(seed) {}

std::vector<int64_t> SubsetRandomSampler::indices(int64_t epoch) const {
  const std::vector<int64_t> perm = torch_randperm(size(), seed_ + uint64_t(epoch));
  std::vector<int64_t> out;
  out.reserve(perm.size());
  for (int64_t p : perm) out.push_back(indices_[size_t(p)]);
  return out;
}

// ---- WeightedRandomSampler

WeightedRandomSampler::WeightedRandomSampler(std::vector<double> weights, int64_t num_samples,
                                             bool replacement, uint64_t seed)
    : weights_(std::move(weights)),
      num_samples_(num_samples),
      replacement_(replacement),
      seed_(seed) {
  MINIDL_CHECK(num_samples > 0,
               "num_samples should be a positive integer value, but got num_samples=", num_samples);
  MINIDL_CHECK(!weights_.empty(), "WeightedRandomSampler: weights must not be empty");
  double sum = 0;
  int64_t positive = 0;
  for (size_t i = 0; i < weights_.size(); ++i) {
    MINIDL_CHECK(std::isfinite(weights_[i]) && weights_[i] >= 0,
                 "invalid multinomial distribution: weights[", i, "] = ", weights_[i],
                 " (weights must be finite and non-negative)");
    sum += weights_[i];
    positive += weights_[i] > 0;
  }
  MINIDL_CHECK(sum > 0, "invalid multinomial distribution (sum of probabilities <= 0)");
  MINIDL_CHECK(replacement || num_samples <= positive, "WeightedRandomSampler: cannot draw ",
               num_samples, " samples without replacement from ", positive,
               " positive weight(s) (invalid multinomial distribution (with replacement=False, "
               "not enough non-negative category to sample))");
}

std::vector<int64_t> WeightedRandomSampler::indices(int64_t epoch) const {
  TorchCpuGenerator gen(seed_ + uint64_t(epoch));
  const int64_t n = int64_t(weights_.size());
  std::vector<int64_t> out;
  out.reserve(size_t(num_samples_));
  if (replacement_ && num_samples_ > 1) {
    // multinomial_with_replacement: the normalised cumulative sum (last entry forced to 1), one
    // uniform per draw, the first slot whose cumulative probability is >= it.
    std::vector<double> cum(static_cast<size_t>(n));
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) cum[size_t(j)] = sum += weights_[size_t(j)];
    for (double& c : cum) c /= sum;
    cum.back() = 1;
    for (int64_t k = 0; k < num_samples_; ++k) {
      const double u = gen.uniform_double();
      out.push_back(int64_t(std::lower_bound(cum.begin(), cum.end(), u) - cum.begin()));
    }
    return out;
  }
  // Without replacement, or one draw: q = w / Exp(1) per category (the exponential is
  // -log(1 - u)), then the indices of the num_samples largest q, largest first (topk/argmax).
  std::vector<double> q(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j)
    q[size_t(j)] = weights_[size_t(j)] / -std::log(1.0 - gen.uniform_double());
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return q[size_t(a)] > q[size_t(b)]; });
  order.resize(size_t(num_samples_));
  return order;
}

// ---- BatchSampler

BatchSampler::BatchSampler(std::shared_ptr<const Sampler> sampler, int64_t batch_size,
                           bool drop_last)
    : sampler_(std::move(sampler)), batch_size_(batch_size), drop_last_(drop_last) {
  MINIDL_CHECK(sampler_ != nullptr, "BatchSampler: sampler is null");
  MINIDL_CHECK(batch_size >= 1,
               "batch_size should be a positive integer value, but got batch_size=", batch_size);
}

int64_t BatchSampler::size() const {
  const int64_t n = sampler_->size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

std::vector<std::vector<int64_t>> BatchSampler::batches(int64_t epoch) const {
  const std::vector<int64_t> order = sampler_->indices(epoch);
  const int64_t n = int64_t(order.size());
  const int64_t count = drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
  std::vector<std::vector<int64_t>> out;
  out.reserve(size_t(count));
  for (int64_t b = 0; b < count; ++b) {
    const int64_t begin = b * batch_size_, end = std::min(begin + batch_size_, n);
    out.emplace_back(order.begin() + begin, order.begin() + end);
  }
  return out;
}

}  // namespace minidl::data
