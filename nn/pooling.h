// Pooling layers: MaxPool2d, AvgPool2d (PyTorch arguments; stride defaults to kernel_size)
// and AdaptiveAvgPool2d. Inputs x:[N,C,H,W]. Arguments after kernel_size come in an options
// struct: MaxPool2d(3, {.stride = 2, .padding = 1}).
#pragma once

#include <optional>

#include "nn/functional.h"
#include "nn/module.h"

namespace minidl::nn {

struct MaxPool2dOptions {
  std::optional<Size2> stride = std::nullopt;  // nullopt: kernel_size
  Size2 padding = 0;
  Size2 dilation = 1;
  bool ceil_mode = false;
};

class MaxPool2d : public Cloneable<MaxPool2d> {
 public:
  explicit MaxPool2d(Size2 kernel_size, MaxPool2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  Size2 kernel_size, stride, padding, dilation;
  bool ceil_mode;
};

struct AvgPool2dOptions {
  std::optional<Size2> stride = std::nullopt;  // nullopt: kernel_size
  Size2 padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
};

class AvgPool2d : public Cloneable<AvgPool2d> {
 public:
  explicit AvgPool2d(Size2 kernel_size, AvgPool2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;
  Size2 kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
};

class AdaptiveAvgPool2d : public Cloneable<AdaptiveAvgPool2d> {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override { return "output_size=" + output_size.str(); }
  Size2 output_size;
};

}  // namespace minidl::nn
