// F::interpolate (nearest, nearest-exact, bilinear, bicubic, area) as index_select + weighted sums
// along W then H, with the source indices and weights computed on the host exactly as PyTorch's
// CPU kernels do; area is adaptive average pooling, as in torch.
#include "nn/upsample.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>
#include <vector>

#include "autograd/ops.h"

namespace minidl::nn {

std::string Scale2::str() const {
  if (scalar) return py_float(h);
  std::ostringstream os;
  os << "(" << py_float(h) << ", " << py_float(w) << ")";
  return os.str();
}

namespace {

// PyTorch's compute_scales_value: 1/scale when a positive scale was given, else in/out.
template <typename T>
T scales_value(std::optional<double> scale, int64_t in, int64_t out) {
  return scale && *scale > 0 ? T(1.0 / *scale) : T(in) / T(out);
}

// nearest_idx (UpSample.h): the source index of each output index, in float arithmetic.
std::vector<int64_t> nearest_indices(int64_t in, int64_t out, std::optional<double> scale) {
  std::vector<int64_t> idx(static_cast<size_t>(out));
  const float s = scales_value<float>(scale, in, out);
  for (int64_t i = 0; i < out; ++i) {
    if (out == in)
      idx[size_t(i)] = i;
    else if (out == 2 * in)
      idx[size_t(i)] = i >> 1;
    else
      idx[size_t(i)] = std::min(int64_t(std::floor(float(i) * s)), in - 1);
  }
  return idx;
}

// nearest_exact_idx (UpSample.h): floorf((dst + 0.5) * s), s = 1/scale (or in/out) in float.
std::vector<int64_t> nearest_exact_indices(int64_t in, int64_t out, std::optional<double> scale) {
  std::vector<int64_t> idx(static_cast<size_t>(out));
  const float s = scales_value<float>(scale, in, out);
  for (int64_t i = 0; i < out; ++i)
    idx[size_t(i)] = std::min(int64_t(std::floor(float((double(i) + 0.5) * double(s)))), in - 1);
  return idx;
}

// area_pixel_compute_scale (UpSample.h): (in-1)/(out-1) with align_corners (0 for one output),
// else scales_value.
template <typename T>
T source_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? T(in - 1) / T(out - 1) : T(0);
  return scales_value<T>(scale, in, out);
}

// area_pixel_compute_source_index before its clamp at 0 (which the linear modes apply and
// cubic does not): the source coordinate of output index i.
template <typename T>
T source_coordinate(T s, int64_t i, bool align_corners) {
  return align_corners ? s * T(i) : s * (T(i) + T(0.5)) - T(0.5);
}

struct Linear1d {
  std::vector<int64_t> i0, i1;
  std::vector<double> l0, l1;
};

// compute_indices_weights_linear (UpSampleKernel.cpp) in the kernel's opmath type T.
template <typename T>
Linear1d linear_weights(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  Linear1d r;
  const T s = source_scale<T>(in, out, align_corners, scale);
  for (int64_t i = 0; i < out; ++i) {
    T src = source_coordinate(s, i, align_corners);
    if (src < T(0)) src = T(0);
    const int64_t i0 = int64_t(src);
    const int64_t off = i0 < in - 1 ? 1 : 0;
    const T lambda1 = src - T(i0);
    const T lambda0 = T(1) - lambda1;
    r.i0.push_back(i0);
    r.i1.push_back(i0 + off);
    r.l0.push_back(double(lambda0));
    r.l1.push_back(double(lambda1));
  }
  return r;
}

// Four taps per output index (cubic convolution): source indices and their weights.
struct Cubic1d {
  std::array<std::vector<int64_t>, 4> idx;
  std::array<std::vector<double>, 4> w;
};

// HelperInterpCubic::compute_indices_weights (UpSampleKernel.cpp) in the opmath type T: the
// source coordinate is not clamped at 0 (cubic), guard_index_and_lambda keeps the tap inside the
// input and t in [0, 1], and the taps at i0-1 .. i0+2 are clamped to the input's border.
template <typename T>
Cubic1d cubic_weights(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  Cubic1d r;
  const T s = source_scale<T>(in, out, align_corners, scale);
  const T A = T(-0.75);  // get_cubic_upsample_coefficients
  auto conv1 = [A](T x) { return ((A + T(2)) * x - (A + T(3))) * x * x + T(1); };  // |x| <= 1
  auto conv2 = [A](T x) {
    return ((A * x - T(5) * A) * x + T(8) * A) * x - T(4) * A;
  };  // 1 < |x| < 2
  for (int64_t i = 0; i < out; ++i) {
    const T src = source_coordinate(s, i, align_corners);
    const int64_t i0 = std::min(int64_t(std::floor(src)), in - 1);
    const T t = std::min(std::max(src - T(i0), T(0)), T(1));
    const T c[4] = {conv2(t + T(1)), conv1(t), conv1(T(1) - t), conv2(T(2) - t)};
    for (size_t j = 0; j < 4; ++j) {
      r.idx[j].push_back(std::clamp<int64_t>(i0 - 1 + int64_t(j), 0, in - 1));
      r.w[j].push_back(double(c[j]));
    }
  }
  return r;
}

Tensor index_tensor(const std::vector<int64_t>& v, Device dev) {
  return tensor(v).to(dev);
}

// Weights broadcast along `dim` of a 4-D tensor.
Tensor weight_tensor(const std::vector<double>& v, int dim, const Tensor& like) {
  Shape s{1, 1, 1, 1};
  s[size_t(dim)] = int64_t(v.size());
  return tensor(v, s).to(like.device(), like.dtype());
}

// x resampled along `dim` (2 or 3) to `out` entries.
Tensor linear_along(const Tensor& x, int dim, int64_t out, bool align_corners,
                    std::optional<double> scale) {
  const int64_t in = x.size(dim);
  const Linear1d r = x.dtype() == kFloat64 ? linear_weights<double>(in, out, align_corners, scale)
                                           : linear_weights<float>(in, out, align_corners, scale);
  Tensor a = index_select(x, dim, index_tensor(r.i0, x.device()));
  Tensor b = index_select(x, dim, index_tensor(r.i1, x.device()));
  return add(mul(weight_tensor(r.l0, dim, x), a), mul(weight_tensor(r.l1, dim, x), b));
}

// x resampled along `dim` (2 or 3) to `out` entries by cubic convolution (4 taps).
Tensor cubic_along(const Tensor& x, int dim, int64_t out, bool align_corners,
                   std::optional<double> scale) {
  const int64_t in = x.size(dim);
  const Cubic1d r = x.dtype() == kFloat64 ? cubic_weights<double>(in, out, align_corners, scale)
                                          : cubic_weights<float>(in, out, align_corners, scale);
  Tensor sum;
  for (size_t j = 0; j < 4; ++j) {
    Tensor term = mul(weight_tensor(r.w[j], dim, x),
                      index_select(x, dim, index_tensor(r.idx[j], x.device())));
    sum = j == 0 ? term : add(sum, term);
  }
  return sum;
}

bool known_mode(const std::string& mode) {
  return mode == "nearest" || mode == "nearest-exact" || mode == "bilinear" || mode == "bicubic" ||
         mode == "area";
}

}  // namespace

namespace functional {

Tensor interpolate(const Tensor& x, std::optional<Size2> size, std::optional<Scale2> scale_factor,
                   const std::string& mode, std::optional<bool> align_corners) {
  MINIDL_CHECK(x.defined(), "interpolate: undefined input");
  MINIDL_CHECK(known_mode(mode), "interpolate: mode '", mode,
               "' is not supported (nearest | nearest-exact | bilinear | bicubic | area; 4-D "
               "input)");
  MINIDL_CHECK(!(size && scale_factor), "only one of size or scale_factor should be defined");
  MINIDL_CHECK(size || scale_factor, "either size or scale_factor should be defined");
  MINIDL_CHECK(mode == "bilinear" || mode == "bicubic" || !align_corners,
               "align_corners option can only be set with the interpolating modes: linear | "
               "bilinear | bicubic | trilinear");
  MINIDL_CHECK(x.dim() == 4, "interpolate: got ", x.dim(), "D input of shape ", x.shape_str(),
               ", but ", mode, " mode needs 4D input [N, C, H, W]");
  MINIDL_CHECK(x.is_floating_point(), "interpolate: expected a floating tensor, got ",
               dtype_name(x.dtype()));
  const int64_t H = x.size(2), W = x.size(3);
  int64_t oh, ow;
  std::optional<double> sh, sw;
  if (size) {
    oh = size->h;
    ow = size->w;
  } else {
    sh = scale_factor->h;
    sw = scale_factor->w;
    MINIDL_CHECK(*sh > 0 && *sw > 0, "interpolate: scale_factor must be positive, got ",
                 scale_factor->str());
    oh = int64_t(std::floor(double(H) * *sh));
    ow = int64_t(std::floor(double(W) * *sw));
  }
  MINIDL_CHECK(H > 0 && W > 0 && oh > 0 && ow > 0, "Input and output sizes should be greater ",
               "than 0, but got input (H: ", H, ", W: ", W, ") output (H: ", oh, ", W: ", ow, ")");
  if (mode == "nearest") {
    if (oh == H && ow == W) return x.clone();
    Tensor out = x;
    if (oh != H) out = index_select(out, 2, index_tensor(nearest_indices(H, oh, sh), x.device()));
    if (ow != W) out = index_select(out, 3, index_tensor(nearest_indices(W, ow, sw), x.device()));
    return out;
  }
  if (mode == "nearest-exact") {
    Tensor rows = index_select(x, 2, index_tensor(nearest_exact_indices(H, oh, sh), x.device()));
    return index_select(rows, 3, index_tensor(nearest_exact_indices(W, ow, sw), x.device()));
  }
  if (mode == "area") return adaptive_avg_pool2d(x, Size2(oh, ow));  // torch's definition
  const bool ac = align_corners.value_or(false);
  if (mode == "bicubic") {
    Tensor cols = cubic_along(x, 3, ow, ac, sw);  // [N,C,H,ow]
    return cubic_along(cols, 2, oh, ac, sh);      // [N,C,oh,ow]
  }
  Tensor cols = linear_along(x, 3, ow, ac, sw);  // [N,C,H,ow]
  return linear_along(cols, 2, oh, ac, sh);      // [N,C,oh,ow]
}

}  // namespace functional

Upsample::Upsample(std::optional<Size2> size_, std::optional<Scale2> scale, std::string mode_,
                   std::optional<bool> ac)
    : size(size_), scale_factor(scale), mode(std::move(mode_)), align_corners(ac) {
  MINIDL_CHECK(known_mode(mode), "Upsample: mode '", mode,
               "' is not supported (nearest | nearest-exact | bilinear | bicubic | area)");
}

Tensor Upsample::forward(const Tensor& x) {
  return functional::interpolate(x, size, scale_factor, mode, align_corners);
}

std::string Upsample::extra_repr() const {
  std::string info = scale_factor ? "scale_factor=" + scale_factor->str()
                                  : "size=" + (size ? size->str() : std::string("None"));
  return info + ", mode=" + mode;
}

}  // namespace minidl::nn
