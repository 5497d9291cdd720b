// data/image transforms against torchvision 0.14.1 (tests/data/golden_image_transforms.json,
// tools/golden/gen_image_transforms.py): resize in every mode and direction, resized_crop,
// center_crop, color ops and dtype conversion on float32 and uint8 images; properties of the
// random transforms (bounds, reproducibility per generator, flip frequency, jitter ranges).
#include <doctest/doctest.h>

#include <set>

#include "data/image/image_transforms.h"
#include "golden.h"
#include "test_util.h"

using namespace minidl;
using namespace minidl::data;
using testutil::check_close;
using testutil::golden;
using testutil::to_f64;

namespace {

const char* kGolden = "golden_image_transforms.json";

// uint8 resize: a pixel whose float value lands within an ulp of x.5 may round the other way when
// the compiler contracts a*b+c into an FMA differently from torch's build (it varies with the
// optimization level and the CPU's ISA: a -O1 sanitizer build, a build without FMA). The Release
// build on an FMA host matched torchvision exactly; every build stays within 1% off by one.
constexpr int64_t kResizeSlackPercent = 1;

// The generator's inputs: h = ((i + 1) * 2654435761 + salt) mod 2^32; uint8 h >> 24, float
// (h >> 8) / 2^24.
Tensor hashed_image(const Shape& shape, uint32_t salt, DType dt) {
  Tensor x = empty(shape, dt);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const uint32_t h = uint32_t(uint64_t(i + 1) * 2654435761ull + salt);
    if (dt == kUInt8)
      x.data_ptr<uint8_t>()[i] = uint8_t(h >> 24);
    else
      x.data_ptr<float>()[i] = float(h >> 8) / 16777216.0f;
  }
  return x;
}

// uint8 results: equal to torchvision's except off-by-one where a rounding tie (x.5 after
// float rounding) may go the other way; at most `max_off` of those.
void check_u8(const Tensor& y, const testutil::json& g, int64_t max_off = 0) {
  REQUIRE(y.dtype() == kUInt8);
  REQUIRE(y.shape() == g["shape"].get<Shape>());
  const auto a = to_f64(y);
  const auto e = testutil::golden_values(g);
  int64_t off = 0, bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == e[i]) continue;
    (std::abs(a[i] - e[i]) == 1 ? off : bad)++;
  }
  INFO("shape ", y.shape_str(), ": ", off, " off by one, ", bad, " further off");
  CHECK(bad == 0);
  CHECK(off <= max_off);
}

void check_f32(const Tensor& y, const testutil::json& g) {
  REQUIRE(y.dtype() == kFloat32);
  REQUIRE(y.shape() == g["shape"].get<Shape>());
  check_close(y, testutil::golden_values(g), 0, 2e-3);
}

InterpolationMode mode_of(const std::string& name) {
  return name.starts_with("cubic")     ? InterpolationMode::BICUBIC
         : name.starts_with("nearest") ? InterpolationMode::NEAREST
                                       : InterpolationMode::BILINEAR;
}

}  // namespace

TEST_SUITE("image_transforms") {
  TEST_CASE("resize: every mode, down, up and mixed, float32 and uint8 as torchvision") {
    const auto& g = golden(kGolden);
    const Tensor xf = hashed_image({3, 23, 17}, 12345, kFloat32);
    const Tensor xu = hashed_image({3, 23, 17}, 12345, kUInt8);
    Generator gen(0);
    const std::vector<std::string> names = {
        "down2",        "down_frac", "up",         "up_down",  "shorter12",        "shorter20",
        "plain_down",   "plain_up",  "cubic_down", "cubic_up", "cubic_plain_down", "cubic_plain_up",
        "nearest_down", "nearest_up"};
    for (const auto& name : names) {
      CAPTURE(name);
      const bool aa = !name.starts_with("plain") && !name.starts_with("cubic_plain");
      const InterpolationMode mode = mode_of(name);
      const auto& gu = g["resize_" + name + "_u8"];
      const Shape shape = gu["shape"].get<Shape>();
      Tensor yu, yf;
      if (name.starts_with("shorter")) {  // Resize(int): shorter side, torchvision's size rule
        Resize r(std::stoll(name.substr(7)), mode);
        yu = r(xu, gen);
        yf = r(xf, gen);
      } else {
        yu = resize(xu, shape[1], shape[2], mode, aa);
        yf = resize(xf, shape[1], shape[2], mode, aa);
      }
      check_u8(yu, gu, yu.numel() * kResizeSlackPercent / 100);
      if (mode != InterpolationMode::NEAREST) check_f32(yf, g["resize_" + name + "_f32"]);
    }
  }

  TEST_CASE("resize: float64, non-contiguous and batched inputs agree with float32") {
    const Tensor xf = hashed_image({3, 23, 17}, 12345, kFloat32);
    const Tensor y = resize(xf, 9, 7);
    check_close(resize(xf.to(kFloat64), 9, 7), y, 0, 1e-5);
    check_close(resize(testutil::noncontiguous(xf), 9, 7), y, 0, 0);
    check_close(resize(xf.narrow(1, 0, 23), 9, 7), y, 0, 0);
    const Tensor batch = stack({xf, hflip(xf)}, 0);  // [2,3,23,17]
    const Tensor yb = resize(batch, 9, 7);
    CHECK(yb.shape() == Shape{2, 3, 9, 7});
    check_close(yb[0], y, 0, 0);
    check_close(yb[1], resize(hflip(xf), 9, 7), 0, 0);
    check_close(resize(xf, 23, 17), xf, 0, 0);  // same size: identity
    Generator gen(0);
    CHECK(Resize(12).apply_batch(batch, gen).shape() == Shape{2, 3, 16, 12});
    // Tiny and odd sizes (the scalar edges of the 8x8 / 16-row blocks): f32 equals f64.
    for (auto [h, w, oh, ow] : std::vector<std::array<int64_t, 4>>{
             {5, 4, 7, 6}, {1, 1, 3, 2}, {40, 3, 9, 20}, {17, 33, 16, 8}}) {
      CAPTURE(h);
      CAPTURE(w);
      const Tensor s = hashed_image({2, h, w}, 99, kFloat32);
      for (auto mode : {InterpolationMode::BILINEAR, InterpolationMode::BICUBIC})
        for (bool aa : {true, false})
          check_close(resize(s, oh, ow, mode, aa), resize(s.to(kFloat64), oh, ow, mode, aa), 0,
                      1e-5);
    }
  }

  TEST_CASE("resized_crop: fused window equals torchvision's crop + resize") {
    const auto& g = golden(kGolden);
    const Tensor xf = hashed_image({3, 23, 17}, 12345, kFloat32);
    const Tensor xu = hashed_image({3, 23, 17}, 12345, kUInt8);
    check_f32(resized_crop(xf, 3, 2, 15, 11, 7, 9), g["resized_crop_f32"]);
    check_u8(resized_crop(xu, 3, 2, 15, 11, 7, 9), g["resized_crop_u8"],
             189 * kResizeSlackPercent / 100);
    // A window partly outside the image: zero padding first, like F.crop.
    const Tensor y = resized_crop(xf, -2, 10, 8, 9, 4, 5);
    check_close(y, resize(crop(xf, -2, 10, 8, 9), 4, 5), 0, 0);
  }

  TEST_CASE("center_crop: half-to-even offsets and zero padding") {
    const auto& g = golden(kGolden);
    const Tensor xu = hashed_image({3, 23, 17}, 12345, kUInt8);
    Generator gen(0);
    for (auto [h, w] :
         std::vector<std::pair<int64_t, int64_t>>{{10, 8}, {11, 9}, {26, 20}, {25, 9}, {23, 17}}) {
      CAPTURE(h);
      CAPTURE(w);
      const auto& e = g["center_crop_" + std::to_string(h) + "x" + std::to_string(w)];
      check_u8(center_crop(xu, h, w), e);
      check_u8(CenterCrop(h, w)(xu, gen), e);
    }
  }

  TEST_CASE("hflip, vflip and crop") {
    const Tensor x = arange(0, 24, 1, kFloat32).reshape({2, 3, 4});
    std::vector<double> h, v;
    for (int c = 0; c < 2; ++c)
      for (int r = 0; r < 3; ++r)
        for (int k = 0; k < 4; ++k) {
          h.push_back(c * 12 + r * 4 + 3 - k);
          v.push_back(c * 12 + (2 - r) * 4 + k);
        }
    check_close(hflip(x), h, 0, 0);
    check_close(vflip(x), v, 0, 0);
    check_close(hflip(x.to(kUInt8)), h, 0, 0);
    check_close(hflip(x.to(kFloat64).narrow(2, 0, 4)), h, 0, 0);
    check_close(crop(x, 1, 1, 2, 2), {5, 6, 9, 10, 17, 18, 21, 22}, 0, 0);
    check_close(crop(x, -1, 3, 2, 2), {0, 0, 3, 0, 0, 0, 15, 0}, 0, 0);
  }

  TEST_CASE("color ops: brightness, contrast, saturation, hue, grayscale as torchvision") {
    const auto& g = golden(kGolden);
    const Tensor cf = hashed_image({3, 10, 9}, 777, kFloat32);
    const Tensor cu = hashed_image({3, 10, 9}, 777, kUInt8);
    using Fn = Tensor (*)(const Tensor&, double);
    const std::vector<std::tuple<std::string, Fn, double, double>> ops = {
        {"brightness", adjust_brightness, 0.6, 1.7},
        {"contrast", adjust_contrast, 0.5, 1.8},
        {"saturation", adjust_saturation, 0.3, 2.0},
        {"hue", adjust_hue, -0.3, 0.1}};
    for (const auto& [name, fn, f0, f1] : ops) {
      for (int k = 0; k < 2; ++k) {
        CAPTURE(name);
        CAPTURE(k);
        const double f = k == 0 ? f0 : f1;
        check_f32(fn(cf, f), g[name + std::to_string(k) + "_f32"]);
        check_u8(fn(cu, f), g[name + std::to_string(k) + "_u8"]);
      }
    }
    check_f32(rgb_to_grayscale(cf), g["grayscale_f32"]);
    check_u8(rgb_to_grayscale(cu), g["grayscale_u8"]);
    CHECK(rgb_to_grayscale(cf, 3).shape() == Shape{3, 10, 9});
    CHECK_THROWS_WITH_AS(adjust_hue(cf, 0.7), doctest::Contains("[-0.5, 0.5]"), Error);
    CHECK_THROWS_WITH_AS(adjust_contrast(cf, -1), doctest::Contains("non-negative"), Error);
    CHECK_THROWS_WITH_AS(adjust_saturation(zeros({2, 4, 4}), 1.0), doctest::Contains("channels"),
                         Error);
  }

  TEST_CASE("convert_image_dtype and ToTensor") {
    const auto& g = golden(kGolden);
    const Tensor xf = hashed_image({3, 23, 17}, 12345, kFloat32);
    check_u8(convert_image_dtype(xf, kUInt8), g["convert_f32_u8"]);
    const Tensor u = tensor<uint8_t>({0, 1, 128, 255}, Shape{1, 2, 2});
    Generator gen(0);
    const Tensor t = ToTensor()(u, gen);
    CHECK(t.dtype() == kFloat32);
    check_close(t, {0, 1 / 255.0, 128 / 255.0, 1}, 0, 1e-7);
    CHECK(ToTensor()(t, gen).is_same(t));
    CHECK(ConvertImageDtype(kFloat64)(u, gen).dtype() == kFloat64);
    check_close(convert_image_dtype(t, kUInt8), {0, 1, 128, 255}, 0, 0);
    CHECK_THROWS_WITH_AS(convert_image_dtype(u, kInt32), doctest::Contains("not supported"), Error);
  }

  TEST_CASE("RandomResizedCrop: windows in bounds, reproducible per seed, output size") {
    const RandomResizedCrop rrc(8);
    std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> boxes;
    for (uint64_t seed = 0; seed < 100; ++seed) {
      Generator gen(seed);
      const CropBox b = rrc.get_params(50, 40, gen);
      CHECK(gen.offset() == 20);
      CHECK((b.h > 0 && b.w > 0 && b.top >= 0 && b.left >= 0));
      CHECK((b.top + b.h <= 50 && b.left + b.w <= 40));
      const double area = double(b.h * b.w) / 2000.0, r = double(b.w) / double(b.h);
      CHECK((area > 0.06 && area < 1.05 && r > 0.65 && r < 1.5));  // rounding to pixels
      boxes.insert({b.top, b.left, b.h, b.w});
      Generator again(seed);
      const CropBox c = rrc.get_params(50, 40, again);
      CHECK((c.top == b.top && c.left == b.left && c.h == b.h && c.w == b.w));
    }
    CHECK(boxes.size() > 90);  // different seeds, different windows
    // Impossible scale: the fallback is the centered window clamped to the ratio range.
    Generator gen(1);
    const CropBox f = RandomResizedCrop(8, {2.0, 3.0}, {1.0, 1.0}).get_params(50, 40, gen);
    CHECK((f.top == 5 && f.left == 0 && f.h == 40 && f.w == 40));
    const Tensor x = hashed_image({3, 50, 40}, 5, kUInt8);
    Generator g1(7), g2(7);
    const Tensor y = rrc(x, g1);
    CHECK(y.shape() == Shape{3, 8, 8});
    CHECK(testutil::bitwise_equal(y, rrc(x, g2)));
    CHECK(rrc.apply_batch(stack({x, x}, 0), g1).shape() == Shape{2, 3, 8, 8});
  }

  TEST_CASE("RandomHorizontalFlip flips about p of the time") {
    const Tensor x = arange(0, 6, 1, kFloat32).reshape({1, 2, 3});
    const Tensor flipped = hflip(x);
    for (double p : {0.5, 0.2}) {
      RandomHorizontalFlip flip(p);
      Generator gen(3);
      int n = 0;
      for (int i = 0; i < 200; ++i) {
        const Tensor y = flip(x, gen);
        if (testutil::bitwise_equal(y, flipped)) ++n;
      }
      CHECK(std::abs(n - 200 * p) < 25);
    }
    Generator gen(0);
    CHECK(testutil::bitwise_equal(RandomHorizontalFlip(1.0)(x, gen), flipped));
    CHECK(RandomHorizontalFlip(0.0)(x, gen).is_same(x));
  }

  TEST_CASE("ColorJitter: factor ranges, random order, reproducible") {
    const ColorJitter cj(0.4, 0.4, 0.4, 0.1);
    CHECK(cj.brightness->first == doctest::Approx(0.6));
    CHECK(cj.contrast->second == doctest::Approx(1.4));
    CHECK(cj.hue->first == doctest::Approx(-0.1));
    std::set<std::array<int, 4>> orders;
    for (uint64_t seed = 0; seed < 200; ++seed) {
      Generator gen(seed);
      const auto p = cj.get_params(gen);
      std::array<int, 4> sorted = p.order;
      std::sort(sorted.begin(), sorted.end());
      CHECK(sorted == std::array<int, 4>{0, 1, 2, 3});
      orders.insert(p.order);
      for (const auto& f : {*p.brightness, *p.contrast, *p.saturation})
        CHECK((f >= 0.6 && f <= 1.4));
      CHECK((*p.hue >= -0.1 && *p.hue <= 0.1));
    }
    CHECK(orders.size() == 24);
    CHECK(!ColorJitter(0.5).contrast.has_value());
    CHECK(ColorJitter(1.5).brightness->first == 0.0);
    CHECK_THROWS_AS(ColorJitter(0, 0, 0, 0.6), Error);
    // The result is the composition in the drawn order.
    const Tensor x = hashed_image({3, 10, 9}, 777, kFloat32);
    Generator g1(11), g2(11);
    const auto p = cj.get_params(g2);
    Tensor expect = x;
    for (int op : p.order) {
      if (op == 0) expect = adjust_brightness(expect, *p.brightness);
      if (op == 1) expect = adjust_contrast(expect, *p.contrast);
      if (op == 2) expect = adjust_saturation(expect, *p.saturation);
      if (op == 3) expect = adjust_hue(expect, *p.hue);
    }
    CHECK(testutil::bitwise_equal(cj(x, g1), expect));
  }

  TEST_CASE("Resize and resized_output_size follow torchvision's size rules") {
    CHECK(resized_output_size(23, 17, 12) == std::pair<int64_t, int64_t>{16, 12});
    CHECK(resized_output_size(375, 500, 224) == std::pair<int64_t, int64_t>{224, 298});
    CHECK(resized_output_size(375, 500, 224, 256) == std::pair<int64_t, int64_t>{192, 256});
    CHECK_THROWS_WITH_AS(resized_output_size(10, 10, 8, 8), doctest::Contains("max_size"), Error);
    CHECK_THROWS_WITH_AS(resize(zeros({3, 4, 4}, kInt64), 2, 2), doctest::Contains("dtype"), Error);
    CHECK_THROWS_AS(resize(zeros({3, 4, 4}), 0, 2), Error);
  }
}
