// Sample transforms (torchvision.transforms for image tensors x:[C,H,W]): Normalize,
// RandomCrop with zero padding, RandomAffine-free by design, and Compose. Random transforms
// draw from the generator they are given, so the DataLoader controls reproducibility.
#pragma once
#include <memory>
#include <vector>

#include "tensor/random.h"
#include "tensor/tensor.h"

namespace minidl::data {

class Transform {
 public:
  virtual ~Transform() = default;
  virtual Tensor operator()(const Tensor& x, Generator& gen) const = 0;
  // Batched form, x:[B,C,H,W] -> [B,...]; the default applies operator() per sample in order.
  virtual Tensor apply_batch(const Tensor& x, Generator& gen) const;
};

// (x - mean[c]) / std[c] per channel; x:[C,H,W] or [B,C,H,W], floating point. One value of
// mean/std broadcasts over all channels.
class Normalize : public Transform {
 public:
  Normalize(std::vector<double> mean, std::vector<double> std);
  Tensor operator()(const Tensor& x, Generator& gen) const override;
  Tensor apply_batch(const Tensor& x, Generator& gen) const override;

 private:
  std::vector<double> mean_, std_;
};

// Pads by `padding` zeros on each side, then crops a random size x size window
// (torchvision.transforms.RandomCrop(size, padding)). x:[C,H,W] -> [C,size,size].
class RandomCrop : public Transform {
 public:
  RandomCrop(int64_t size, int64_t padding = 0);
  Tensor operator()(const Tensor& x, Generator& gen) const override;

 private:
  int64_t size_, padding_;
};

// Applies transforms in order.
class Compose : public Transform {
 public:
  explicit Compose(std::vector<std::shared_ptr<const Transform>> transforms);
  Tensor operator()(const Tensor& x, Generator& gen) const override;
  Tensor apply_batch(const Tensor& x, Generator& gen) const override;

 private:
  std::vector<std::shared_ptr<const Transform>> transforms_;
};

}  // namespace minidl::data
