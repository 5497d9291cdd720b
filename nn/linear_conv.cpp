// Linear, Conv2d and Dropout modules.
#include "nn/linear_conv.h"

#include <cmath>

#include "nn/conv_checks.h"
#include "nn/init.h"
#include "autograd/ops.h"

namespace minidl::nn {

namespace detail {
void default_init(Tensor& w, Tensor& b, Generator* gen) {
  init::kaiming_uniform_(w, std::sqrt(5.0), "fan_in", "leaky_relu", gen);
  if (b.defined()) {
    int64_t fan_in = init::calculate_fan_in_and_fan_out(w).first;
    double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
    init::uniform_(b, -bound, bound, gen);
  }
}

void check_conv_channels(std::string_view layer, int64_t in, int64_t out, int64_t groups) {
  MINIDL_CHECK(groups > 0, layer, ": groups must be a positive integer, got ", groups);
  MINIDL_CHECK(in % groups == 0, layer, ": in_channels (", in, ") must be divisible by groups (",
               groups, ")");
  MINIDL_CHECK(out % groups == 0, layer, ": out_channels (", out, ") must be divisible by groups (",
               groups, ")");
}

void check_conv2d_geometry(std::string_view layer, Size2 k, Size2 s, Size2 p, Size2 d) {
  MINIDL_CHECK(
      k.h > 0 && k.w > 0 && s.h > 0 && s.w > 0 && d.h > 0 && d.w > 0 && p.h >= 0 && p.w >= 0, layer,
      ": invalid kernel_size ", k.tuple_str(), ", stride ", s.tuple_str(), ", padding ",
      p.tuple_str(), " or dilation ", d.tuple_str());
}
}  // namespace detail
using detail::default_init;

Linear::Linear(int64_t in, int64_t out, bool has_bias, Generator* gen)
    : in_features(in), out_features(out) {
  MINIDL_CHECK(in >= 0 && out >= 0, "Linear: negative features (in_features=", in,
               ", out_features=", out, ")");
  weight = empty({out, in});
  if (has_bias) bias = empty({out});
  if (in > 0) {
    reset_parameters(gen);
  } else {
    weight.zero_();
    if (has_bias) bias.zero_();
  }
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

void Linear::reset_parameters(Generator* gen) {
  default_init(weight, bias, gen);
}

Tensor Linear::forward(const Tensor& x) {
  return linear(x, weight, bias);
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features) +
         ", out_features=" + std::to_string(out_features) +
         ", bias=" + (bias.defined() ? "True" : "False");
}

Conv2d::Conv2d(int64_t in, int64_t out, Size2 k, Conv2dOptions o, Generator* gen)
    : in_channels(in),
      out_channels(out),
      kernel_size(k),
      stride(o.stride),
      padding(o.padding),
      dilation(o.dilation),
      groups(o.groups) {
  detail::check_conv_channels("Conv2d", in, out, o.groups);
  detail::check_conv2d_geometry("Conv2d", k, o.stride, o.padding, o.dilation);
  weight = empty({out, in / o.groups, k.h, k.w});
  if (o.bias) bias = empty({out});
  reset_parameters(gen);
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

void Conv2d::reset_parameters(Generator* gen) {
  default_init(weight, bias, gen);
}

Tensor Conv2d::forward(const Tensor& x) {
  Conv2dParams p;
  p.stride[0] = stride.h, p.stride[1] = stride.w;
  p.padding[0] = padding.h, p.padding[1] = padding.w;
  p.dilation[0] = dilation.h, p.dilation[1] = dilation.w;
  p.groups = groups;
  return conv2d(x, weight, bias, p);
}

std::string Conv2d::extra_repr() const {
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + kernel_size.tuple_str() + ", stride=" + stride.tuple_str();
  if (!(padding == Size2(0))) s += ", padding=" + padding.tuple_str();
  if (!(dilation == Size2(1))) s += ", dilation=" + dilation.tuple_str();
  if (groups != 1) s += ", groups=" + std::to_string(groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

Dropout::Dropout(double p_, Generator* gen_) : p(p_), gen(gen_) {
  MINIDL_CHECK(p >= 0 && p <= 1, "Dropout: probability has to be between 0 and 1, but got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  return functional::dropout(x, p, is_training(), gen);
}

std::string Dropout::extra_repr() const {
  return "p=" + py_float(p) + ", inplace=False";
}

}  // namespace minidl::nn
