// Conv1d, ConvTranspose2d and functional::conv1d.
#include "nn/conv.h"

#include "autograd/ops.h"
#include "nn/conv_checks.h"
#include "nn/linear_conv.h"

namespace minidl::nn {

Tensor functional::conv1d(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride,
                          int64_t padding, int64_t dilation, int64_t groups) {
  MINIDL_CHECK(x.defined() && w.defined(), "conv1d: undefined input or weight");
  MINIDL_CHECK(x.dim() == 2 || x.dim() == 3, "conv1d: expected a 2-D [C,L] or 3-D [N,C,L] input, ",
               "got ", x.shape_str());
  MINIDL_CHECK(w.dim() == 3, "conv1d: expected a 3-D weight [out, in/groups, k], got ",
               w.shape_str());
  Conv2dParams p;
  p.stride[1] = stride;
  p.padding[1] = padding;
  p.dilation[1] = dilation;
  p.groups = groups;
  // x:[N,C,L] -> [N,C,1,L]; w:[O,C/g,k] -> [O,C/g,1,k]; out [N,O,1,Lo] -> [N,O,Lo]
  return conv2d(x.unsqueeze(-2), w.unsqueeze(2), bias, p).squeeze(-2);
}

Conv1d::Conv1d(int64_t in, int64_t out, int64_t k, Conv1dOptions o, Generator* gen)
    : in_channels(in),
      out_channels(out),
      kernel_size(k),
      stride(o.stride),
      padding(o.padding),
      dilation(o.dilation),
      groups(o.groups) {
  detail::check_conv_channels("Conv1d", in, out, groups);
  MINIDL_CHECK(k > 0 && stride > 0 && dilation > 0 && padding >= 0, "Conv1d: invalid kernel_size ",
               k, ", stride ", stride, ", padding ", padding, " or dilation ", dilation);
  weight = empty({out, in / groups, k});
  if (o.bias) bias = empty({out});
  reset_parameters(gen);
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

void Conv1d::reset_parameters(Generator* gen) {
  detail::default_init(weight, bias, gen);
}

Tensor Conv1d::forward(const Tensor& x) {
  return functional::conv1d(x, weight, bias, stride, padding, dilation, groups);
}

std::string Conv1d::extra_repr() const {
  auto one = [](int64_t v) { return "(" + std::to_string(v) + ",)"; };
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + one(kernel_size) + ", stride=" + one(stride);
  if (padding != 0) s += ", padding=" + one(padding);
  if (dilation != 1) s += ", dilation=" + one(dilation);
  if (groups != 1) s += ", groups=" + std::to_string(groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, Size2 k, ConvTranspose2dOptions o,
                                 Generator* gen)
    : in_channels(in),
      out_channels(out),
      kernel_size(k),
      stride(o.stride),
      padding(o.padding),
      output_padding(o.output_padding),
      dilation(o.dilation),
      groups(o.groups) {
  detail::check_conv_channels("ConvTranspose2d", in, out, groups);
  detail::check_conv2d_geometry("ConvTranspose2d", k, stride, padding, dilation);
  const Size2 s = stride, d = dilation, op = output_padding;
  MINIDL_CHECK(op.h >= 0 && op.w >= 0 && (op.h < s.h || op.h < d.h) && (op.w < s.w || op.w < d.w),
               "ConvTranspose2d: output_padding ", op.tuple_str(),
               " must be smaller than either stride ", s.tuple_str(), " or dilation ",
               d.tuple_str());
  weight = empty({in, out / groups, k.h, k.w});
  if (o.bias) bias = empty({out});
  reset_parameters(gen);
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

void ConvTranspose2d::reset_parameters(Generator* gen) {
  detail::default_init(weight, bias, gen);
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  Conv2dParams p;
  p.stride[0] = stride.h, p.stride[1] = stride.w;
  p.padding[0] = padding.h, p.padding[1] = padding.w;
  p.dilation[0] = dilation.h, p.dilation[1] = dilation.w;
  p.groups = groups;
  return conv_transpose2d(x, weight, bias, p, {output_padding.h, output_padding.w});
}

std::string ConvTranspose2d::extra_repr() const {
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + kernel_size.tuple_str() + ", stride=" + stride.tuple_str();
  if (!(padding == Size2(0))) s += ", padding=" + padding.tuple_str();
  if (!(dilation == Size2(1))) s += ", dilation=" + dilation.tuple_str();
  if (!(output_padding == Size2(0))) s += ", output_padding=" + output_padding.tuple_str();
  if (groups != 1) s += ", groups=" + std::to_string(groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

}  // namespace minidl::nn
