// Datasets: default batch collation (stack along a new dim 0), TensorDataset (rows of two
// tensors, batches gathered with index_select), Subset and TransformDataset.
#include "data/dataset.h"

#include <utility>

#include "data/transforms.h"
#include "tensor/error.h"
#include "autograd/ops.h"

namespace minidl::data {

namespace {

// Stacks one field (data or target) of every sample; all must agree with sample 0.
Tensor stack_field(const std::vector<Example>& samples, Tensor Example::*field, const char* name) {
  const Tensor& first = samples[0].*field;
  std::vector<Tensor> parts;
  parts.reserve(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    const Tensor& t = samples[i].*field;
    MINIDL_CHECK(t.defined() == first.defined(), "collate: sample ", i, " ", name, " is ",
                 t.defined() ? "defined" : "undefined", " but sample 0 ", name, " is ",
                 first.defined() ? "defined" : "undefined");
    if (!t.defined()) continue;
    MINIDL_CHECK(t.shape() == first.shape() && t.dtype() == first.dtype(), "collate: sample ", i,
                 " ", name, " has shape ", t.shape_str(), " dtype ", t.dtype(), " but sample 0 ",
                 name, " has shape ", first.shape_str(), " dtype ", first.dtype());
    parts.push_back(t);
  }
  return first.defined() ? stack(parts, 0) : Tensor();
}

void check_index(int64_t index, int64_t size, const char* what) {
  MINIDL_CHECK(index >= 0 && index < size, what, ": index ", index,
               " is out of range for a dataset of size ", size);
}

}  // namespace

Example collate(const std::vector<Example>& samples) {
  MINIDL_CHECK(!samples.empty(), "collate: no samples to stack");
  return {stack_field(samples, &Example::data, "data"),
          stack_field(samples, &Example::target, "target")};
}

Example Dataset::get_batch(const std::vector<int64_t>& indices, Generator& gen) const {
  std::vector<Example> samples;
  samples.reserve(indices.size());
  for (int64_t i : indices) samples.push_back(get(i, gen));
  return collate(samples);
}

// ---- TensorDataset

TensorDataset::TensorDataset(Tensor data, Tensor target)
    : data_(std::move(data)), target_(std::move(target)) {
  MINIDL_CHECK(data_.defined() && target_.defined(),
               "TensorDataset: data and target must be defined tensors");
  MINIDL_CHECK(data_.dim() >= 1 && target_.dim() >= 1,
               "TensorDataset: data and target need a sample dim 0, got shapes ", data_.shape_str(),
               " and ", target_.shape_str());
  MINIDL_CHECK(data_.size(0) == target_.size(0), "TensorDataset: size mismatch between data ",
               data_.shape_str(), " and target ", target_.shape_str(), " in dim 0");
}

int64_t TensorDataset::size() const {
  return data_.size(0);
}

Example TensorDataset::get(int64_t index, Generator& /*gen*/) const {
  check_index(index, size(), "TensorDataset");
  return {data_.select(0, index), target_.select(0, index)};
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices, Generator& /*gen*/) const {
  MINIDL_CHECK(!indices.empty(), "TensorDataset::get_batch: empty index list");
  for (int64_t i : indices) check_index(i, size(), "TensorDataset::get_batch");
  Tensor idx = tensor<int64_t>(indices).to(data_.device());
  Tensor tidx = target_.device() == data_.device() ? idx : idx.to(target_.device());
  return {index_select(data_, 0, idx), index_select(target_, 0, tidx)};
}

// ---- Subset

Subset::Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  MINIDL_CHECK(base_ != nullptr, "Subset: base dataset is null");
  const int64_t n = base_->size();
  for (size_t k = 0; k < indices_.size(); ++k)
    MINIDL_CHECK(indices_[k] >= 0 && indices_[k] < n, "Subset: indices[", k, "] = ", indices_[k],
                 " is out of range for a base dataset of size ", n);
}

int64_t Subset::size() const {
  return int64_t(indices_.size());
}

Example Subset::get(int64_t index, Generator& gen) const {
  check_index(index, size(), "Subset");
  return base_->get(indices_[size_t(index)], gen);
}

Example Subset::get_batch(const std::vector<int64_t>& indices, Generator& gen) const {
  std::vector<int64_t> mapped;
  mapped.reserve(indices.size());
  for (int64_t i : indices) {
    check_index(i, size(), "Subset::get_batch");
    mapped.push_back(indices_[size_t(i)]);
  }
  return base_->get_batch(mapped, gen);
}

// ---- TransformDataset

TransformDataset::TransformDataset(std::shared_ptr<const Dataset> base,
                                   std::shared_ptr<const Transform> transform)
    : base_(std::move(base)), transform_(std::move(transform)) {
  MINIDL_CHECK(base_ != nullptr, "TransformDataset: base dataset is null");
  MINIDL_CHECK(transform_ != nullptr, "TransformDataset: transform is null");
}

int64_t TransformDataset::size() const {
  return base_->size();
}

Example TransformDataset::get(int64_t index, Generator& gen) const {
  Example ex = base_->get(index, gen);
  ex.data = (*transform_)(ex.data, gen);
  return ex;
}

// The base gathers the batch, then the transform runs batched (random transforms draw per
// sample in batch order, so this equals transforming get(i) one by one for a single transform).
Example TransformDataset::get_batch(const std::vector<int64_t>& indices, Generator& gen) const {
  Example ex = base_->get_batch(indices, gen);
  ex.data = transform_->apply_batch(ex.data, gen);
  return ex;
}

}  // namespace minidl::data
