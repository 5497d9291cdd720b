// Activation, Softmax and Flatten modules: thin wrappers over the differentiable tensor ops.
#include "nn/activation.h"

#include "autograd/ops.h"

namespace minidl::nn {

Tensor ReLU::forward(const Tensor& x) {
  return relu(x);
}

GELU::GELU(std::string approx) : approximate(std::move(approx)) {
  MINIDL_CHECK(approximate == "none" || approximate == "tanh", "GELU: approximate must be ",
               "'none' or 'tanh', got '", approximate, "'");
}

Tensor GELU::forward(const Tensor& x) {
  return gelu(x, approximate);
}

Tensor SiLU::forward(const Tensor& x) {
  return silu(x);
}

Tensor Tanh::forward(const Tensor& x) {
  return tanh(x);
}

Tensor Sigmoid::forward(const Tensor& x) {
  return sigmoid(x);
}

Softmax::Softmax(int64_t d) : dim(d) {}

Tensor Softmax::forward(const Tensor& x) {
  return softmax(x, dim);
}

Flatten::Flatten(int64_t s, int64_t e) : start_dim(s), end_dim(e) {}

Tensor Flatten::forward(const Tensor& x) {
  return x.flatten(start_dim, end_dim);
}

std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(start_dim) + ", end_dim=" + std::to_string(end_dim);
}

}  // namespace minidl::nn
