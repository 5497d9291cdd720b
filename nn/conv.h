// Conv1d (a composite over conv2d with a unit height) and ConvTranspose2d (over the
// differentiable conv_transpose2d op), with torch.nn's arguments, default init, weight shapes
// and state_dict keys. Options as libtorch's: Conv1d(4, 8, 3, {.padding = 1}); the init
// Generator is the trailing argument.
#pragma once

#include <array>

#include "nn/functional.h"
#include "nn/module.h"
#include "tensor/random.h"

namespace minidl::nn {

namespace functional {
// torch.nn.functional.conv1d: x:[N,C,L] or [C,L], w:[O,C/groups,k], bias:[O] -> [N,O,Lo].
// Runs conv2d on x:[N,C,1,L] with w:[O,C/groups,1,k] (views; gradients flow through them).
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& bias = {}, int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);
}  // namespace functional

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// x:[N, in, L] -> [N, out, Lo]; weight:[out, in/groups, k], bias:[out].
class Conv1d : public Cloneable<Conv1d> {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions options = {},
         Generator* gen = nullptr);
  void reset_parameters(Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Conv1d"; }
  std::string extra_repr() const override;

  int64_t in_channels, out_channels, kernel_size, stride, padding, dilation, groups;
  Tensor weight, bias;
};

// torch.nn.ConvTranspose2d's keyword arguments, in its order.
struct ConvTranspose2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 output_padding = 0;  // < stride or < dilation
  int64_t groups = 1;
  bool bias = true;
  Size2 dilation = 1;
};

// x:[N, in, H, W] -> [N, out, Ho, Wo], Ho = (H-1)*stride - 2*padding + dilation*(kh-1) +
// output_padding + 1; weight:[in, out/groups, kh, kw] (torch's transposed layout), bias:[out].
// Default init as torch: fan_in of that weight = out/groups * kh * kw.
class ConvTranspose2d : public Cloneable<ConvTranspose2d> {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                  ConvTranspose2dOptions options = {}, Generator* gen = nullptr);
  void reset_parameters(Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;

  int64_t in_channels, out_channels;
  Size2 kernel_size, stride, padding, output_padding, dilation;
  int64_t groups;
  Tensor weight, bias;
};

}  // namespace minidl::nn
