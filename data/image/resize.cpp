// Resampling for resize / resized_crop: per-axis filter taps (torch 1.13's interpolate weights,
// computed once per call) applied as two separable passes, horizontal (a strip of rows
// interleaved so the taps vectorize across rows) then vertical (contiguous rows).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "data/image/image_transforms.h"
#include "tensor/error.h"

// The vector helpers below are internal: their (AVX) calling convention never crosses this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace minidl::data {
namespace {

// One axis: output o = sum_{j < count[o]} in[start[o] + j] * w[o*k + j]. S is the compute type
// (float for uint8/float32 images, double for float64), as in torch.
template <typename S>
struct AxisTaps {
  int64_t k = 0;
  std::vector<int64_t> start, count;
  std::vector<S> w;
  bool identity = false;
  bool reverse = false;  // accumulate the taps last to first
};

const char* mode_name(InterpolationMode m) {
  return m == InterpolationMode::NEAREST    ? "nearest"
         : m == InterpolationMode::BILINEAR ? "bilinear"
                                            : "bicubic";
}

// PIL's filters as torch's HelperInterpLinear / HelperInterpCubic write them (double math on a
// scalar_t argument, result in scalar_t).
template <typename S>
S aa_filter(bool cubic, S x) {
  if (x < 0) x = -x;
  if (!cubic) return x < 1.0 ? S(1.0 - x) : S(0);
  constexpr double a = -0.5;
  if (x < 1.0) return S(((a + 2.0) * x - (a + 3.0)) * x * x + 1);
  if (x < 2.0) return S((((x - 5) * x + 8) * x - 4) * a);
  return S(0);
}

// torch's _compute_indices_weights_aa (antialiased bilinear / bicubic, align_corners=False).
template <typename S>
void aa_taps(AxisTaps<S>& t, int64_t in, int64_t out, bool cubic) {
  const S scale = S(in) / S(out);
  const int interp = cubic ? 4 : 2;
  const S support = scale >= 1.0 ? S((interp * 0.5) * scale) : S(interp * 0.5);
  t.k = int64_t(std::ceil(support)) * 2 + 1;
  t.w.assign(size_t(out * t.k), S(0));
  const S invscale = scale >= 1.0 ? S(1.0 / scale) : S(1.0);
  for (int64_t i = 0; i < out; ++i) {
    const S center = S(scale * (double(i) + 0.5));
    const int64_t xmin = std::max(int64_t(double(center - support) + 0.5), int64_t(0));
    const int64_t xsize = std::min(int64_t(double(center + support) + 0.5), in) - xmin;
    S* w = &t.w[size_t(i * t.k)];
    S total = 0;
    for (int64_t j = 0; j < xsize; ++j) {
      const S d = S(j + xmin) - center;  // int64 - scalar_t, as in torch
      w[j] = aa_filter<S>(cubic, S((double(d) + 0.5) * invscale));
      total += w[j];
    }
    if (total != 0)
      for (int64_t j = 0; j < xsize; ++j) w[j] /= total;
    t.start.push_back(xmin);
    t.count.push_back(xsize);
  }
}

// Adds weight `wt` for input index `idx` (clamped to [0, in)) to output i's window, which
// starts at t.start[i] and spans t.k entries.
template <typename S>
void add_tap(AxisTaps<S>& t, int64_t i, int64_t idx, int64_t in, S wt) {
  idx = std::clamp<int64_t>(idx, 0, in - 1);
  const int64_t j = idx - t.start[size_t(i)];
  t.w[size_t(i * t.k + j)] += wt;
  t.count[size_t(i)] = std::max(t.count[size_t(i)], j + 1);
}

// torch's upsample_{nearest,bilinear,bicubic}2d index/weight rules without antialias
// (align_corners=False); clamped duplicate indices are merged into one weight.
template <typename S>
void plain_taps(AxisTaps<S>& t, int64_t in, int64_t out, InterpolationMode mode) {
  t.k = mode == InterpolationMode::NEAREST ? 1 : mode == InterpolationMode::BILINEAR ? 2 : 4;
  t.w.assign(size_t(out * t.k), S(0));
  t.count.assign(size_t(out), 0);
  const S scale = S(in) / S(out);
  for (int64_t i = 0; i < out; ++i) {
    if (mode == InterpolationMode::NEAREST) {
      const float fs = float(in) / float(out);
      const int64_t src =
          out == 2 * in ? i >> 1 : std::min(int64_t(std::floor(float(i) * fs)), in - 1);
      t.start.push_back(src);
      add_tap<S>(t, i, src, in, S(1));
    } else if (mode == InterpolationMode::BILINEAR) {
      // The source index in double from the scalar_t scale, as torch 1.13 computes it.
      const double real = std::max(double(scale) * (double(i) + 0.5) - 0.5, 0.0);
      const int64_t x0 = int64_t(real);
      const S l1 = S(real - double(x0)), l0 = S(1) - l1;
      t.start.push_back(x0);
      t.reverse = true;  // torch's t0*w0 + t1*w1 contracts to fma(t0, w0, t1*w1)
      add_tap<S>(t, i, x0, in, l0);
      add_tap<S>(t, i, x0 + (x0 < in - 1 ? 1 : 0), in, l1);
    } else {
      const double real = double(scale) * (double(i) + 0.5) - 0.5;
      const int64_t x0 = int64_t(std::floor(real));
      const S x1 = S(real - double(x0)), x2 = S(1) - x1;
      constexpr S A = S(-0.75);
      auto cc1 = [&](S x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
      auto cc2 = [&](S x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
      const S c[4] = {cc2(x1 + S(1)), cc1(x1), cc1(x2), cc2(x2 + S(1))};
      t.start.push_back(std::clamp<int64_t>(x0 - 1, 0, in - 1));
      for (int64_t j = 0; j < 4; ++j) add_tap<S>(t, i, x0 - 1 + j, in, c[j]);
    }
  }
}

template <typename S>
AxisTaps<S> make_taps(int64_t in, int64_t out, InterpolationMode mode, bool antialias) {
  AxisTaps<S> t;
  if (in == out) {  // every mode's weights are exactly (1, 0, ...) here
    t.identity = true;
    return t;
  }
  if (antialias && mode != InterpolationMode::NEAREST)
    aa_taps<S>(t, in, out, mode == InterpolationMode::BICUBIC);
  else
    plain_taps<S>(t, in, out, mode);
  return t;
}

// SIMD vectors of 32 bytes (GCC/Clang vector extensions; plain loops where the target has
// no such registers): 8 floats or 4 doubles.
typedef float VecF __attribute__((vector_size(32)));
typedef double VecD __attribute__((vector_size(32)));
template <typename S>
using Vec = std::conditional_t<std::is_same_v<S, float>, VecF, VecD>;
template <typename S>
inline Vec<S> vload(const S* p) {
  Vec<S> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// 8 consecutive pixels as floats.
inline VecF load8f(const float* p) {
  return vload(p);
}
inline VecF load8f(const uint8_t* p) {  // written so GCC emits vpmovzxbd + vcvtdq2ps
  typedef int32_t I32x8 __attribute__((vector_size(32)));
  const I32x8 v = {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]};
  return __builtin_convertvector(v, VecF);
}

// In-register 8x8 transpose: r[i][j] -> r[j][i] (the unpack / shuffle / permute sequence).
inline void transpose8(VecF* r) {
  VecF t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    r[i + 4] = __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

// Rows [0, rows) of a plane (row r at src + r*row_stride, in_w columns) -> tmp:[rows, out_w].
// R = 2 vectors of rows at a time are interleaved into strip[x*R + r], so each tap is two
// vector FMAs over R rows (torch's tap order per output, so the same sums).
template <typename T, typename S>
void horizontal_pass(const T* src, int64_t row_stride, int64_t rows, int64_t in_w,
                     const AxisTaps<S>& t, int64_t out_w, S* tmp, std::vector<S>& strip) {
  if (t.identity) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t x = 0; x < in_w; ++x) tmp[r * out_w + x] = S(src[r * row_stride + x]);
    return;
  }
  constexpr int L = int(sizeof(Vec<S>) / sizeof(S)), R = 2 * L;
  if (strip.size() < size_t((in_w + out_w) * R)) strip.resize(size_t((in_w + out_w) * R));
  S* st = strip.data();   // st[x*R + i]: pixel x of strip row i
  S* ot = st + in_w * R;  // ot[o*R + i]: output o of strip row i
  for (int64_t r0 = 0; r0 < rows; r0 += R) {
    const int n = int(std::min<int64_t>(R, rows - r0));
    const T* rp[R];  // rows past the end repeat the last one (their sums are not stored)
    for (int i = 0; i < R; ++i) rp[i] = src + (r0 + std::min(i, n - 1)) * row_stride;
    int64_t x = 0;
    if constexpr (std::is_same_v<S, float>)  // 8x8 blocks through registers
      for (; x + 8 <= in_w; x += 8)
        for (int g = 0; g < R; g += 8) {
          VecF c[8];
          for (int i = 0; i < 8; ++i) c[i] = load8f(rp[g + i] + x);
          transpose8(c);
          for (int i = 0; i < 8; ++i) std::memcpy(st + (x + i) * R + g, &c[i], sizeof(VecF));
        }
    for (; x < in_w; ++x)
      for (int i = 0; i < R; ++i) st[x * R + i] = S(rp[i][x]);
    for (int64_t o = 0; o < out_w; ++o) {
      Vec<S> a0 = {}, a1 = {};
      const S* w = t.w.data() + o * t.k;
      const int64_t cnt = t.count[size_t(o)], j0 = t.reverse ? cnt - 1 : 0;
      const int64_t dj = t.reverse ? -1 : 1;
      const S* p = st + (t.start[size_t(o)] + j0) * R;
      for (int64_t n = 0, j = j0; n < cnt; ++n, j += dj, p += dj * R) {
        a0 += vload(p) * w[j];
        a1 += vload(p + L) * w[j];
      }
      std::memcpy(ot + o * R, &a0, sizeof(a0));
      std::memcpy(ot + o * R + L, &a1, sizeof(a1));
    }
    S* d = tmp + r0 * out_w;
    int64_t o = 0;
    if constexpr (std::is_same_v<S, float>)
      if (n == R)
        for (; o + 8 <= out_w; o += 8)
          for (int g = 0; g < R; g += 8) {
            VecF c[8];
            for (int i = 0; i < 8; ++i) c[i] = vload(ot + (o + i) * R + g);
            transpose8(c);
            for (int i = 0; i < 8; ++i) std::memcpy(d + (g + i) * out_w + o, &c[i], sizeof(VecF));
          }
    for (; o < out_w; ++o)
      for (int i = 0; i < n; ++i) d[i * out_w + o] = ot[o * R + i];
  }
}

// uint8 output: clamp to [0, 255] and round half to even (torch.round) by adding 2^23 in the
// default round-to-nearest-even mode: the float's low byte is then the result.
template <typename T, typename S>
void store_row(const S* acc, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, uint8_t>) {
    static_assert(std::is_same_v<S, float>, "uint8 images are resampled in float32");
    typedef uint8_t U8x32 __attribute__((vector_size(32)));
    typedef uint8_t U8x8 __attribute__((vector_size(8)));
    const VecF zero = {}, top = zero + 255.0f, magic = zero + 8388608.0f;
    const int64_t nv = n - n % 8;
    for (int64_t x = 0; x < nv; x += 8) {
      VecF v = vload(acc + x);
      v = v < zero ? zero : v;
      v = v > top ? top : v;
      v += magic;
      U8x32 bytes;
      std::memcpy(&bytes, &v, sizeof(v));
      const U8x8 o = __builtin_shufflevector(bytes, bytes, 0, 4, 8, 12, 16, 20, 24, 28);
      std::memcpy(dst + x, &o, sizeof(o));
    }
    for (int64_t x = nv; x < n; ++x) {
      const float v = std::min(std::max(acc[x], 0.0f), 255.0f);
      dst[x] = uint8_t(int((v + 8388608.0f) - 8388608.0f));
    }
  } else {
    for (int64_t x = 0; x < n; ++x) dst[x] = T(acc[x]);
  }
}

// tmp:[in_h, out_w] -> dst rows (out_h of them, contiguous, out_w wide).
template <typename T, typename S>
void vertical_pass(const S* tmp, int64_t out_w, int64_t out_h, const AxisTaps<S>& t, T* dst,
                   std::vector<S>& accbuf) {
  if (t.identity) {
    for (int64_t y = 0; y < out_h; ++y) store_row<T, S>(tmp + y * out_w, dst + y * out_w, out_w);
    return;
  }
  if (accbuf.size() < size_t(out_w)) accbuf.resize(size_t(out_w));
  for (int64_t y = 0; y < out_h; ++y) {
    S* acc = accbuf.data();
    if constexpr (std::is_same_v<T, S>) acc = dst + y * out_w;
    const S* w = t.w.data() + y * t.k;
    const int64_t cnt = t.count[size_t(y)], j0 = t.reverse ? cnt - 1 : 0;
    const int64_t dj = t.reverse ? -1 : 1;
    const S* s = tmp + (t.start[size_t(y)] + j0) * out_w;
    const S w0 = w[j0];
    for (int64_t x = 0; x < out_w; ++x) acc[x] = s[x] * w0;  // = 0 + s*w0, torch's first term
    for (int64_t n = 1, j = j0 + dj; n < cnt; ++n, j += dj) {
      s += dj * out_w;
      const S wj = w[j];
      for (int64_t x = 0; x < out_w; ++x) acc[x] += s[x] * wj;
    }
    if constexpr (!std::is_same_v<T, S>) store_row<T, S>(acc, dst + y * out_w, out_w);
  }
}

// Element offsets of every [H, W] plane of x (all dims but the last two, row-major order).
std::vector<int64_t> plane_offsets(const Tensor& x) {
  std::vector<int64_t> offs{0};
  for (int64_t d = 0; d + 2 < x.dim(); ++d) {
    std::vector<int64_t> next;
    next.reserve(offs.size() * size_t(x.size(d)));
    for (int64_t o : offs)
      for (int64_t i = 0; i < x.size(d); ++i) next.push_back(o + i * x.stride(d));
    offs.swap(next);
  }
  return offs;
}

template <typename T, typename S>
Tensor resample(const Tensor& x, int64_t top, int64_t left, int64_t h, int64_t w, int64_t out_h,
                int64_t out_w, InterpolationMode mode, bool antialias) {
  const AxisTaps<S> th = make_taps<S>(w, out_w, mode, antialias);
  const AxisTaps<S> tv = make_taps<S>(h, out_h, mode, antialias);
  Shape shape = x.shape();
  shape[shape.size() - 2] = out_h;
  shape[shape.size() - 1] = out_w;
  Tensor out = empty(shape, x.dtype());
  const T* base = static_cast<const T*>(x.data_ptr());
  T* dst = out.data_ptr<T>();
  const int64_t row_stride = x.stride(-2);
  // Scratch reused across calls of a thread (DataLoader workers): no page faults per image.
  thread_local std::vector<S> tmp, strip, accbuf;
  if (tmp.size() < size_t(h * out_w)) tmp.resize(size_t(h * out_w));
  for (int64_t off : plane_offsets(x)) {
    const T* src = base + off + top * row_stride + left;
    horizontal_pass<T, S>(src, row_stride, h, w, th, out_w, tmp.data(), strip);
    vertical_pass<T, S>(tmp.data(), out_w, out_h, tv, dst, accbuf);
    dst += out_h * out_w;
  }
  return out;
}

void check_image(const Tensor& x, const char* op) {
  MINIDL_CHECK(x.defined() && x.dim() >= 2, op, ": expected an image x:[C,H,W] or [B,C,H,W], got ",
               x.defined() ? x.shape_str() : std::string("an undefined tensor"));
  MINIDL_CHECK(x.is_cpu(), op, ": expected a CPU tensor, got x ", x.shape_str(), " on ",
               x.device());
}

// crop + resize of the window (inside the image) without copying it first.
Tensor resample_window(const Tensor& x0, int64_t top, int64_t left, int64_t h, int64_t w,
                       int64_t out_h, int64_t out_w, InterpolationMode mode, bool antialias,
                       const char* op) {
  MINIDL_CHECK(out_h > 0 && out_w > 0, op, ": output size (", out_h, ", ", out_w,
               ") must be positive (x ", x0.shape_str(), ")");
  MINIDL_CHECK(h > 0 && w > 0, op, ": crop size (", h, ", ", w, ") must be positive (x ",
               x0.shape_str(), ")");
  const Tensor x = x0.stride(-1) == 1 ? x0 : x0.contiguous();
  switch (x.dtype()) {
    case DType::u8:
      return resample<uint8_t, float>(x, top, left, h, w, out_h, out_w, mode, antialias);
    case DType::f32:
      return resample<float, float>(x, top, left, h, w, out_h, out_w, mode, antialias);
    case DType::f64:
      return resample<double, double>(x, top, left, h, w, out_h, out_w, mode, antialias);
    default:
      MINIDL_CHECK(false, op, ": expected dtype uint8, float32 or float64, got ", x.dtype(), " (x ",
                   x.shape_str(), ", mode ", mode_name(mode), ")");
  }
  return {};
}

}  // namespace

Tensor resize(const Tensor& x, int64_t out_h, int64_t out_w, InterpolationMode mode,
              bool antialias) {
  check_image(x, "resize");
  return resample_window(x, 0, 0, x.size(-2), x.size(-1), out_h, out_w, mode, antialias, "resize");
}

Tensor resized_crop(const Tensor& x, int64_t top, int64_t left, int64_t h, int64_t w, int64_t out_h,
                    int64_t out_w, InterpolationMode mode, bool antialias) {
  check_image(x, "resized_crop");
  const bool inside = top >= 0 && left >= 0 && top + h <= x.size(-2) && left + w <= x.size(-1);
  if (!inside) return resize(crop(x, top, left, h, w), out_h, out_w, mode, antialias);
  return resample_window(x, top, left, h, w, out_h, out_w, mode, antialias, "resized_crop");
}

std::pair<int64_t, int64_t> resized_output_size(int64_t h, int64_t w, int64_t size,
                                                std::optional<int64_t> max_size) {
  MINIDL_CHECK(h > 0 && w > 0 && size > 0, "Resize: image size (", h, ", ", w, ") and size ", size,
               " must be positive");
  const int64_t shorter = std::min(h, w), longer = std::max(h, w);
  int64_t new_short = size, new_long = int64_t(double(size * longer) / double(shorter));
  if (max_size) {
    MINIDL_CHECK(
        *max_size > size, "Resize: max_size = ", *max_size,
        " must be strictly greater than the requested size for the smaller edge size = ", size);
    if (new_long > *max_size) {
      new_short = int64_t(double(*max_size * new_short) / double(new_long));
      new_long = *max_size;
    }
  }
  return w <= h ? std::pair{new_long, new_short} : std::pair{new_short, new_long};
}

}  // namespace minidl::data
