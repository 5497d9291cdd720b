// Normalisation layers (torch.nn.BatchNorm1d/2d, LayerNorm): parameters weight/bias, buffers
// running_mean, running_var, num_batches_tracked (int64), PyTorch names and defaults.
#pragma once
#include <optional>

#include "nn/functional.h"
#include "nn/module.h"
#include "autograd/ops.h"

namespace minidl::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  std::optional<double> momentum = 0.1;  // nullopt: cumulative moving average
  bool affine = true;
  bool track_running_stats = true;
};

// The members of BatchNorm1d/2d and SyncBatchNorm (a base of each, not a Module itself: the layers
// register its tensors as their own members), so `bn->running_mean`, `bn->weight` read as in
// PyTorch. weight/bias are parameters (undefined unless affine), running_mean/running_var/
// num_batches_tracked buffers (undefined unless track_running_stats).
struct BatchNormState {
  int64_t num_features = 0;
  BatchNormOptions opt;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
};

// x:[N,C] or [N,C,L]
class BatchNorm1d : public Cloneable<BatchNorm1d>, public BatchNormState {
 public:
  // BatchNorm1d(64, {.momentum = 0.01}): named options (a positional BatchNorm1d(64, 0.1) would
  // silently set eps, not momentum).
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions opt = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "BatchNorm1d"; }
  std::string extra_repr() const override;
};

// x:[N,C,H,W]
class BatchNorm2d : public Cloneable<BatchNorm2d>, public BatchNormState {
 public:
  // BatchNorm2d(64, {.momentum = 0.01}): named options (a positional BatchNorm2d(64, 0.1) would
  // silently set eps, not momentum).
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions opt = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "BatchNorm2d"; }
  std::string extra_repr() const override;
};

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;
  bool bias = true;  // torch 2.1's bias=False drops the bias parameter
};

// Normalises over the trailing dims `normalized_shape`; weight (ones) and bias (zeros) have
// that shape when elementwise_affine. LayerNorm(64, {.eps = 1e-6, .bias = false}).
class LayerNorm : public Cloneable<LayerNorm> {
 public:
  LayerNorm(Shape normalized_shape, LayerNormOptions options);
  LayerNorm(int64_t normalized_size, LayerNormOptions options)
      : LayerNorm(Shape{normalized_size}, options) {}
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  explicit LayerNorm(int64_t normalized_size, double eps_ = 1e-5, bool elementwise_affine_ = true)
      : LayerNorm(Shape{normalized_size}, eps_, elementwise_affine_) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  Shape normalized_shape;
  double eps;
  bool elementwise_affine;
  Tensor weight, bias;
};

// A pre-norm transformer's residual step through `ln`: sum = x + y (y may be undefined: x),
// out = ln(sum), as one autograd add_layer_norm node. With autocast_out, under autocast on x's
// device (an f32 sum, or x and the sum in the autocast dtype: a 16-bit residual stream) out comes
// in the autocast dtype: for a consumer that would cast it so anyway (a Linear), the same values
// without the cast. The plain x + y and ln(sum) calls when MINIDL_UNFUSED names
// residual_layer_norm or ln has forward hooks.
struct ResidualNorm {
  Tensor sum, out;
};
ResidualNorm residual_layer_norm(const Tensor& x, const Tensor& y, LayerNorm& ln,
                                 bool autocast_out = false);

// torch.nn.RMSNorm (2.4): y = x / sqrt(mean(x^2 over normalized_shape) + eps) * weight.
// eps = nullopt takes the machine epsilon of the computation (f64: DBL_EPSILON, otherwise
// FLT_EPSILON: torch uses the opmath type's, so also for f16/bf16). weight (ones) when
// elementwise_affine. A composite of differentiable ops.
class RMSNorm : public Cloneable<RMSNorm> {
 public:
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt,
                   bool elementwise_affine = true);
  explicit RMSNorm(int64_t dim, std::optional<double> eps_ = std::nullopt,
                   bool elementwise_affine_ = true)
      : RMSNorm(Shape{dim}, eps_, elementwise_affine_) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "RMSNorm"; }
  std::string extra_repr() const override;
  Shape normalized_shape;
  std::optional<double> eps;
  bool elementwise_affine;
  Tensor weight;
};

}  // namespace minidl::nn
