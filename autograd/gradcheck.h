// gradcheck: compares autograd gradients with central finite differences in f64, like
// torch.autograd.gradcheck. f maps the inputs to one output tensor; every input that
// requires grad is checked, for a random projection of the output (so any output shape works).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace minidl::autograd {

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  // the first mismatch: input, element, analytic vs numeric
};

// Inputs must be f64 leaves; eps is the finite-difference step.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, double eps = 1e-6, double atol = 1e-5,
                          double rtol = 1e-3);

}  // namespace minidl::autograd
