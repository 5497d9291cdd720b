// Image files (data/image/) against PIL 9.4 and torchvision 0.14 (tools/golden/gen_images.py):
// every tiny PNG (1..16-bit, grey/alpha/palette/RGB(A), tRNS, Adam7) and JPEG (4:2:0, 4:2:2,
// 4:4:4, grey, progressive, CMYK, odd sizes) in every ImageReadMode equals PIL's bytes;
// read_image_info agrees; encode_png / encode_jpeg give torchvision's bytes and round trip; bad
// files (missing, empty, text, truncated, bad CRC) fail with one line naming the file.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data/image/image_io.h"
#include "golden.h"
#include "minidl.h"

using namespace minidl;
using namespace minidl::data;
using namespace testutil;
namespace fs = std::filesystem;

namespace {

const std::pair<const char*, ImageReadMode> kModes[] = {{"UNCHANGED", ImageReadMode::UNCHANGED},
                                                        {"GRAY", ImageReadMode::GRAY},
                                                        {"GRAY_ALPHA", ImageReadMode::GRAY_ALPHA},
                                                        {"RGB", ImageReadMode::RGB},
                                                        {"RGB_ALPHA", ImageReadMode::RGB_ALPHA}};

std::string image_path(const std::string& name) {
  return std::string(MINIDL_TEST_DATA_DIR) + "/images/" + name;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const uint8_t* p = c.data_ptr<uint8_t>();
  return std::vector<uint8_t>(p, p + c.numel());
}

// The generator's pattern: x[c,y,x] = (37x + 11y + 53c + 9((x*y) % 7)) % 256.
Tensor pattern(int64_t c, int64_t h, int64_t w) {
  Tensor t = empty({c, h, w}, DType::u8);
  uint8_t* p = t.data_ptr<uint8_t>();
  for (int64_t k = 0; k < c; ++k)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        *p++ = uint8_t((x * 37 + y * 11 + k * 53 + (x * y % 7) * 9) % 256);
  return t;
}

fs::path scratch_dir() {
  fs::path p = fs::temp_directory_path() / ("minidl_image_io_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

void write_raw(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
}

// The message of the minidl::Error `f` throws ("" if none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("image_io") {
  TEST_CASE("image_io: every file in every mode equals PIL's bytes") {
    const json& files = golden("golden_images.json")["files"];
    REQUIRE(files.size() >= 24);
    for (const auto& item : files.items()) {  // (no structured bindings: INFO captures them)
      const std::string name = item.key();
      const json& modes = item.value();
      const std::vector<uint8_t> raw = read_file(image_path(name));
      const std::string note = modes.contains("note") ? modes["note"].get<std::string>() : "";
      for (const auto& named : kModes) {
        const std::string mode_name = named.first;
        const ImageReadMode mode = named.second;
        INFO(name, " ", mode_name, " ", note);
        const json& g = modes[mode_name];
        const Tensor x = read_image(image_path(name), mode);
        CHECK(x.dtype() == DType::u8);
        CHECK(x.is_contiguous());
        REQUIRE(shape_str(x.shape()) == shape_str(g["shape"].get<Shape>()));
        CHECK(bytes_of(x) == g["data"].get<std::vector<uint8_t>>());
        CHECK(bytes_of(decode_image(raw.data(), raw.size(), mode)) == bytes_of(x));
      }
      const ImageInfo info = read_image_info(image_path(name));
      const Shape unchanged = modes["UNCHANGED"]["shape"].get<Shape>();
      CHECK(Shape{info.channels, info.height, info.width} == unchanged);
      CHECK(info.format == (name.find(".png") != std::string::npos ? "png" : "jpeg"));
    }
  }

  TEST_CASE("image_io: encode_png and encode_jpeg give torchvision's bytes") {
    const json& enc = golden("golden_images.json")["encode"];
    for (int64_t c : {1, 3})
      for (int level : {0, 6, 9}) {
        INFO("png c=", c, " level=", level);
        const auto want = enc["png_c" + std::to_string(c) + "_level" + std::to_string(level)];
        CHECK(encode_png(pattern(c, 11, 17), level) == want.get<std::vector<uint8_t>>());
      }
    for (const std::pair<int, int>& cq : {std::pair{1, 75}, {3, 75}, {3, 95}, {3, 10}}) {
      const int c = cq.first, q = cq.second;
      INFO("jpeg c=", c, " quality=", q);
      const auto want = enc["jpeg_c" + std::to_string(c) + "_quality" + std::to_string(q)];
      CHECK(encode_jpeg(pattern(c, 11, 17), q) == want.get<std::vector<uint8_t>>());
    }
  }

  TEST_CASE("image_io: PNG round trips exactly, JPEG at quality 95 within a few levels") {
    const fs::path dir = scratch_dir();
    for (int64_t c = 1; c <= 4; ++c) {
      INFO("channels ", c);
      const Tensor x = pattern(c, 9, 13);
      const std::vector<uint8_t> png = encode_png(x);
      CHECK(bytes_of(decode_png(png.data(), png.size())) == bytes_of(x));
      // A non-contiguous view ([C,W,H] transposed) encodes what it shows.
      const Tensor xt = pattern(c, 13, 9).transpose(1, 2);
      const std::vector<uint8_t> png_t = encode_png(xt, 0);
      CHECK(bytes_of(decode_image(png_t.data(), png_t.size())) == bytes_of(xt));
      const std::string p = (dir / ("rt" + std::to_string(c) + ".png")).string();
      write_png(x, p, 9);
      CHECK(bytes_of(read_image(p)) == bytes_of(x));
    }
    for (int64_t c : {1, 3}) {
      INFO("jpeg channels ", c);
      // A smooth image: JPEG's loss is in the high frequencies.
      Tensor x = empty({c, 11, 17}, DType::u8);
      uint8_t* p = x.data_ptr<uint8_t>();
      for (int64_t k = 0; k < c; ++k)
        for (int64_t y = 0; y < 11; ++y)
          for (int64_t i = 0; i < 17; ++i) *p++ = uint8_t(20 + 7 * i + 5 * y + 30 * k);
      const std::string path = (dir / ("rt" + std::to_string(c) + ".jpg")).string();
      write_jpeg(x, path, 95);
      const Tensor y = read_image(path);
      REQUIRE(y.shape() == x.shape());
      const std::vector<uint8_t> a = bytes_of(x), b = bytes_of(y);
      int worst = 0;
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
      CHECK(worst <= 6);
    }
    fs::remove_all(dir);
  }

  TEST_CASE("image_io: bad files fail with one line naming the file") {
    const fs::path dir = scratch_dir();
    auto check_bad = [](const std::string& path, const std::string& reason) {
      INFO(path);
      const std::string msg = error_of([&] { read_image(path); });
      CHECK(msg.rfind("read_image: " + path + ": ", 0) == 0);
      CHECK(msg.find(reason) != std::string::npos);
      CHECK(msg.find('\n') == std::string::npos);
    };
    check_bad((dir / "missing.png").string(), "No such file");
    write_raw(dir / "empty.png", {});
    check_bad((dir / "empty.png").string(), "empty file");
    write_raw(dir / "text.png", {'h', 'e', 'l', 'l', 'o', '\n'});
    check_bad((dir / "text.png").string(), "not a JPEG or PNG file");
    write_raw(dir / "anim.gif", {'G', 'I', 'F', '8', '9', 'a', 0, 0});
    check_bad((dir / "anim.gif").string(), "GIF files are not supported");

    std::vector<uint8_t> jpg = read_file(image_path("rgb420.jpg"));
    jpg.resize(jpg.size() * 2 / 3);
    write_raw(dir / "truncated.jpg", jpg);
    check_bad((dir / "truncated.jpg").string(), "JPEG: Premature end of JPEG file");
    std::vector<uint8_t> prog = read_file(image_path("progressive.jpg"));
    prog.resize(prog.size() / 2);
    write_raw(dir / "truncated_progressive.jpg", prog);
    check_bad((dir / "truncated_progressive.jpg").string(), "JPEG: Premature end of JPEG file");

    std::vector<uint8_t> png = read_file(image_path("rgb8.png"));
    std::vector<uint8_t> crc = png;
    crc[29] ^= 0x55;  // the IHDR chunk's CRC (bytes 29..32)
    write_raw(dir / "bad_crc.png", crc);
    check_bad((dir / "bad_crc.png").string(), "PNG: IHDR: CRC error");
    png.resize(png.size() - 40);  // into the IDAT data
    write_raw(dir / "truncated.png", png);
    check_bad((dir / "truncated.png").string(), "PNG: ");
    CHECK(error_of([&] {
            read_image_info((dir / "text.png").string());
          }).rfind("read_image_info: " + (dir / "text.png").string() + ": not a JPEG", 0) == 0);
    CHECK(error_of([&] { read_file((dir / "nope").string()); }) ==
          "read_file: " + (dir / "nope").string() + ": No such file or directory");
    fs::remove_all(dir);
  }

  TEST_CASE("image_io: decoders and encoders reject what they cannot do") {
    const std::vector<uint8_t> jpg = read_file(image_path("gray.jpg"));
    CHECK(error_of([&] { decode_png(jpg.data(), jpg.size(), ImageReadMode::RGB, "x.jpg"); }) ==
          "decode_png: x.jpg: not a PNG file (no PNG signature)");
    CHECK(error_of([&] {
            decode_jpeg(jpg.data(), 100);
          }).rfind("decode_jpeg: <memory>: JPEG: ", 0) == 0);
    CHECK(error_of([] { encode_jpeg(pattern(2, 4, 4)); }).find("1 or 3 channels") !=
          std::string::npos);
    CHECK(error_of([] { encode_png(pattern(5, 4, 4)); }).find("1 to 4 channels") !=
          std::string::npos);
    CHECK(error_of([] {
            encode_png(zeros({3, 4, 4}));
          }).find("uint8 [C,H,W]") != std::string::npos);
    CHECK(error_of([] { encode_png(pattern(1, 4, 4), 10); }).find("0 to 9") != std::string::npos);
    CHECK(error_of([] { encode_jpeg(pattern(1, 4, 4), 0); }).find("1 to 100") != std::string::npos);
    CHECK(error_of([] { encode_png(pattern(1, 0, 4)); }).find("bad image size") !=
          std::string::npos);
    const std::string bad_dir = "/nonexistent-dir/x.png";
    CHECK(error_of([&] { write_png(pattern(1, 2, 2), bad_dir); }) ==
          "write_png: " + bad_dir + ": No such file or directory");
  }
}
