// torch.utils.data's ConcatDataset and random_split: datasets joined end to end, and a dataset
// split into non-overlapping Subsets in the order of a seeded torch.randperm.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "data/dataset.h"

namespace minidl::data {

// The samples of each dataset in turn: index i of the concatenation is index i - offset of the
// dataset it falls in (torch.utils.data.ConcatDataset; negative indices are not taken, as every
// Dataset here). A batch that spans datasets is gathered from each and collated.
class ConcatDataset : public Dataset {
 public:
  explicit ConcatDataset(std::vector<std::shared_ptr<const Dataset>> datasets);
  int64_t size() const override;
  Example get(int64_t index, Generator& gen) const override;
  Example get_batch(const std::vector<int64_t>& indices, Generator& gen) const override;
  // cumulative_sizes[k] = the sizes of datasets 0..k summed (torch's attribute).
  const std::vector<int64_t>& cumulative_sizes() const { return cumulative_; }

 private:
  // (dataset, index inside it) of concatenated index `index`.
  std::pair<size_t, int64_t> locate(int64_t index) const;
  std::vector<std::shared_ptr<const Dataset>> datasets_;
  std::vector<int64_t> cumulative_;
};

// torch.utils.data.random_split(dataset, lengths, generator=torch.Generator().manual_seed(seed)):
// Subsets of the given lengths (summing to dataset->size()) taking consecutive runs of
// torch_randperm(size, seed), so the split equals PyTorch's for the same seed.
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<int64_t>& lengths,
                                                  uint64_t seed);

// Floating lengths, read as torch reads them: fractions when they sum to 1 (each length is
// floor(size * fraction), the remainder added one at a time to the splits in order), otherwise
// whole numbers taken as counts.
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& lengths,
                                                  uint64_t seed);

// random_split(ds, {800, 200}, seed) and random_split(ds, {0.8, 0.2}, seed): a braced list picks
// the counts or the fractions form by its element type.
template <class T>
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  std::initializer_list<T> lengths, uint64_t seed) {
  if constexpr (std::is_integral_v<T>)
    return random_split(std::move(dataset), std::vector<int64_t>(lengths.begin(), lengths.end()),
                        seed);
  else
    return random_split(std::move(dataset), std::vector<double>(lengths.begin(), lengths.end()),
                        seed);
}

// The lengths that random_split gives fractions (summing to 1) of `size` items.
std::vector<int64_t> split_lengths(int64_t size, const std::vector<double>& fractions);

}  // namespace minidl::data
