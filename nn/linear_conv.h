// Parametrised layers: Linear, Conv2d (PyTorch constructor arguments and default init:
// weight kaiming_uniform_(a=sqrt(5)), bias U(-1/sqrt(fan_in), 1/sqrt(fan_in))), and Dropout.
// Hyperparameters beyond the sizes come in an options struct named as libtorch's, filled with
// designated initializers: Conv2d(1, 16, 3, {.stride = 2, .padding = 1}). A Generator for the
// initialisation is always the trailing argument.
#pragma once

#include "nn/functional.h"
#include "nn/module.h"
#include "tensor/random.h"

namespace minidl::nn {

namespace detail {
// PyTorch's reset_parameters of Linear and the conv layers: weight kaiming_uniform_(a=sqrt(5)),
// bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in from the weight's shape.
void default_init(Tensor& weight, Tensor& bias, Generator* gen);
}  // namespace detail

struct LinearOptions {
  bool bias = true;
};

// y = x @ weight.T + bias; x:[*, in] -> [*, out]; weight:[out, in], bias:[out].
class Linear : public Cloneable<Linear> {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr);
  Linear(int64_t in_features, int64_t out_features, LinearOptions options, Generator* gen = nullptr)
      : Linear(in_features, out_features, options.bias, gen) {}
  void reset_parameters(Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Linear"; }
  std::string extra_repr() const override;

  int64_t in_features, out_features;
  Tensor weight, bias;  // bias undefined when bias=false
};

// torch.nn.Conv2d's keyword arguments (padding_mode is always "zeros").
struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// x:[N, in, H, W] -> [N, out, H', W']; weight:[out, in/groups, kh, kw], bias:[out].
// Conv2d(1, 16, 3) or Conv2d(1, 16, 3, {.padding = 1}); there is deliberately no positional
// Conv2d(1, 16, 3, 1) (stride or padding? torch's 4th argument is stride).
class Conv2d : public Cloneable<Conv2d> {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options = {},
         Generator* gen = nullptr);
  void reset_parameters(Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Conv2d"; }
  std::string extra_repr() const override;

  int64_t in_channels, out_channels;
  Size2 kernel_size, stride, padding, dilation;
  int64_t groups;
  Tensor weight, bias;
};

// Training: x * mask (zeroes with probability p, scales survivors by 1/(1-p)); eval: identity.
class Dropout : public Cloneable<Dropout> {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Dropout"; }
  std::string extra_repr() const override;

  double p;
  Generator* gen;  // nullptr: default generator
};

}  // namespace minidl::nn
