// BatchNorm1d/2d and LayerNorm over the fused batch_norm/layer_norm ops (which record autograd
// and update running statistics in place).
#include "nn/normalization.h"

#include <limits>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "tensor/variants.h"

namespace minidl::nn {

namespace {

// A half input into a layer whose parameters are fp32 (AMP O2 keeps normalisation layers in
// fp32, as Apex does). batch_norm and layer_norm take it as it is (their kernels read half,
// compute in f32 and write the input's dtype; grads for the parameters come out in f32);
// RMSNorm, a composite, normalises an f32 copy and returns the input's dtype.
bool half_into_fp32(const Tensor& x, const Tensor& w) {
  return (x.dtype() == kFloat16 || x.dtype() == kBFloat16) && w.defined() && w.dtype() == kFloat32;
}

std::string py_bool(bool b) {
  return b ? "True" : "False";
}

void init_batch_norm(Module& m, BatchNormState& s, int64_t num_features, BatchNormOptions opt,
                     const char* layer) {
  MINIDL_CHECK(num_features > 0, layer, ": num_features must be positive, got ", num_features);
  MINIDL_CHECK(opt.eps >= 0, layer, ": eps must be non-negative, got ", opt.eps);
  s.num_features = num_features;
  s.opt = opt;
  if (opt.affine) {
    s.weight = ones({num_features});
    s.bias = zeros({num_features});
    m.register_parameter("weight", &s.weight);
    m.register_parameter("bias", &s.bias);
  }
  if (opt.track_running_stats) {
    s.running_mean = zeros({num_features});
    s.running_var = ones({num_features});
    s.num_batches_tracked = zeros({}, kInt64);
    m.register_buffer("running_mean", &s.running_mean);
    m.register_buffer("running_var", &s.running_var);
    m.register_buffer("num_batches_tracked", &s.num_batches_tracked);
  }
}

Tensor batch_norm_forward(BatchNormState& s, bool training, const Tensor& x, const char* layer,
                          const char* expected) {
  MINIDL_CHECK(x.defined(), layer, ": undefined input");
  const bool ok =
      std::string_view(layer) == "BatchNorm1d" ? (x.dim() == 2 || x.dim() == 3) : x.dim() == 4;
  MINIDL_CHECK(ok, layer, ": expected ", expected, " input, got shape ", x.shape_str());
  MINIDL_CHECK(x.size(1) == s.num_features, layer, ": expected ", s.num_features,
               " channels (dim 1), got input of shape ", x.shape_str());
  double momentum = s.opt.momentum.value_or(0.0);
  if (training && s.opt.track_running_stats) {
    {
      NoGradGuard guard;
      add_(s.num_batches_tracked, Scalar(1));
    }
    if (!s.opt.momentum) momentum = 1.0 / double(s.num_batches_tracked.item<int64_t>());
  }
  const bool use_batch_stats = training || !s.opt.track_running_stats;
  return batch_norm(x, s.weight, s.bias, s.running_mean, s.running_var, use_batch_stats, momentum,
                    s.opt.eps)
      .out;
}

std::string batch_norm_repr(const BatchNormState& s) {
  return std::to_string(s.num_features) + ", eps=" + py_float(s.opt.eps) +
         ", momentum=" + (s.opt.momentum ? py_float(*s.opt.momentum) : std::string("None")) +
         ", affine=" + py_bool(s.opt.affine) +
         ", track_running_stats=" + py_bool(s.opt.track_running_stats);
}

}  // namespace

BatchNorm1d::BatchNorm1d(int64_t features, BatchNormOptions options) {
  init_batch_norm(*this, *this, features, options, "BatchNorm1d");
}
Tensor BatchNorm1d::forward(const Tensor& x) {
  return batch_norm_forward(*this, is_training(), x, "BatchNorm1d", "2D [N, C] or 3D [N, C, L]");
}
std::string BatchNorm1d::extra_repr() const {
  return batch_norm_repr(*this);
}

BatchNorm2d::BatchNorm2d(int64_t features, BatchNormOptions options) {
  init_batch_norm(*this, *this, features, options, "BatchNorm2d");
}
Tensor BatchNorm2d::forward(const Tensor& x) {
  return batch_norm_forward(*this, is_training(), x, "BatchNorm2d", "4D [N, C, H, W]");
}
std::string BatchNorm2d::extra_repr() const {
  return batch_norm_repr(*this);
}

LayerNorm::LayerNorm(Shape shape, double eps_, bool affine)
    : normalized_shape(std::move(shape)), eps(eps_), elementwise_affine(affine) {
  MINIDL_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape must not be empty");
  for (int64_t d : normalized_shape)
    MINIDL_CHECK(d > 0, "LayerNorm: normalized_shape must be positive, got ",
                 shape_str(normalized_shape));
  if (elementwise_affine) {
    weight = ones(normalized_shape);
    bias = zeros(normalized_shape);
    register_parameter("weight", &weight);
    register_parameter("bias", &bias);
  }
}

LayerNorm::LayerNorm(Shape shape, LayerNormOptions o)
    : LayerNorm(std::move(shape), o.eps, o.elementwise_affine) {
  if (!o.bias) bias = Tensor();  // the registered slot now holds nothing: no "bias" parameter
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, normalized_shape, weight, bias, eps).out;
}

ResidualNorm residual_layer_norm(const Tensor& x, const Tensor& y, LayerNorm& ln,
                                 bool autocast_out) {
  const DeviceType dev = x.device().type;
  const DType sum_dtype = y.defined() ? result_type(x, y) : x.dtype();
  const bool autocast = amp::is_autocast_enabled(dev);
  // Under autocast the sum is f32, or (a 16-bit residual stream) the autocast dtype with the
  // normalised rows in it too: what layer_norm's f32 policy and the next Linear's cast give.
  // Other 16-bit sums: layer_norm's own cast policy decides (the module's call).
  const bool stream16 = autocast && autocast_out && sum_dtype == amp::get_autocast_dtype(dev) &&
                        x.dtype() == sum_dtype;
  if (!variants::fused("residual_layer_norm") || ln.has_forward_hooks() ||
      (autocast && sum_dtype != kFloat32 && !stream16)) {
    Tensor sum = y.defined() ? x + y : x;
    return {sum, ln(sum)};
  }
  std::optional<DType> out_dtype;
  if (autocast_out && autocast) out_dtype = amp::get_autocast_dtype(dev);
  AddLayerNormResult r =
      add_layer_norm(x, y, ln.normalized_shape, ln.weight, ln.bias, ln.eps, out_dtype);
  return {r.sum, r.out};
}

std::string LayerNorm::extra_repr() const {
  std::string s = "(";
  for (size_t i = 0; i < normalized_shape.size(); ++i)
    s += std::to_string(normalized_shape[i]) + (normalized_shape.size() == 1 ? "," : "") +
         (i + 1 < normalized_shape.size() ? ", " : "");
  return s + "), eps=" + py_float(eps) + ", elementwise_affine=" + py_bool(elementwise_affine);
}

RMSNorm::RMSNorm(Shape shape, std::optional<double> eps_, bool affine)
    : normalized_shape(std::move(shape)), eps(eps_), elementwise_affine(affine) {
  MINIDL_CHECK(!normalized_shape.empty(), "RMSNorm: normalized_shape must not be empty");
  for (int64_t d : normalized_shape)
    MINIDL_CHECK(d > 0, "RMSNorm: normalized_shape must be positive, got ",
                 shape_str(normalized_shape));
  MINIDL_CHECK(!eps || *eps >= 0, "RMSNorm: eps must be non-negative, got ", *eps);
  if (elementwise_affine) {
    weight = ones(normalized_shape);
    register_parameter("weight", &weight);
  }
}

// x:[*, normalized_shape]
Tensor RMSNorm::forward(const Tensor& x) {
  if (half_into_fp32(x, weight)) return forward(x.to(kFloat32)).to(x.dtype());
  const int64_t nd = int64_t(normalized_shape.size());
  MINIDL_CHECK(x.dim() >= nd, "RMSNorm: input of shape ", x.shape_str(),
               " has fewer dims than normalized_shape ", shape_str(normalized_shape));
  DimList dims;
  for (int64_t i = 0; i < nd; ++i) {
    MINIDL_CHECK(x.size(x.dim() - nd + i) == normalized_shape[size_t(i)],
                 "RMSNorm: input of shape ", x.shape_str(), " does not end with normalized_shape ",
                 shape_str(normalized_shape));
    dims.push_back(x.dim() - nd + i);
  }
  const double e = eps ? *eps
                       : (x.dtype() == kFloat64 ? std::numeric_limits<double>::epsilon()
                                                : double(std::numeric_limits<float>::epsilon()));
  Tensor y = x * rsqrt(mean(square(x), dims, /*keepdim=*/true) + e);
  return weight.defined() ? y * weight : y;
}

std::string RMSNorm::extra_repr() const {
  std::string s = "(";
  for (size_t i = 0; i < normalized_shape.size(); ++i)
    s += std::to_string(normalized_shape[i]) + (normalized_shape.size() == 1 ? "," : "") +
         (i + 1 < normalized_shape.size() ? ", " : "");
  return s + "), eps=" + (eps ? py_float(*eps) : std::string("None")) +
         ", elementwise_affine=" + py_bool(elementwise_affine);
}

}  // namespace minidl::nn
