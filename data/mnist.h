// MNIST in the IDX format: reader for the standard files (raw or .gz), writer for the offline
// digits converter, and an MNIST dataset (images as f32 [N,1,28,28] in [0,1], labels int64 [N]).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace minidl::data {

// A decoded IDX file: dims (e.g. [N,28,28] or [N]) and the raw unsigned bytes.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;
};

// Reads an IDX file of unsigned bytes (type 0x08), raw or gzip-compressed (detected by content,
// whatever the name). Throws minidl::Error naming the file on: missing file, wrong magic (with a
// hint when the bytes look gzip-compressed or the name says .gz), truncated data (expected vs
// actual bytes), trailing garbage, or more dims than 4. Nothing is returned half-filled.
IdxArray read_idx(const std::string& path);
// The same checks on a file's contents already in memory; `source` names it in errors.
IdxArray parse_idx(std::vector<uint8_t> contents, const std::string& source);
// Writes an IDX file of unsigned bytes atomically (gzip when the path ends in .gz).
void write_idx(const std::string& path, const IdxArray& array);

enum class MnistSplit { train, test };

// Loads `<dir>/train-images-idx3-ubyte` + `train-labels-idx1-ubyte` (or t10k-…), each raw or
// with a .gz suffix. Errors list the expected file names and the command that fetches the
// offline digits (bash tools/fetch-mnist.sh); image/label count mismatches and dims other than
// 28x28 are errors.
class MnistDataset : public Dataset {
 public:
  MnistDataset(const std::string& dir, MnistSplit split);
  int64_t size() const override;
  Example get(int64_t index, Generator& gen) const override;
  Example get_batch(const std::vector<int64_t>& indices, Generator& gen) const override;
  const Tensor& images() const { return images_; }  // f32 [N,1,28,28], values k/255
  const Tensor& labels() const { return labels_; }  // int64 [N]

 private:
  Tensor images_, labels_;
};

// The file names MnistDataset looks for (without a .gz suffix).
std::string mnist_images_file(MnistSplit split);
std::string mnist_labels_file(MnistSplit split);

}  // namespace minidl::data
