// torchvision.transforms for image tensors x:[C,H,W] (or [B,C,H,W]) of dtype uint8, float32 or
// float64: resampling (resize, resized_crop: separable antialiased filters as torch 1.13's
// interpolate), crops, flips, color ops and dtype conversion, with torchvision 0.14's numerics.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <utility>

#include "data/transforms.h"

namespace minidl::data {

// torchvision.transforms.InterpolationMode (the modes tensors support).
enum class InterpolationMode { NEAREST, BILINEAR, BICUBIC };

// ---- functional (torchvision.transforms.functional on tensors)

// x:[...,C,H,W] -> [...,C,out_h,out_w] (F.resize with size=[out_h, out_w]). BILINEAR/BICUBIC with
// antialias use torch's `_upsample_*_aa` (PIL's filters: triangle / cubic a=-0.5, support scaled
// by the downscale factor); without antialias, interpolate(align_corners=False) (cubic
// a=-0.75). NEAREST ignores antialias. uint8 is resampled in float32 and rounded half to even
// (bicubic clamped to [0, 255] first), like torchvision.
Tensor resize(const Tensor& x, int64_t out_h, int64_t out_w,
              InterpolationMode mode = InterpolationMode::BILINEAR, bool antialias = true);

// torchvision's output size for Resize(size) (shorter side -> size, the longer side
// int(size * long / short), both scaled down when it exceeds max_size): {out_h, out_w}.
std::pair<int64_t, int64_t> resized_output_size(int64_t h, int64_t w, int64_t size,
                                                std::optional<int64_t> max_size = std::nullopt);

// The window [top, top+h) x [left, left+w) of x:[...,H,W]; parts outside the image are zeros
// (F.crop). A view when the window lies inside the image.
Tensor crop(const Tensor& x, int64_t top, int64_t left, int64_t h, int64_t w);

// The centered h x w window (F.center_crop): zero padding when larger than the image, offsets
// round((H - h) / 2) with Python's half-to-even round.
Tensor center_crop(const Tensor& x, int64_t h, int64_t w);

// resize(crop(x, top, left, h, w), out_h, out_w, ...) with the crop fused into the filters
// (only the window is read, nothing is copied first).
Tensor resized_crop(const Tensor& x, int64_t top, int64_t left, int64_t h, int64_t w, int64_t out_h,
                    int64_t out_w, InterpolationMode mode = InterpolationMode::BILINEAR,
                    bool antialias = true);

// x.flip(-1) / x.flip(-2), contiguous results.
Tensor hflip(const Tensor& x);
Tensor vflip(const Tensor& x);

// Color ops on x:[...,C,H,W] with C = 1 or 3 (hue, saturation: C = 3; C = 1 returns x). Each is
// torchvision's _blend(x, other, f) = clamp(f*x + (1-f)*other, 0, 1 or 255), computed in
// float32 (float64 for f64) and truncated for uint8 exactly as torchvision does.
Tensor adjust_brightness(const Tensor& x, double factor);  // other = 0
Tensor adjust_contrast(const Tensor& x, double factor);    // other = mean of the grayscale
Tensor adjust_saturation(const Tensor& x, double factor);  // other = grayscale
Tensor adjust_hue(const Tensor& x, double hue_factor);     // hue_factor in [-0.5, 0.5]
// 0.2989 r + 0.587 g + 0.114 b (truncated for uint8) -> [...,num_output_channels,H,W];
// x with C = 1 is copied.
Tensor rgb_to_grayscale(const Tensor& x, int64_t num_output_channels = 1);

// F.convert_image_dtype: uint8 -> float x/255; float -> uint8 trunc(x * 255.999); float <->
// float casts; the same dtype returns x.
Tensor convert_image_dtype(const Tensor& x, DType dtype = DType::f32);
// uint8 x:[C,H,W] -> float32 x/255 (ToTensor on a decoded image); floating x passes through.
Tensor to_tensor(const Tensor& x);

// ---- transform classes (deterministic ones batch [B,C,H,W] in one call)

class Resize : public Transform {
 public:
  // Shorter side -> size (aspect kept, torchvision's truncation of the longer side).
  explicit Resize(int64_t size, InterpolationMode mode = InterpolationMode::BILINEAR,
                  std::optional<int64_t> max_size = std::nullopt, bool antialias = true);
  Resize(int64_t h, int64_t w, InterpolationMode mode = InterpolationMode::BILINEAR,
         bool antialias = true);
  Tensor operator()(const Tensor& x, Generator& gen) const override;
  Tensor apply_batch(const Tensor& x, Generator& gen) const override;

 private:
  int64_t size_ = 0, h_ = 0, w_ = 0;  // size_ > 0: shorter side mode
  InterpolationMode mode_;
  std::optional<int64_t> max_size_;
  bool antialias_;
};

class CenterCrop : public Transform {
 public:
  explicit CenterCrop(int64_t size) : CenterCrop(size, size) {}
  CenterCrop(int64_t h, int64_t w);
  Tensor operator()(const Tensor& x, Generator& gen) const override;
  Tensor apply_batch(const Tensor& x, Generator& gen) const override;

 private:
  int64_t h_, w_;
};

// A crop window (top, left, height, width).
struct CropBox {
  int64_t top = 0, left = 0, h = 0, w = 0;
};

// A random window with area fraction uniform in `scale` and log aspect ratio (w/h) uniform in
// log(ratio), resized to size x size (torchvision.transforms.RandomResizedCrop).
class RandomResizedCrop : public Transform {
 public:
  explicit RandomResizedCrop(int64_t size, std::pair<double, double> scale = {0.08, 1.0},
                             std::pair<double, double> ratio = {3.0 / 4.0, 4.0 / 3.0},
                             InterpolationMode mode = InterpolationMode::BILINEAR,
                             bool antialias = true);
  RandomResizedCrop(int64_t h, int64_t w, std::pair<double, double> scale,
                    std::pair<double, double> ratio,
                    InterpolationMode mode = InterpolationMode::BILINEAR, bool antialias = true);
  // torchvision's get_params: 10 tries of (area, ratio) -> w = round(sqrt(area*r)),
  // h = round(sqrt(area/r)), top/left uniform; else the centered window clamped to `ratio`.
  // Always reserves 20 counters of `gen` (4 64-bit words per try).
  CropBox get_params(int64_t height, int64_t width, Generator& gen) const;
  Tensor operator()(const Tensor& x, Generator& gen) const override;

 private:
  int64_t h_, w_;
  std::pair<double, double> scale_, ratio_;
  InterpolationMode mode_;
  bool antialias_;
};

// hflip with probability p (one counter of `gen` per call).
class RandomHorizontalFlip : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  Tensor operator()(const Tensor& x, Generator& gen) const override;

 private:
  double p_;
};

// Random brightness, contrast, saturation and hue in a random order
// (torchvision.transforms.ColorJitter): factors uniform in [max(0, 1-b), 1+b] (hue in
// [-hue, hue], hue <= 0.5); a zero argument leaves that op out.
class ColorJitter : public Transform {
 public:
  explicit ColorJitter(double brightness = 0, double contrast = 0, double saturation = 0,
                       double hue = 0);
  struct Params {
    std::array<int, 4> order{};  // permutation of 0 brightness, 1 contrast, 2 saturation, 3 hue
    std::optional<double> brightness, contrast, saturation, hue;
  };
  // torchvision's get_params; reserves 4 counters of `gen`.
  Params get_params(Generator& gen) const;
  Tensor operator()(const Tensor& x, Generator& gen) const override;
  // The ranges (unset when the op is left out).
  std::optional<std::pair<double, double>> brightness, contrast, saturation, hue;
};

// uint8 -> float32 / 255; floating inputs pass through.
class ToTensor : public Transform {
 public:
  Tensor operator()(const Tensor& x, Generator& gen) const override;
  Tensor apply_batch(const Tensor& x, Generator& gen) const override;
};

class ConvertImageDtype : public Transform {
 public:
  explicit ConvertImageDtype(DType dtype) : dtype_(dtype) {}
  Tensor operator()(const Tensor& x, Generator& gen) const override;
  Tensor apply_batch(const Tensor& x, Generator& gen) const override;

 private:
  DType dtype_;
};

}  // namespace minidl::data
