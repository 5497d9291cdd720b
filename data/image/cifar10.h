// torchvision.datasets.CIFAR10 from the binary version (cifar-10-binary.tar.gz unpacked):
// data_batch_1..5.bin (train) or test_batch.bin, each record 1 label byte + 3072 pixel bytes (1024
// R, 1024 G, 1024 B, row-major 32x32).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/transforms.h"

namespace minidl::data {

// `root` is the folder holding the .bin files, or its parent holding cifar-10-batches-bin/. get():
// data = transform(uint8 [3,32,32]) when a transform is given (end it with ToTensor()), else
// ToTensor's float32 [3,32,32] in [0,1]; target int64 []. Errors name the missing or truncated file
// and the expected names.
class CIFAR10 : public Dataset {
 public:
  CIFAR10(const std::string& root, bool train = true,
          std::shared_ptr<const Transform> transform = nullptr);
  int64_t size() const override { return int64_t(targets_.size()); }
  Example get(int64_t index, Generator& gen) const override;
  Example get_batch(const std::vector<int64_t>& indices, Generator& gen) const override;

  const std::vector<std::string>& classes() const { return classes_; }
  const std::vector<int64_t>& targets() const { return targets_; }
  const Tensor& images() const { return images_; }  // uint8 [N,3,32,32]

 private:
  std::shared_ptr<const Transform> transform_;
  std::vector<std::string> classes_;
  std::vector<int64_t> targets_;
  Tensor images_;
};

// Writes records in the binary format (tests, converters): images uint8 [N,3,32,32], labels in [0,
// 10).
void write_cifar10_batch(const std::string& path, const Tensor& images,
                         const std::vector<int64_t>& labels);

}  // namespace minidl::data
