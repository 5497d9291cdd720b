// F::interpolate (nearest, nearest-exact, linear, bilinear, bicubic, trilinear, area) for 1 to 3
// spatial dims as index_select + weighted sums along one dim after the other (W, then H, then D),
// with the source indices and weights computed on the host exactly as PyTorch's CPU kernels do;
// area is adaptive average pooling, as in torch.
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

// Weights broadcast along `dim` of a tensor shaped like `like` (1 in every other dim).
Tensor weight_tensor(const std::vector<double>& v, int dim, const Tensor& like) {
  Shape s(size_t(like.dim()), 1);
  s[size_t(dim)] = int64_t(v.size());
  return tensor(v, s).to(like.device(), like.dtype());
}

// x resampled along `dim` to `out` entries by linear interpolation (2 taps).
Tensor linear_along(const Tensor& x, int dim, int64_t out, bool align_corners,
                    std::optional<double> scale) {
  const int64_t in = x.size(dim);
  const Linear1d r = x.dtype() == kFloat64 ? linear_weights<double>(in, out, align_corners, scale)
                                           : linear_weights<float>(in, out, align_corners, scale);
  Tensor a = index_select(x, dim, index_tensor(r.i0, x.device()));
  Tensor b = index_select(x, dim, index_tensor(r.i1, x.device()));
  return add(mul(weight_tensor(r.l0, dim, x), a), mul(weight_tensor(r.l1, dim, x), b));
}

// x resampled along `dim` to `out` entries by cubic convolution (4 taps).
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

// x averaged along `dim` over adaptive pooling's windows [floor(o*in/out), ceil((o+1)*in/out)):
// x (dim moved last) times the [in, out] matrix of window weights 1/len.
Tensor adaptive_avg_along(const Tensor& x, int dim, int64_t out) {
  const int64_t in = x.size(dim);
  std::vector<double> m(static_cast<size_t>(in * out), 0.0);
  for (int64_t o = 0; o < out; ++o) {
    const int64_t a = o * in / out, b = ((o + 1) * in + out - 1) / out;
    for (int64_t i = a; i < b; ++i) m[size_t(i * out + o)] = 1.0 / double(b - a);
  }
  const Tensor w = tensor(m, Shape{in, out}).to(x.device(), x.dtype());
  return matmul(x.transpose(dim, -1), w).transpose(dim, -1);
}

constexpr const char* kModes =
    "nearest | nearest-exact | linear | bilinear | bicubic | trilinear | area";

bool known_mode(const std::string& mode) {
  return mode == "nearest" || mode == "nearest-exact" || mode == "linear" || mode == "bilinear" ||
         mode == "bicubic" || mode == "trilinear" || mode == "area";
}

// The spatial rank a mode requires (0: any).
int mode_rank(const std::string& mode) {
  if (mode == "linear") return 1;
  if (mode == "bilinear" || mode == "bicubic") return 2;
  if (mode == "trilinear") return 3;
  return 0;
}

std::string list_str(const std::vector<double>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

// "5" / "(5, 7)" and "2.0" / "(2.0, 1.5)": one value as given, several as a tuple.
template <typename F>
std::string tuple_or_scalar(size_t n, F item) {
  if (n == 1) return item(0);
  std::string s = "(";
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + item(i);
  return s + ")";
}

}  // namespace

namespace functional {

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  const std::string& mode = o.mode;
  MINIDL_CHECK(x.defined(), "interpolate: undefined input");
  MINIDL_CHECK(known_mode(mode), "interpolate: mode '", mode, "' is not supported (", kModes, ")");
  MINIDL_CHECK(o.size.empty() || o.scale_factor.empty(),
               "only one of size or scale_factor should be defined");
  MINIDL_CHECK(!o.size.empty() || !o.scale_factor.empty(),
               "either size or scale_factor should be defined");
  MINIDL_CHECK(mode_rank(mode) > 0 || !o.align_corners,
               "align_corners option can only be set with the interpolating modes: linear | "
               "bilinear | bicubic | trilinear");
  MINIDL_CHECK(x.dim() >= 3 && x.dim() <= 5, "Input Error: Only 3D, 4D and 5D input Tensors ",
               "supported (got ", x.dim(), "D, shape ", x.shape_str(), ") for the modes: ", kModes,
               " (got ", mode, ")");
  const int k = int(x.dim()) - 2;
  MINIDL_CHECK(mode_rank(mode) == 0 || mode_rank(mode) == k, "Got ", x.dim(), "D input, but ", mode,
               " mode needs ", mode_rank(mode) + 2, "D input (shape ", x.shape_str(), ")");
  MINIDL_CHECK(x.is_floating_point(), "interpolate: expected a floating tensor, got ",
               dtype_name(x.dtype()));
  std::vector<int64_t> in(static_cast<size_t>(k)), out(static_cast<size_t>(k));
  std::vector<std::optional<double>> scale(static_cast<size_t>(k));
  for (int d = 0; d < k; ++d) in[size_t(d)] = x.size(2 + d);
  const bool by_size = !o.size.empty();
  const size_t given = by_size ? o.size.size() : o.scale_factor.size();
  MINIDL_CHECK(given == 1 || given == size_t(k), "Input and output must have the same number of ",
               "spatial dimensions, but got input with spatial dimensions of ", shape_str(in),
               " and ",
               by_size ? "output size of " + shape_str(o.size)
                       : "scale_factor of " + list_str(o.scale_factor),
               ". Please provide input tensor in (N, C, d1, d2, ...,dK) format and output size in ",
               "(o1, o2, ...,oK) format.");
  for (size_t d = 0; d < size_t(k); ++d) {
    if (by_size) {
      out[d] = o.size[given == 1 ? 0 : d];
    } else {
      const double sf = o.scale_factor[given == 1 ? 0 : d];
      MINIDL_CHECK(sf > 0, "interpolate: scale_factor must be positive, got ",
                   list_str(o.scale_factor));
      scale[d] = sf;
      out[d] = int64_t(std::floor(double(in[d]) * sf));
    }
  }
  bool positive = true;
  std::string ins, outs;
  const char* names[] = {"D", "H", "W"};
  for (int d = 0; d < k; ++d) {
    positive = positive && in[size_t(d)] > 0 && out[size_t(d)] > 0;
    const std::string name = names[3 - k + d];
    ins += (d ? ", " : "") + name + ": " + std::to_string(in[size_t(d)]);
    outs += (d ? ", " : "") + name + ": " + std::to_string(out[size_t(d)]);
  }
  MINIDL_CHECK(positive, "Input and output sizes should be greater than 0, but got input (", ins,
               ") output (", outs, ")");
  if (mode == "nearest") {
    if (in == out) return x.clone();
    Tensor r = x;
    for (int d = 0; d < k; ++d)
      if (out[size_t(d)] != in[size_t(d)])
        r = index_select(
            r, 2 + d,
            index_tensor(nearest_indices(in[size_t(d)], out[size_t(d)], scale[size_t(d)]),
                         x.device()));
    return r;
  }
  if (mode == "nearest-exact") {
    Tensor r = x;
    for (int d = 0; d < k; ++d)
      r = index_select(
          r, 2 + d,
          index_tensor(nearest_exact_indices(in[size_t(d)], out[size_t(d)], scale[size_t(d)]),
                       x.device()));
    return r;
  }
  if (mode == "area") {  // adaptive average pooling to the output size, torch's definition
    if (k == 2) return adaptive_avg_pool2d(x, Size2(out[0], out[1]));
    if (k == 1) return adaptive_avg_pool2d(x.unsqueeze(2), Size2(1, out[0])).squeeze(2);
    Tensor r = x;
    for (int d = k - 1; d >= 0; --d) r = adaptive_avg_along(r, 2 + d, out[size_t(d)]);
    return r;
  }
  const bool ac = o.align_corners.value_or(false);
  Tensor r = x;  // one dim after the other from the last, as torch nests the weights
  for (int d = k - 1; d >= 0; --d)
    r = mode == "bicubic" ? cubic_along(r, 2 + d, out[size_t(d)], ac, scale[size_t(d)])
                          : linear_along(r, 2 + d, out[size_t(d)], ac, scale[size_t(d)]);
  return r;
}

Tensor interpolate(const Tensor& x, std::optional<Size2> size, std::optional<Scale2> scale_factor,
                   const std::string& mode, std::optional<bool> align_corners) {
  InterpolateOptions o;
  if (size) o.size = size->scalar ? std::vector<int64_t>{size->h} : std::vector{size->h, size->w};
  if (scale_factor)
    o.scale_factor = scale_factor->scalar ? std::vector<double>{scale_factor->h}
                                          : std::vector{scale_factor->h, scale_factor->w};
  o.mode = mode;
  o.align_corners = align_corners;
  return interpolate(x, o);
}

}  // namespace functional

Upsample::Upsample(std::optional<Size2> size, std::optional<Scale2> scale, std::string mode,
                   std::optional<bool> ac) {
  if (size)
    options.size = size->scalar ? std::vector<int64_t>{size->h} : std::vector{size->h, size->w};
  if (scale)
    options.scale_factor =
        scale->scalar ? std::vector<double>{scale->h} : std::vector{scale->h, scale->w};
  options.mode = std::move(mode);
  options.align_corners = ac;
  MINIDL_CHECK(known_mode(options.mode), "Upsample: mode '", options.mode, "' is not supported (",
               kModes, ")");
}

Upsample::Upsample(InterpolateOptions o) : options(std::move(o)) {
  MINIDL_CHECK(known_mode(options.mode), "Upsample: mode '", options.mode, "' is not supported (",
               kModes, ")");
}

Tensor Upsample::forward(const Tensor& x) {
  return functional::interpolate(x, options);
}

std::string Upsample::extra_repr() const {
  const InterpolateOptions& o = options;
  std::string info;
  if (!o.scale_factor.empty())
    info = "scale_factor=" + tuple_or_scalar(o.scale_factor.size(),
                                             [&](size_t i) { return py_float(o.scale_factor[i]); });
  else if (!o.size.empty())
    info = "size=" +
           tuple_or_scalar(o.size.size(), [&](size_t i) { return std::to_string(o.size[i]); });
  else
    info = "size=None";
  return info + ", mode=" + o.mode;
}

}  // namespace minidl::nn
