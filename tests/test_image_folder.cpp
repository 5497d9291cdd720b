// ImageFolder against torchvision 0.14 on a generated tree (tools/golden/gen_image_folder.py:
// mixed-case classes, nested folders, skipped files), decoding through get() with and without a
// transform, its errors; CIFAR10's binary batches written and read back.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "data/image/cifar10.h"
#include "data/image/image_folder.h"
#include "data/image/image_io.h"
#include "data/image/image_transforms.h"
#include "dist_test_util.h"
#include "golden.h"
#include "minidl.h"

using namespace minidl;
using namespace testutil;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("minidl_imgfolder_" + std::to_string(getpid()) + "_" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

void write_text(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << s;
}

// A 3x4 RGB image whose pixels encode `seed`.
Tensor pattern(int seed) {
  Tensor x = empty({3, 3, 4}, DType::u8);
  uint8_t* p = x.data_ptr<uint8_t>();
  for (int i = 0; i < 36; ++i) p[i] = uint8_t((i * 7 + seed * 31) % 256);
  return x;
}

// write_png into a folder created first (write_png, like torchvision's, creates none).
void write_png_in(const Tensor& x, const fs::path& p) {
  fs::create_directories(p.parent_path());
  data::write_png(x, p.string());
}

// fn must throw a minidl::Error whose message contains `part`.
void expect_error(const std::function<void()>& fn, const std::string& part) {
  const std::string message = disttest::expect_error(fn).message;
  CHECK_MESSAGE(disttest::contains(message, part), message);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TEST_SUITE("image_folder") {
  TEST_CASE("ImageFolder: classes and samples in torchvision's order") {
    const json& g = golden("golden_image_folder.json");
    TempDir dir;
    int seed = 0;
    for (const std::string& rel : g["files"].get<std::vector<std::string>>()) {
      const fs::path p = dir.path / rel;
      if (ends_with(rel, ".png")) {
        fs::create_directories(p.parent_path());
        data::write_png(pattern(seed++), p.string());
      } else {
        write_text(p, "not an image");
      }
    }
    data::ImageFolder ds(dir.path.string());
    CHECK(ds.classes() == g["classes"].get<std::vector<std::string>>());
    for (const auto& [name, idx] : g["class_to_idx"].items())
      CHECK(ds.class_to_idx().at(name) == idx);
    const auto& want = g["samples"];
    REQUIRE(ds.size() == int64_t(want.size()));
    for (size_t i = 0; i < want.size(); ++i) {
      CHECK(fs::relative(ds.samples()[i].first, dir.path).string() ==
            want[i][0].get<std::string>());
      CHECK(ds.samples()[i].second == want[i][1].get<int64_t>());
      CHECK(ds.targets()[i] == want[i][1].get<int64_t>());
    }
  }

  TEST_CASE(
      "ImageFolder: get() decodes RGB to ToTensor's floats, or runs the "
      "transform") {
    TempDir dir;
    write_png_in(pattern(3), dir.path / "b" / "one.png");
    write_png_in(pattern(5), dir.path / "a" / "two.png");
    write_text(dir.path / "a" / "skip.txt", "x");
    data::ImageFolder ds(dir.path.string());
    REQUIRE(ds.size() == 2);
    Generator gen(1);
    data::Example e = ds.get(1, gen);  // b/one.png, class 1
    CHECK(e.data.dtype() == DType::f32);
    CHECK(e.data.shape() == Shape{3, 3, 4});
    CHECK(e.target.item<int64_t>() == 1);
    Tensor want = pattern(3).to(kFloat32) / 255.0;
    CHECK(max(abs(e.data - want)).item<double>() == 0.0);
    // A transform receives the uint8 image.
    struct Crop : data::Transform {
      Tensor operator()(const Tensor& x, Generator&) const override {
        CHECK(x.dtype() == DType::u8);
        return data::to_tensor(x.narrow(2, 1, 2));
      }
    };
    data::ImageFolder cropped(dir.path.string(), std::make_shared<Crop>());
    CHECK(max(abs(cropped.get(1, gen).data - want.narrow(2, 1, 2))).item<double>() == 0.0);
    // Batches through the loader: [B,3,3,4] and int64 [B].
    data::DataLoader loader(std::make_shared<data::ImageFolder>(dir.path.string()),
                            {.batch_size = 2, .num_workers = 1});
    for (data::Example& b : loader.epoch(0)) {
      CHECK(b.data.shape() == Shape{2, 3, 3, 4});
      CHECK(b.target.shape() == Shape{2});
    }
  }

  TEST_CASE("ImageFolder: errors name the folder, the classes and the file") {
    TempDir dir;
    expect_error([&] { data::ImageFolder((dir.path / "missing").string()); }, "is not a directory");
    expect_error([&] { data::ImageFolder(dir.path.string()); }, "any class folder");
    write_text(dir.path / "cats" / "a.txt", "x");
    write_png_in(pattern(1), dir.path / "dogs" / "d.png");
    expect_error([&] { data::ImageFolder(dir.path.string()); },
                 "no valid file for the classes cats");
    write_text(dir.path / "cats" / "broken.png", "this is text, not a PNG");
    data::ImageFolder ds(dir.path.string());
    Generator gen(0);
    expect_error([&] { ds.get(0, gen); }, "broken.png");
    expect_error([&] { ds.get(2, gen); }, "out of range");
  }

  TEST_CASE("CIFAR10: binary batches read back, train and test, nested folder") {
    TempDir dir;
    const fs::path bins = dir.path / "cifar-10-batches-bin";
    fs::create_directories(bins);
    Tensor all = randint(0, 256, {12, 3, 32, 32}).to(DType::u8);
    std::vector<int64_t> labels = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
    for (int b = 0; b < 5; ++b)  // two records per train batch
      data::write_cifar10_batch((bins / ("data_batch_" + std::to_string(b + 1) + ".bin")).string(),
                                all.narrow(0, 2 * b, 2), {labels[2 * b], labels[2 * b + 1]});
    data::write_cifar10_batch((bins / "test_batch.bin").string(), all.narrow(0, 10, 2),
                              {labels[10], labels[11]});
    data::CIFAR10 train(dir.path.string(), true), test(bins.string(), false);
    REQUIRE(train.size() == 10);
    REQUIRE(test.size() == 2);
    CHECK(train.classes()[3] == "cat");
    Generator gen(0);
    for (int64_t i = 0; i < 10; ++i) {
      data::Example e = train.get(i, gen);
      CHECK(e.target.item<int64_t>() == labels[size_t(i)]);
      CHECK(max(abs(e.data - all[i].to(kFloat32) / 255.0)).item<double>() == 0.0);
    }
    data::Example batch = test.get_batch({1, 0}, gen);
    CHECK(batch.data.shape() == Shape{2, 3, 32, 32});
    CHECK(batch.target[0].item<int64_t>() == labels[11]);
    CHECK(max(abs(batch.data[0] - all[11].to(kFloat32) / 255.0)).item<double>() == 0.0);
    // Truncated and missing files.
    std::ofstream(bins / "test_batch.bin", std::ios::binary | std::ios::app) << "xyz";
    expect_error([&] { data::CIFAR10(bins.string(), false); }, "truncated");
    fs::remove(bins / "data_batch_3.bin");
    expect_error([&] { data::CIFAR10(bins.string(), true); }, "data_batch_3.bin");
  }
}
