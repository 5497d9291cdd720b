// Parameter-free elementwise layers (ReLU, GELU, SiLU, Tanh, Sigmoid), Softmax and Flatten.
#pragma once

#include <string>

#include "nn/module.h"

namespace minidl::nn {

class ReLU : public Cloneable<ReLU> {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ReLU"; }
};

class GELU : public Cloneable<GELU> {
 public:
  explicit GELU(std::string approximate = "none");  // "none" | "tanh"
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "GELU"; }
  std::string extra_repr() const override { return "approximate='" + approximate + "'"; }
  std::string approximate;
};

class SiLU : public Cloneable<SiLU> {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "SiLU"; }
};

class Tanh : public Cloneable<Tanh> {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Tanh"; }
};

class Sigmoid : public Cloneable<Sigmoid> {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sigmoid"; }
};

class Softmax : public Cloneable<Softmax> {
 public:
  explicit Softmax(int64_t dim);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Softmax"; }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  int64_t dim;
};

// Flattens dims [start_dim, end_dim] into one: [N,C,H,W] -> [N, C*H*W] by default.
class Flatten : public Cloneable<Flatten> {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Flatten"; }
  std::string extra_repr() const override;
  int64_t start_dim, end_dim;
};

}  // namespace minidl::nn
