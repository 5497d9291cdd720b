// More elementwise layers (torch.nn.Identity, LeakyReLU, PReLU, Hardswish) and their
// nn::functional forms, built from differentiable ops (one code path for CPU and CUDA).
#pragma once

#include <string>

#include "nn/module.h"

namespace minidl::nn {

namespace functional {
// x where x > 0, else negative_slope * x (the gradient at 0 is negative_slope, as torch's).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// x where x > 0, else weight * x. weight:[1] or [C] with C = x.size(1) (dim 1 is the channel
// dim; inputs with fewer than 2 dims have one channel).
Tensor prelu(const Tensor& x, const Tensor& weight);
// x * clamp(x + 3, 0, 6) / 6.
Tensor hardswish(const Tensor& x);
}  // namespace functional

// Returns its input (a placeholder layer).
class Identity : public Cloneable<Identity> {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string name() const override { return "Identity"; }
};

class LeakyReLU : public Cloneable<LeakyReLU> {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;
  double negative_slope;
};

// Learnable negative slope: parameter `weight`:[num_parameters] filled with `init`.
class PReLU : public Cloneable<PReLU> {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "PReLU"; }
  std::string extra_repr() const override;
  int64_t num_parameters;
  Tensor weight;
};

class Hardswish : public Cloneable<Hardswish> {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Hardswish"; }
};

}  // namespace minidl::nn
