// ConcatDataset (index lookup by cumulative sizes, batches gathered per dataset and collated)
// and random_split (torch's fraction rounding and randperm order).
#include "data/dataset_utils.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <utility>

#include "autograd/ops.h"
#include "data/sampler.h"
#include "tensor/error.h"

namespace minidl::data {

// ---- ConcatDataset

ConcatDataset::ConcatDataset(std::vector<std::shared_ptr<const Dataset>> datasets)
    : datasets_(std::move(datasets)) {
  MINIDL_CHECK(!datasets_.empty(), "datasets should not be an empty iterable");
  int64_t total = 0;
  for (size_t k = 0; k < datasets_.size(); ++k) {
    MINIDL_CHECK(datasets_[k] != nullptr, "ConcatDataset: dataset ", k, " is null");
    total += datasets_[k]->size();
    cumulative_.push_back(total);
  }
}

int64_t ConcatDataset::size() const {
  return cumulative_.back();
}

std::pair<size_t, int64_t> ConcatDataset::locate(int64_t index) const {
  MINIDL_CHECK(index >= 0 && index < size(), "ConcatDataset: index ", index,
               " is out of range for a dataset of size ", size());
  // torch: bisect_right(cumulative_sizes, idx)
  const size_t k =
      size_t(std::upper_bound(cumulative_.begin(), cumulative_.end(), index) - cumulative_.begin());
  return {k, k == 0 ? index : index - cumulative_[k - 1]};
}

Example ConcatDataset::get(int64_t index, Generator& gen) const {
  auto [k, i] = locate(index);
  return datasets_[k]->get(i, gen);
}

// Runs of consecutive indices from one dataset are gathered with that dataset's get_batch; the
// pieces are joined along dim 0 (an error names the datasets when their samples differ).
Example ConcatDataset::get_batch(const std::vector<int64_t>& indices, Generator& gen) const {
  std::vector<Example> pieces;
  std::vector<size_t> owners;
  std::vector<int64_t> run;  // indices inside datasets_[owners.back()]
  auto flush = [&] {
    if (!run.empty()) pieces.push_back(datasets_[owners.back()]->get_batch(run, gen));
    run.clear();
  };
  for (int64_t index : indices) {
    const auto [k, i] = locate(index);
    if (owners.empty() || k != owners.back()) {
      flush();
      owners.push_back(k);
    }
    run.push_back(i);
  }
  flush();
  if (pieces.size() == 1) return pieces[0];
  Example out;
  for (Tensor Example::*field : {&Example::data, &Example::target}) {
    std::vector<Tensor> parts;
    for (size_t p = 0; p < pieces.size(); ++p) {
      const Tensor& t = pieces[p].*field;
      const Tensor& first = pieces[0].*field;
      MINIDL_CHECK(
          t.defined() == first.defined() &&
              (!t.defined() ||
               (t.dtype() == first.dtype() && t.dim() == first.dim() && t.shape().size() > 0 &&
                std::equal(t.shape().begin() + 1, t.shape().end(), first.shape().begin() + 1))),
          "ConcatDataset: a batch spans datasets ", owners[0], " and ", owners[p],
          " whose samples differ: ", first.defined() ? first.shape_str() : "undefined", " vs ",
          t.defined() ? t.shape_str() : "undefined");
      if (t.defined()) parts.push_back(t);
    }
    if (!parts.empty()) out.*field = cat(parts, 0);
  }
  return out;
}

// ---- random_split

namespace {
// torch: math.isclose(sum(lengths), 1) and sum(lengths) <= 1 (rel_tol 1e-9)
bool is_unit_sum(double sum) {
  return std::abs(sum - 1.0) <= 1e-9 * std::max(1.0, std::abs(sum)) && sum <= 1.0;
}
}  // namespace

std::vector<int64_t> split_lengths(int64_t size, const std::vector<double>& fractions) {
  MINIDL_CHECK(!fractions.empty(), "random_split: no fractions given");
  double sum = 0;
  for (double f : fractions) sum += f;
  MINIDL_CHECK(is_unit_sum(sum), "random_split: fractions must sum to 1, got a sum of ", sum);
  std::vector<int64_t> lengths;
  for (size_t i = 0; i < fractions.size(); ++i) {
    MINIDL_CHECK(fractions[i] >= 0 && fractions[i] <= 1, "Fraction at index ", i,
                 " is not between 0 and 1");
    lengths.push_back(int64_t(std::floor(double(size) * fractions[i])));
  }
  const int64_t remainder = size - std::accumulate(lengths.begin(), lengths.end(), int64_t(0));
  for (int64_t i = 0; i < remainder; ++i) lengths[size_t(i) % lengths.size()] += 1;
  return lengths;
}

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<int64_t>& lengths,
                                                  uint64_t seed) {
  MINIDL_CHECK(dataset != nullptr, "random_split: dataset is null");
  int64_t total = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    MINIDL_CHECK(lengths[i] >= 0, "random_split: length ", i, " is negative (", lengths[i], ")");
    total += lengths[i];
  }
  MINIDL_CHECK(total == dataset->size(),
               "Sum of input lengths does not equal the length of the input dataset! (lengths sum "
               "to ",
               total, ", the dataset has ", dataset->size(), " samples)");
  const std::vector<int64_t> perm = torch_randperm(total, seed);
  std::vector<std::shared_ptr<Subset>> out;
  int64_t offset = 0;
  for (int64_t len : lengths) {
    out.push_back(std::make_shared<Subset>(
        dataset, std::vector<int64_t>(perm.begin() + offset, perm.begin() + offset + len)));
    offset += len;
  }
  return out;
}

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& lengths,
                                                  uint64_t seed) {
  MINIDL_CHECK(dataset != nullptr, "random_split: dataset is null");
  const double sum = std::accumulate(lengths.begin(), lengths.end(), 0.0);
  if (is_unit_sum(sum)) {
    const std::vector<int64_t> counts = split_lengths(dataset->size(), lengths);
    for (size_t i = 0; i < counts.size(); ++i)
      if (counts[i] == 0)
        std::cerr << "minidl warning: random_split: length of split at index " << i
                  << " is 0. This might result in an empty dataset." << std::endl;
    return random_split(std::move(dataset), counts, seed);
  }
  std::vector<int64_t> counts;
  for (size_t i = 0; i < lengths.size(); ++i) {
    MINIDL_CHECK(std::isfinite(lengths[i]) && lengths[i] == std::floor(lengths[i]),
                 "random_split: lengths must be whole numbers, or fractions summing to 1; length ",
                 i, " is ", lengths[i], " and they sum to ", sum);
    counts.push_back(int64_t(lengths[i]));
  }
  return random_split(std::move(dataset), counts, seed);
}

}  // namespace minidl::data
