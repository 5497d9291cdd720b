// CIFAR-10 binary batches: read every record of the split's files into one uint8 tensor, hand out
// samples as ToTensor's floats (or through the transform), write batches for tests.
#include "data/image/cifar10.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/image/image_transforms.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace minidl::data {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kPixels = 3 * 32 * 32, kRecord = 1 + kPixels;

std::vector<std::string> split_files(bool train) {
  if (!train) return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  return names;
}

fs::path batches_dir(const std::string& root, const std::string& first_file) {
  const fs::path nested = fs::path(root) / "cifar-10-batches-bin";
  std::error_code ec;
  if (!fs::exists(fs::path(root) / first_file, ec) && fs::is_directory(nested, ec)) return nested;
  return fs::path(root);
}

}  // namespace

CIFAR10::CIFAR10(const std::string& root, bool train, std::shared_ptr<const Transform> transform)
    : transform_(std::move(transform)),
      classes_({"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                "truck"}) {
  const std::vector<std::string> names = split_files(train);
  const fs::path dir = batches_dir(root, names[0]);
  std::vector<std::string> contents;
  int64_t records = 0;
  for (const std::string& name : names) {
    const fs::path p = dir / name;
    std::ifstream f(p, std::ios::binary);
    MINIDL_CHECK(f.good(), "CIFAR10: cannot open '", p.string(), "' (the ",
                 train ? "train" : "test", " split needs ",
                 names.size() == 1 ? names[0] : "data_batch_1..5.bin",
                 " from cifar-10-binary.tar.gz in '", root, "' or its cifar-10-batches-bin/)");
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    MINIDL_CHECK(!bytes.empty() && int64_t(bytes.size()) % kRecord == 0, "CIFAR10: '", p.string(),
                 "' holds ", bytes.size(), " bytes, not a whole number of ", kRecord,
                 "-byte records (truncated or not the binary version?)");
    records += int64_t(bytes.size()) / kRecord;
    contents.push_back(std::move(bytes));
  }
  images_ = empty({records, 3, 32, 32}, DType::u8);
  uint8_t* out = images_.data_ptr<uint8_t>();
  targets_.reserve(size_t(records));
  for (size_t fi = 0; fi < contents.size(); ++fi) {
    const std::string& bytes = contents[fi];
    for (size_t r = 0; r * size_t(kRecord) < bytes.size(); ++r) {
      const uint8_t* rec = reinterpret_cast<const uint8_t*>(bytes.data()) + r * size_t(kRecord);
      MINIDL_CHECK(rec[0] < 10, "CIFAR10: '", (dir / names[fi]).string(), "' record ", r,
                   " has label ", int(rec[0]), ", expected 0..9");
      targets_.push_back(rec[0]);
      std::memcpy(out, rec + 1, size_t(kPixels));
      out += kPixels;
    }
  }
}

Example CIFAR10::get(int64_t index, Generator& gen) const {
  MINIDL_CHECK(index >= 0 && index < size(), "CIFAR10: index ", index, " out of range for ", size(),
               " samples");
  Tensor image = images_[index].clone();  // uint8 [3,32,32]; a copy a transform may modify
  Tensor data = transform_ ? (*transform_)(image, gen) : to_tensor(image);
  return {data, scalar_tensor(targets_[size_t(index)], DType::i64)};
}

Example CIFAR10::get_batch(const std::vector<int64_t>& indices, Generator& gen) const {
  if (transform_) return Dataset::get_batch(indices, gen);
  // No transform: gather the records and convert once.
  Tensor batch = empty({int64_t(indices.size()), 3, 32, 32}, DType::u8);
  Tensor target = empty({int64_t(indices.size())}, DType::i64);
  uint8_t* out = batch.data_ptr<uint8_t>();
  int64_t* t = target.data_ptr<int64_t>();
  const uint8_t* all = images_.data_ptr<uint8_t>();
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    MINIDL_CHECK(i >= 0 && i < size(), "CIFAR10: index ", i, " out of range for ", size(),
                 " samples");
    std::memcpy(out + int64_t(k) * kPixels, all + i * kPixels, size_t(kPixels));
    t[k] = targets_[size_t(i)];
  }
  return {to_tensor(batch), target};
}

void write_cifar10_batch(const std::string& path, const Tensor& images,
                         const std::vector<int64_t>& labels) {
  MINIDL_CHECK(images.dtype() == DType::u8 && images.dim() == 4 && images.size(1) == 3 &&
                   images.size(2) == 32 && images.size(3) == 32,
               "write_cifar10_batch: images must be uint8 [N,3,32,32], got ",
               dtype_name(images.dtype()), " ", images.shape_str());
  MINIDL_CHECK(int64_t(labels.size()) == images.size(0), "write_cifar10_batch: ", labels.size(),
               " labels for ", images.size(0), " images");
  Tensor src = images.contiguous();
  const uint8_t* px = src.data_ptr<uint8_t>();
  std::ofstream f(path, std::ios::binary);
  MINIDL_CHECK(f.good(), "write_cifar10_batch: cannot write '", path, "'");
  for (size_t i = 0; i < labels.size(); ++i) {
    MINIDL_CHECK(labels[i] >= 0 && labels[i] < 10, "write_cifar10_batch: label ", labels[i], " at ",
                 i, " is not in 0..9");
    const char label = char(labels[i]);
    f.write(&label, 1);
    f.write(reinterpret_cast<const char*>(px + int64_t(i) * kPixels), kPixels);
  }
  MINIDL_CHECK(f.good(), "write_cifar10_batch: writing '", path, "' failed");
}

}  // namespace minidl::data
