// Samplers: the index order of one epoch. Each is a pure function of (its settings, epoch), so a
// resumed run replays exactly the order of an uninterrupted one. Shuffles use torch_randperm,
// which reproduces torch.randperm(n, generator=torch.Generator().manual_seed(seed)) exactly, and
// weighted draws reproduce torch.multinomial's CPU draws (PyTorch 1.13) the same way.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace minidl::data {

// torch.randperm(n, generator=g) on CPU with g.manual_seed(seed): the same mt19937 stream and
// the same Fisher-Yates variant as PyTorch, so the indices are identical.
std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed);

class Sampler {
 public:
  virtual ~Sampler() = default;
  // Number of indices per epoch (len(sampler)).
  virtual int64_t size() const = 0;
  // The indices of epoch `epoch`.
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
};

// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
};

// A permutation of 0..n-1 seeded by seed + epoch (torch_randperm).
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
  uint64_t seed_;
};

// torch.utils.data.DistributedSampler(dataset, num_replicas, rank, shuffle, seed, drop_last):
// shuffle with seed + epoch, pad by wrapping around (or drop the tail with drop_last) so every
// rank gets num_samples indices, then take the strided slice indices[rank::num_replicas].
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t total_size() const { return num_samples_ * num_replicas_; }

 private:
  int64_t n_, num_replicas_, rank_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  int64_t num_samples_;
};

// torch.utils.data.SubsetRandomSampler(indices, generator): the given indices in a random order,
// indices[torch_randperm(len, seed + epoch)] (torch's order for the generator seeded with
// seed + epoch, as RandomSampler here).
class SubsetRandomSampler : public Sampler {
 public:
  SubsetRandomSampler(std::vector<int64_t> indices, uint64_t seed);
  int64_t size() const override { return int64_t(indices_.size()); }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  std::vector<int64_t> indices_;
  uint64_t seed_;
};

// torch.utils.data.WeightedRandomSampler(weights, num_samples, replacement, generator):
// num_samples indices in [0, len(weights)) drawn with probability proportional to the weights
// (non-negative, finite, positive sum), with replacement (the default) or without
// (num_samples <= the number of positive weights). The draws are torch.multinomial's on CPU for
// a generator seeded with seed + epoch: equal to Debian's PyTorch 1.13 and 2.6 (both without
// MKL; tests/data/data_utils.json). PyTorch builds with MKL draw the exponentials of the
// without-replacement and single-draw paths with MKL's generator, so there only the
// distribution is the same; the with-replacement path (num_samples > 1) does not use them.
class WeightedRandomSampler : public Sampler {
 public:
  WeightedRandomSampler(std::vector<double> weights, int64_t num_samples, bool replacement = true,
                        uint64_t seed = 0);
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  std::vector<double> weights_;
  int64_t num_samples_;
  bool replacement_;
  uint64_t seed_;
};

// torch.utils.data.BatchSampler(sampler, batch_size, drop_last): the sampler's indices of an
// epoch in consecutive batches of batch_size (the last one shorter unless drop_last). A subclass
// forms its own batches (bucketing by length, ...) by overriding size() and batches() and
// constructing the base with the protected default constructor; the DataLoader takes either as
// its batch_sampler.
class BatchSampler {
 public:
  BatchSampler(std::shared_ptr<const Sampler> sampler, int64_t batch_size, bool drop_last);
  virtual ~BatchSampler() = default;
  // Batches per epoch (len(batch_sampler)).
  virtual int64_t size() const;
  // The batches of epoch `epoch`, each a non-empty list of dataset indices.
  virtual std::vector<std::vector<int64_t>> batches(int64_t epoch) const;

 protected:
  BatchSampler() = default;

 private:
  std::shared_ptr<const Sampler> sampler_;
  int64_t batch_size_ = 1;
  bool drop_last_ = false;
};

}  // namespace minidl::data
