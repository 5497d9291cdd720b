// Datasets: the map-style Dataset interface (size + get), TensorDataset, Subset, and
// TransformDataset (applies a per-sample Transform). Examples are (data, target) pairs.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/random.h"
#include "tensor/tensor.h"

namespace minidl::data {

// One sample, or (after collation) one batch: data:[...] target:[...] (batch dim first).
struct Example {
  Tensor data;
  Tensor target;
};

class Transform;

// A map-style dataset (torch.utils.data.Dataset with __len__/__getitem__). get() must be safe
// to call from several threads at once. `gen` is the per-batch generator the DataLoader hands
// to random transforms so results do not depend on the worker count; datasets without random
// transforms ignore it.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index, Generator& gen) const = 0;
  // A whole batch, collated: data:[B, ...], target:[B, ...]. The default stacks get(i) for each
  // index (in order, drawing from `gen` in that order); datasets override it to gather faster.
  virtual Example get_batch(const std::vector<int64_t>& indices, Generator& gen) const;
};

// Stacks samples along a new dim 0 (torch's default_collate for tensor pairs). Throws, naming
// the index of the first sample whose shape or dtype differs from sample 0's.
Example collate(const std::vector<Example>& samples);

// Samples are rows of `data` and `target` (dim 0 is the sample dim; sizes must agree).
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor data, Tensor target);
  int64_t size() const override;
  Example get(int64_t index, Generator& gen) const override;
  Example get_batch(const std::vector<int64_t>& indices, Generator& gen) const override;
  const Tensor& data() const { return data_; }
  const Tensor& target() const { return target_; }

 private:
  Tensor data_, target_;
};

// The samples of `base` at `indices` (torch.utils.data.Subset).
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  int64_t size() const override;
  Example get(int64_t index, Generator& gen) const override;
  Example get_batch(const std::vector<int64_t>& indices, Generator& gen) const override;

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

// `base` with a transform applied to each sample's data (like torchvision's transform=).
class TransformDataset : public Dataset {
 public:
  TransformDataset(std::shared_ptr<const Dataset> base, std::shared_ptr<const Transform> transform);
  int64_t size() const override;
  Example get(int64_t index, Generator& gen) const override;
  Example get_batch(const std::vector<int64_t>& indices, Generator& gen) const override;

 private:
  std::shared_ptr<const Dataset> base_;
  std::shared_ptr<const Transform> transform_;
};

}  // namespace minidl::data
