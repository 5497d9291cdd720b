// Color ops (torchvision 0.14's functional_tensor): grayscale, brightness, contrast, saturation
// and hue as one pass over raw pixels, each float op rounded like torch's separate tensor ops
// (no FMA contraction), so uint8 results equal torchvision's truncated ones.
#include <algorithm>
#include <cmath>

#include "data/image/image_transforms.h"
#include "tensor/error.h"

// torch rounds every product and sum of these ops separately: no a*b+c contraction here.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace minidl::data {
namespace {

// An image x:[..., C, H, W] as n images of C planes of hw pixels, contiguous.
struct Planes {
  Tensor x;
  int64_t n = 0, c = 0, hw = 0;
};

Planes planes(const Tensor& x, const char* op, bool need_rgb) {
  MINIDL_CHECK(x.defined() && x.dim() >= 3, op, ": expected an image x:[C,H,W] or [B,C,H,W], got ",
               x.defined() ? x.shape_str() : std::string("an undefined tensor"));
  MINIDL_CHECK(x.is_cpu(), op, ": expected a CPU tensor, got x ", x.shape_str(), " on ",
               x.device());
  const int64_t c = x.size(-3);
  MINIDL_CHECK(c == 3 || (c == 1 && !need_rgb), op, ": expected ", need_rgb ? "3" : "1 or 3",
               " channels, got x ", x.shape_str());
  MINIDL_CHECK(x.dtype() == DType::u8 || x.dtype() == DType::f32 || x.dtype() == DType::f64, op,
               ": expected dtype uint8, float32 or float64, got ", x.dtype(), " (x ", x.shape_str(),
               ")");
  Planes p{x.contiguous(), 0, c, x.size(-2) * x.size(-1)};
  p.n = p.hw == 0 ? 0 : x.numel() / (c * p.hw);
  return p;
}

// Calls f.template operator()<T, S>() with the pixel type T and torch's compute type S.
template <typename F>
Tensor dispatch(DType dt, F&& f) {
  if (dt == DType::u8) return f.template operator()<uint8_t, float>();
  if (dt == DType::f32) return f.template operator()<float, float>();
  return f.template operator()<double, double>();
}

// torchvision's grayscale of one pixel, in S then cast to T (truncation for uint8).
template <typename T, typename S>
T gray_of(T r, T g, T b) {
  const S pr = S(0.2989) * S(r), pg = S(0.587) * S(g), pb = S(0.114) * S(b);
  return T((pr + pg) + pb);
}

// _blend's clamp(...).to(T): bound 1 for floats, 255 (then truncation) for uint8.
template <typename T, typename S>
T clamp_to(S v) {
  constexpr S bound = std::is_same_v<T, uint8_t> ? S(255) : S(1);
  return T(std::min(std::max(v, S(0)), bound));
}

void check_factor(double f, const char* op) {
  MINIDL_CHECK(f >= 0 && std::isfinite(f), op, ": factor (", f, ") is not non-negative");
}

}  // namespace

Tensor rgb_to_grayscale(const Tensor& x, int64_t num_output_channels) {
  MINIDL_CHECK(num_output_channels == 1 || num_output_channels == 3,
               "rgb_to_grayscale: num_output_channels should be either 1 or 3, got ",
               num_output_channels);
  Planes p = planes(x, "rgb_to_grayscale", false);
  Shape shape = x.shape();
  shape[shape.size() - 3] = 1;
  Tensor l = p.c == 1 ? p.x.clone() : dispatch(x.dtype(), [&]<typename T, typename S>() {
    Tensor out = empty(shape, x.dtype());
    const T* s = p.x.data_ptr<T>();
    T* d = out.data_ptr<T>();
    for (int64_t i = 0; i < p.n; ++i, s += 3 * p.hw, d += p.hw)
      for (int64_t k = 0; k < p.hw; ++k) d[k] = gray_of<T, S>(s[k], s[p.hw + k], s[2 * p.hw + k]);
    return out;
  });
  if (num_output_channels == 3) {
    shape[shape.size() - 3] = 3;
    return l.expand(shape).contiguous();
  }
  return l;
}

Tensor adjust_brightness(const Tensor& x, double factor) {
  check_factor(factor, "adjust_brightness");
  Planes p = planes(x, "adjust_brightness", false);
  return dispatch(x.dtype(), [&]<typename T, typename S>() {
    Tensor out = empty(x.shape(), x.dtype());
    const T* s = p.x.data_ptr<T>();
    T* d = out.data_ptr<T>();
    const S f = S(factor);
    const int64_t n = p.x.numel();
    for (int64_t k = 0; k < n; ++k) d[k] = clamp_to<T, S>(f * S(s[k]));
    return out;
  });
}

Tensor adjust_contrast(const Tensor& x, double factor) {
  check_factor(factor, "adjust_contrast");
  Planes p = planes(x, "adjust_contrast", false);
  return dispatch(x.dtype(), [&]<typename T, typename S>() {
    Tensor out = empty(x.shape(), x.dtype());
    const T* s = p.x.data_ptr<T>();
    T* d = out.data_ptr<T>();
    const S f = S(factor), g = S(1.0 - factor);
    const int64_t per_image = p.c * p.hw;
    for (int64_t i = 0; i < p.n; ++i, s += per_image, d += per_image) {
      // mean of the grayscale (cast to T first, as torchvision does), per image
      double sum = 0;
      if (p.c == 3) {
        for (int64_t k = 0; k < p.hw; ++k)
          sum += double(gray_of<T, S>(s[k], s[p.hw + k], s[2 * p.hw + k]));
      } else {
        for (int64_t k = 0; k < p.hw; ++k) sum += double(s[k]);
      }
      const S mean = S(S(sum) / S(p.hw)), other = g * mean;
      for (int64_t k = 0; k < per_image; ++k) d[k] = clamp_to<T, S>(f * S(s[k]) + other);
    }
    return out;
  });
}

Tensor adjust_saturation(const Tensor& x, double factor) {
  check_factor(factor, "adjust_saturation");
  Planes p = planes(x, "adjust_saturation", false);
  if (p.c == 1) return x;  // PIL's behaviour
  return dispatch(x.dtype(), [&]<typename T, typename S>() {
    Tensor out = empty(x.shape(), x.dtype());
    const T* s = p.x.data_ptr<T>();
    T* d = out.data_ptr<T>();
    const S f = S(factor), g = S(1.0 - factor);
    for (int64_t i = 0; i < p.n; ++i, s += 3 * p.hw, d += 3 * p.hw)
      for (int64_t k = 0; k < p.hw; ++k) {
        const S other = g * S(gray_of<T, S>(s[k], s[p.hw + k], s[2 * p.hw + k]));
        for (int64_t c = 0; c < 3; ++c)
          d[c * p.hw + k] = clamp_to<T, S>(f * S(s[c * p.hw + k]) + other);
      }
    return out;
  });
}

// torchvision's _rgb2hsv, hue shift (Python's % 1.0) and _hsv2rgb on one pixel of [0,1] floats.
template <typename S>
void shift_hue(S& r, S& g, S& b, S hue) {
  const S maxc = std::max(std::max(r, g), b), minc = std::min(std::min(r, g), b);
  const bool eqc = maxc == minc;
  const S cr = maxc - minc;
  const S s = cr / (eqc ? S(1) : maxc);
  const S crd = eqc ? S(1) : cr;
  const S rc = (maxc - r) / crd, gc = (maxc - g) / crd, bc = (maxc - b) / crd;
  const S hr = maxc == r ? bc - gc : S(0);
  const S hg = maxc == g && maxc != r ? (S(2) + rc) - bc : S(0);
  const S hb = maxc != g && maxc != r ? (S(4) + gc) - rc : S(0);
  S h = std::fmod((hr + hg + hb) / S(6) + S(1), S(1));
  h = std::fmod(h + hue, S(1));
  if (h != 0 && h < 0) h += S(1);
  const S v = maxc, h6 = h * S(6), fi = std::floor(h6), fr = h6 - fi;
  const int i = int(fi) % 6;
  const S pp = std::clamp(v * (S(1) - s), S(0), S(1));
  const S q = std::clamp(v * (S(1) - s * fr), S(0), S(1));
  const S t = std::clamp(v * (S(1) - s * (S(1) - fr)), S(0), S(1));
  const S rs[6] = {v, q, pp, pp, t, v}, gs[6] = {t, v, v, q, pp, pp}, bs[6] = {pp, pp, t, v, v, q};
  r = rs[i];
  g = gs[i];
  b = bs[i];
}

Tensor adjust_hue(const Tensor& x, double hue_factor) {
  MINIDL_CHECK(hue_factor >= -0.5 && hue_factor <= 0.5, "adjust_hue: hue_factor (", hue_factor,
               ") is not in [-0.5, 0.5]");
  Planes p = planes(x, "adjust_hue", false);
  if (p.c == 1) return x;  // PIL's behaviour
  return dispatch(x.dtype(), [&]<typename T, typename S>() {
    Tensor out = empty(x.shape(), x.dtype());
    const T* s = p.x.data_ptr<T>();
    T* d = out.data_ptr<T>();
    const S hue = S(hue_factor);
    for (int64_t i = 0; i < p.n; ++i, s += 3 * p.hw, d += 3 * p.hw)
      for (int64_t k = 0; k < p.hw; ++k) {
        S c[3];
        for (int64_t j = 0; j < 3; ++j) {
          c[j] = S(s[j * p.hw + k]);
          if constexpr (std::is_same_v<T, uint8_t>) c[j] = c[j] / S(255);
        }
        shift_hue<S>(c[0], c[1], c[2], hue);
        for (int64_t j = 0; j < 3; ++j) {
          if constexpr (std::is_same_v<T, uint8_t>)
            d[j * p.hw + k] = uint8_t(c[j] * S(255));
          else
            d[j * p.hw + k] = c[j];
        }
      }
    return out;
  });
}

}  // namespace minidl::data
