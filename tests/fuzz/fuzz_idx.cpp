// Fuzz target of the MNIST IDX reader: the input as one IDX file (raw or gzip), and split into
// an images file and a labels file (u16 LE length of the first, then both) for MnistDataset.
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "data/mnist.h"
#include "fuzz_targets.h"
#include "tensor/error.h"

namespace minidl::fuzz {
namespace {

// A parsed array must be self-consistent: its dims' product is its byte count.
void parse_one(const uint8_t* data, size_t size) {
  try {
    data::IdxArray a = data::parse_idx(std::vector<uint8_t>(data, data + size), "<fuzz>");
    int64_t numel = 1;
    for (int64_t d : a.dims) numel *= d;
    if (a.dims.empty() || a.dims.size() > 4 || numel != int64_t(a.bytes.size()))
      throw std::logic_error("fuzz_idx: parse_idx returned inconsistent dims and bytes");
  } catch (const Error&) {
  }
}

}  // namespace

int fuzz_idx(const uint8_t* data, size_t size) {
  parse_one(data, size);
  if (size < 2) return 0;
  const size_t first = std::min<size_t>(data[0] | size_t(data[1]) << 8, size - 2);
  const uint8_t* images = data + 2;
  const uint8_t* labels = images + first;
  const size_t nlabels = size - 2 - first;
  parse_one(images, first);
  parse_one(labels, nlabels);

  const std::string img =
      write_scratch(data::mnist_images_file(data::MnistSplit::train), images, first);
  write_scratch(data::mnist_labels_file(data::MnistSplit::train), labels, nlabels);
  try {
    data::MnistDataset ds(std::filesystem::path(img).parent_path().string(),
                          data::MnistSplit::train);
    const int64_t n = ds.size();
    if (ds.images().shape() != Shape{n, 1, 28, 28} || ds.labels().shape() != Shape{n})
      throw std::logic_error("fuzz_idx: MnistDataset tensors disagree with its size");
    Generator gen(0);
    if (n > 0) {
      data::Example e = ds.get_batch({0, n - 1}, gen);
      if (e.target.shape() != Shape{2}) throw std::logic_error("fuzz_idx: bad batch shape");
    }
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace minidl::fuzz
