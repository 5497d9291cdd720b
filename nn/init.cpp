// torch.nn.init equivalents (bounds/stds follow PyTorch's formulas exactly).
#include "nn/init.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/error.h"
#include "autograd/ops.h"

namespace minidl::nn::init {

double calculate_gain(std::string_view nl, double param) {
  if (nl == "linear" || nl == "conv1d" || nl == "conv2d" || nl == "conv3d" || nl == "sigmoid" ||
      nl == "conv_transpose1d" || nl == "conv_transpose2d" || nl == "conv_transpose3d")
    return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nl == "selu") return 3.0 / 4.0;
  MINIDL_FAIL("calculate_gain: unsupported nonlinearity '", nl, "'");
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  MINIDL_CHECK(t.dim() >= 2, "init: fan in and fan out can not be computed for tensor with fewer ",
               "than 2 dimensions (shape ", t.shape_str(), ")");
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor& uniform_(Tensor& t, double a, double b, Generator* gen) {
  NoGradGuard g;
  return minidl::uniform_(t, a, b, gen);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  NoGradGuard g;
  return minidl::normal_(t, mean, std, gen);
}

Tensor& constant_(Tensor& t, double value) {
  NoGradGuard g;
  t.fill_(value);
  return t;
}

Tensor& zeros_(Tensor& t) {
  return constant_(t, 0);
}
Tensor& ones_(Tensor& t) {
  return constant_(t, 1);
}

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  auto [fi, fo] = calculate_fan_in_and_fan_out(t);
  double std = gain * std::sqrt(2.0 / double(fi + fo));
  double a = std::sqrt(3.0) * std;
  return init::uniform_(t, -a, a, gen);
}

Tensor& xavier_normal_(Tensor& t, double gain, Generator* gen) {
  auto [fi, fo] = calculate_fan_in_and_fan_out(t);
  return init::normal_(t, 0, gain * std::sqrt(2.0 / double(fi + fo)), gen);
}

namespace {
double kaiming_std(const Tensor& t, double a, std::string_view mode, std::string_view nl) {
  MINIDL_CHECK(mode == "fan_in" || mode == "fan_out", "kaiming init: mode ", mode,
               " not supported, please use fan_in or fan_out");
  auto [fi, fo] = calculate_fan_in_and_fan_out(t);
  int64_t fan = mode == "fan_in" ? fi : fo;
  MINIDL_CHECK(fan > 0, "kaiming init: zero fan for tensor of shape ", t.shape_str());
  return calculate_gain(nl, a) / std::sqrt(double(fan));
}
}  // namespace

Tensor& kaiming_uniform_(Tensor& t, double a, std::string_view mode, std::string_view nl,
                         Generator* gen) {
  double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nl);
  return init::uniform_(t, -bound, bound, gen);
}

Tensor& kaiming_normal_(Tensor& t, double a, std::string_view mode, std::string_view nl,
                        Generator* gen) {
  return init::normal_(t, 0, kaiming_std(t, a, mode, nl), gen);
}

}  // namespace minidl::nn::init
