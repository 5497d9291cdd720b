// torchvision transforms on image tensors: crops (views when inside the image), flips, dtype
// conversion and the Transform classes (Resize, CenterCrop, RandomResizedCrop,
// RandomHorizontalFlip, ColorJitter, ToTensor, ConvertImageDtype). Resampling: resize.cpp;
// color ops: color.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "data/image/image_transforms.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace minidl::data {
namespace {

void check_image(const Tensor& x, const char* op) {
  MINIDL_CHECK(x.defined() && x.dim() >= 2, op, ": expected an image x:[C,H,W] or [B,C,H,W], got ",
               x.defined() ? x.shape_str() : std::string("an undefined tensor"));
  MINIDL_CHECK(x.is_cpu(), op, ": expected a CPU tensor, got x ", x.shape_str(), " on ",
               x.device());
}

// Reverses every row of n rows of w elements of type E (a bit copy of any dtype).
template <typename E>
void reverse_rows(const void* src, void* dst, int64_t n, int64_t w) {
  const E* s = static_cast<const E*>(src);
  E* d = static_cast<E*>(dst);
  for (int64_t r = 0; r < n; ++r, s += w, d += w)
    for (int64_t x = 0; x < w; ++x) d[x] = s[w - 1 - x];
}

}  // namespace

Tensor crop(const Tensor& x, int64_t top, int64_t left, int64_t h, int64_t w) {
  check_image(x, "crop");
  MINIDL_CHECK(h > 0 && w > 0, "crop: size (", h, ", ", w, ") must be positive (x ", x.shape_str(),
               ")");
  const int64_t hd = x.dim() - 2, wd = x.dim() - 1, H = x.size(hd), W = x.size(wd);
  if (top >= 0 && left >= 0 && top + h <= H && left + w <= W)
    return x.narrow(hd, top, h).narrow(wd, left, w);
  Shape shape = x.shape();
  shape[size_t(hd)] = h;
  shape[size_t(wd)] = w;
  Tensor out = zeros(shape, x.dtype());
  const int64_t r0 = std::max<int64_t>(top, 0), r1 = std::min(top + h, H);
  const int64_t c0 = std::max<int64_t>(left, 0), c1 = std::min(left + w, W);
  if (r1 > r0 && c1 > c0)
    out.narrow(hd, r0 - top, r1 - r0)
        .narrow(wd, c0 - left, c1 - c0)
        .copy_(x.narrow(hd, r0, r1 - r0).narrow(wd, c0, c1 - c0));
  return out;
}

Tensor center_crop(const Tensor& x, int64_t h, int64_t w) {
  check_image(x, "center_crop");
  const int64_t H = x.size(-2), W = x.size(-1);
  // Larger than the image: pad (d // 2 before); else Python's round((H - h) / 2).
  const int64_t top = h > H ? -((h - H) / 2) : int64_t(std::nearbyint(double(H - h) / 2.0));
  const int64_t left = w > W ? -((w - W) / 2) : int64_t(std::nearbyint(double(W - w) / 2.0));
  return crop(x, top, left, h, w);
}

Tensor hflip(const Tensor& x0) {
  check_image(x0, "hflip");
  const Tensor x = x0.contiguous();
  Tensor out = empty(x.shape(), x.dtype());
  const int64_t w = x.size(-1), n = w == 0 ? 0 : x.numel() / w;
  switch (x.element_size()) {
    case 1:
      reverse_rows<uint8_t>(x.data_ptr(), out.data_ptr(), n, w);
      break;
    case 2:
      reverse_rows<uint16_t>(x.data_ptr(), out.data_ptr(), n, w);
      break;
    case 4:
      reverse_rows<uint32_t>(x.data_ptr(), out.data_ptr(), n, w);
      break;
    default:
      reverse_rows<uint64_t>(x.data_ptr(), out.data_ptr(), n, w);
      break;
  }
  return out;
}

Tensor vflip(const Tensor& x0) {
  check_image(x0, "vflip");
  const Tensor x = x0.contiguous();
  Tensor out = empty(x.shape(), x.dtype());
  const int64_t h = x.size(-2), row = x.size(-1) * int64_t(x.element_size());
  const int64_t planes = h * row == 0 ? 0 : int64_t(x.nbytes()) / (h * row);
  const char* s = static_cast<const char*>(x.data_ptr());
  char* d = static_cast<char*>(out.data_ptr());
  for (int64_t p = 0; p < planes; ++p, s += h * row, d += h * row)
    for (int64_t r = 0; r < h; ++r) std::memcpy(d + r * row, s + (h - 1 - r) * row, size_t(row));
  return out;
}

Tensor convert_image_dtype(const Tensor& x, DType dtype) {
  MINIDL_CHECK(x.defined(), "convert_image_dtype: undefined tensor");
  if (x.dtype() == dtype) return x;
  const bool from_float = x.dtype() == DType::f32 || x.dtype() == DType::f64;
  const bool to_float = dtype == DType::f32 || dtype == DType::f64;
  if (from_float && to_float) return x.to(dtype);
  if (x.dtype() == DType::u8 && to_float) {  // image.to(dtype) / 255
    const Tensor c = x.contiguous();
    Tensor out = empty(x.shape(), dtype);
    const uint8_t* s = c.data_ptr<uint8_t>();
    const int64_t n = x.numel();
    if (dtype == DType::f32) {
      float* d = out.data_ptr<float>();
      for (int64_t k = 0; k < n; ++k) d[k] = float(s[k]) / 255.0f;
    } else {
      double* d = out.data_ptr<double>();
      for (int64_t k = 0; k < n; ++k) d[k] = double(s[k]) / 255.0;
    }
    return out;
  }
  MINIDL_CHECK(from_float && dtype == DType::u8, "convert_image_dtype: the conversion from ",
               x.dtype(), " to ", dtype,
               " is not supported (uint8 <-> float32/float64 and float <-> float are), x ",
               x.shape_str());
  // float -> uint8: trunc(x * 255.999) (torchvision's max + 1 - eps); out-of-range inputs
  // saturate to [0, 255] instead of wrapping.
  const Tensor c = x.contiguous();
  Tensor out = empty(x.shape(), DType::u8);
  uint8_t* d = out.data_ptr<uint8_t>();
  auto conv = [&](const auto* s, auto scale) {
    using S = decltype(scale);
    const int64_t n = x.numel();
    for (int64_t k = 0; k < n; ++k) d[k] = uint8_t(std::min(std::max(s[k] * scale, S(0)), S(255)));
  };
  if (x.dtype() == DType::f32)
    conv(c.data_ptr<float>(), float(255.999));
  else
    conv(c.data_ptr<double>(), 255.999);
  return out;
}

Tensor to_tensor(const Tensor& x) {
  MINIDL_CHECK(x.defined() && (x.dtype() == DType::u8 || x.is_floating_point()),
               "to_tensor: expected a uint8 or floating point image, got ",
               x.defined() ? dtype_name(x.dtype()) : "an undefined tensor");
  return x.dtype() == DType::u8 ? convert_image_dtype(x, DType::f32) : x;
}

// ---- Resize, CenterCrop

Resize::Resize(int64_t size, InterpolationMode mode, std::optional<int64_t> max_size,
               bool antialias)
    : size_(size), mode_(mode), max_size_(max_size), antialias_(antialias) {
  MINIDL_CHECK(size > 0, "Resize: size must be positive, got ", size);
  MINIDL_CHECK(
      !max_size || *max_size > size, "Resize: max_size = ", max_size.value_or(0),
      " must be strictly greater than the requested size for the smaller edge size = ", size);
}

Resize::Resize(int64_t h, int64_t w, InterpolationMode mode, bool antialias)
    : h_(h), w_(w), mode_(mode), antialias_(antialias) {
  MINIDL_CHECK(h > 0 && w > 0, "Resize: size (", h, ", ", w, ") must be positive");
}

Tensor Resize::operator()(const Tensor& x, Generator& /*gen*/) const {
  check_image(x, "Resize");
  auto [h, w] =
      size_ > 0 ? resized_output_size(x.size(-2), x.size(-1), size_, max_size_) : std::pair{h_, w_};
  return resize(x, h, w, mode_, antialias_);
}
Tensor Resize::apply_batch(const Tensor& x, Generator& gen) const {
  return (*this)(x, gen);
}

CenterCrop::CenterCrop(int64_t h, int64_t w) : h_(h), w_(w) {
  MINIDL_CHECK(h > 0 && w > 0, "CenterCrop: size (", h, ", ", w, ") must be positive");
}
Tensor CenterCrop::operator()(const Tensor& x, Generator& /*gen*/) const {
  return center_crop(x, h_, w_);
}
Tensor CenterCrop::apply_batch(const Tensor& x, Generator& gen) const {
  return (*this)(x, gen);
}

// ---- RandomResizedCrop

RandomResizedCrop::RandomResizedCrop(int64_t size, std::pair<double, double> scale,
                                     std::pair<double, double> ratio, InterpolationMode mode,
                                     bool antialias)
    : RandomResizedCrop(size, size, scale, ratio, mode, antialias) {}

RandomResizedCrop::RandomResizedCrop(int64_t h, int64_t w, std::pair<double, double> scale,
                                     std::pair<double, double> ratio, InterpolationMode mode,
                                     bool antialias)
    : h_(h), w_(w), scale_(scale), ratio_(ratio), mode_(mode), antialias_(antialias) {
  MINIDL_CHECK(h > 0 && w > 0, "RandomResizedCrop: size (", h, ", ", w, ") must be positive");
  MINIDL_CHECK(scale.first > 0 && scale.first <= scale.second,
               "RandomResizedCrop: scale should be (min, max) with 0 < min <= max, got (",
               scale.first, ", ", scale.second, ")");
  MINIDL_CHECK(ratio.first > 0 && ratio.first <= ratio.second,
               "RandomResizedCrop: ratio should be (min, max) with 0 < min <= max, got (",
               ratio.first, ", ", ratio.second, ")");
}

CropBox RandomResizedCrop::get_params(int64_t height, int64_t width, Generator& gen) const {
  MINIDL_CHECK(height > 0 && width > 0, "RandomResizedCrop: image size (", height, ", ", width,
               ") must be positive");
  const double area = double(height) * double(width);
  const double lr0 = std::log(ratio_.first), lr1 = std::log(ratio_.second);
  const PhiloxStream s = gen.reserve(20);  // 10 tries x 4 64-bit words
  for (uint64_t t = 0; t < 10; ++t) {
    const double target =
        area * (scale_.first + s.uniform_double(4 * t) * (scale_.second - scale_.first));
    const double r = std::exp(lr0 + s.uniform_double(4 * t + 1) * (lr1 - lr0));
    const int64_t w = int64_t(std::nearbyint(std::sqrt(target * r)));
    const int64_t h = int64_t(std::nearbyint(std::sqrt(target / r)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t top = int64_t(s.word64(4 * t + 2) % uint64_t(height - h + 1));
      const int64_t left = int64_t(s.word64(4 * t + 3) % uint64_t(width - w + 1));
      return {top, left, h, w};
    }
  }
  // Fallback: the centered window of the whole image clamped to the ratio range.
  const double in_ratio = double(width) / double(height);
  int64_t w = width, h = height;
  if (in_ratio < ratio_.first)
    h = int64_t(std::nearbyint(double(w) / ratio_.first));
  else if (in_ratio > ratio_.second)
    w = int64_t(std::nearbyint(double(h) * ratio_.second));
  return {(height - h) / 2, (width - w) / 2, h, w};
}

Tensor RandomResizedCrop::operator()(const Tensor& x, Generator& gen) const {
  check_image(x, "RandomResizedCrop");
  const CropBox b = get_params(x.size(-2), x.size(-1), gen);
  return resized_crop(x, b.top, b.left, b.h, b.w, h_, w_, mode_, antialias_);
}

// ---- RandomHorizontalFlip

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  MINIDL_CHECK(p >= 0 && p <= 1, "RandomHorizontalFlip: p must be in [0, 1], got ", p);
}

Tensor RandomHorizontalFlip::operator()(const Tensor& x, Generator& gen) const {
  return gen.reserve(1).uniform_double(0) < p_ ? hflip(x) : x;
}

// ---- ColorJitter

namespace {
std::optional<std::pair<double, double>> jitter_range(double v, const char* name) {
  MINIDL_CHECK(v >= 0 && std::isfinite(v), "ColorJitter: ", name,
               " must be a non-negative number, got ", v);
  if (v == 0) return std::nullopt;
  return std::pair{std::max(0.0, 1.0 - v), 1.0 + v};
}
}  // namespace

ColorJitter::ColorJitter(double b, double c, double s, double h)
    : brightness(jitter_range(b, "brightness")),
      contrast(jitter_range(c, "contrast")),
      saturation(jitter_range(s, "saturation")) {
  MINIDL_CHECK(h >= 0 && h <= 0.5, "ColorJitter: hue must be in [0, 0.5], got ", h);
  if (h > 0) hue = std::pair{-h, h};
}

ColorJitter::Params ColorJitter::get_params(Generator& gen) const {
  const PhiloxStream s = gen.reserve(4);  // words 1..3: the permutation, 4..7: the factors
  Params p;
  p.order = {0, 1, 2, 3};
  for (uint64_t j = 3; j >= 1; --j) std::swap(p.order[j], p.order[s.word64(j) % (j + 1)]);
  auto draw = [&](const std::optional<std::pair<double, double>>& r, uint64_t i) {
    return r ? std::optional<double>(r->first + s.uniform_double(i) * (r->second - r->first))
             : std::nullopt;
  };
  p.brightness = draw(brightness, 4);
  p.contrast = draw(contrast, 5);
  p.saturation = draw(saturation, 6);
  p.hue = draw(hue, 7);
  return p;
}

Tensor ColorJitter::operator()(const Tensor& x, Generator& gen) const {
  const Params p = get_params(gen);
  Tensor y = x;
  for (int op : p.order) {
    if (op == 0 && p.brightness) y = adjust_brightness(y, *p.brightness);
    if (op == 1 && p.contrast) y = adjust_contrast(y, *p.contrast);
    if (op == 2 && p.saturation) y = adjust_saturation(y, *p.saturation);
    if (op == 3 && p.hue) y = adjust_hue(y, *p.hue);
  }
  return y;
}

// ---- ToTensor, ConvertImageDtype

Tensor ToTensor::operator()(const Tensor& x, Generator& /*gen*/) const {
  return to_tensor(x);
}
Tensor ToTensor::apply_batch(const Tensor& x, Generator& /*gen*/) const {
  return to_tensor(x);
}

Tensor ConvertImageDtype::operator()(const Tensor& x, Generator& /*gen*/) const {
  return convert_image_dtype(x, dtype_);
}
Tensor ConvertImageDtype::apply_batch(const Tensor& x, Generator& /*gen*/) const {
  return convert_image_dtype(x, dtype_);
}

}  // namespace minidl::data
