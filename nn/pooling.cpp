// MaxPool2d, AvgPool2d and AdaptiveAvgPool2d modules over the pooling ops.
#include "nn/pooling.h"

#include "autograd/ops.h"

namespace minidl::nn {

namespace {
Pool2dParams params(Size2 k, Size2 s, Size2 p) {
  Pool2dParams r;
  r.kernel[0] = k.h, r.kernel[1] = k.w;
  r.stride[0] = s.h, r.stride[1] = s.w;
  r.padding[0] = p.h, r.padding[1] = p.w;
  return r;
}
}  // namespace

MaxPool2d::MaxPool2d(Size2 k, MaxPool2dOptions o)
    : kernel_size(k),
      stride(o.stride.value_or(k)),
      padding(o.padding),
      dilation(o.dilation),
      ceil_mode(o.ceil_mode) {}

Tensor MaxPool2d::forward(const Tensor& x) {
  Pool2dParams p = params(kernel_size, stride, padding);
  p.dilation[0] = dilation.h, p.dilation[1] = dilation.w;
  p.ceil_mode = ceil_mode;
  return max_pool2d(x, p);
}

std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + kernel_size.str() + ", stride=" + stride.str() +
         ", padding=" + padding.str() + ", dilation=" + dilation.str() +
         ", ceil_mode=" + (ceil_mode ? "True" : "False");
}

AvgPool2d::AvgPool2d(Size2 k, AvgPool2dOptions o)
    : kernel_size(k),
      stride(o.stride.value_or(k)),
      padding(o.padding),
      ceil_mode(o.ceil_mode),
      count_include_pad(o.count_include_pad) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  Pool2dParams p = params(kernel_size, stride, padding);
  p.ceil_mode = ceil_mode;
  p.count_include_pad = count_include_pad;
  return avg_pool2d(x, p);
}

std::string AvgPool2d::extra_repr() const {
  return "kernel_size=" + kernel_size.str() + ", stride=" + stride.str() +
         ", padding=" + padding.str();
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 out) : output_size(out) {}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  return functional::adaptive_avg_pool2d(x, output_size);
}

}  // namespace minidl::nn
