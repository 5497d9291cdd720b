// LeakyReLU, PReLU and Hardswish as composites of where/mul/clamp (gradients from autograd,
// equal to torch's: slope at 0 for (P)ReLU); Hardswish records torch's backward formula.
#include "nn/activation_extra.h"

#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/functional.h"

namespace minidl::nn {

namespace functional {

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  MINIDL_CHECK(x.defined(), "leaky_relu: undefined input");
  MINIDL_CHECK(x.is_floating_point(), "leaky_relu: expected a floating tensor, got ",
               dtype_name(x.dtype()));
  return where(gt(x, zeros({}, x.dtype(), x.device())), x, mul(x, Scalar(negative_slope)));
}

Tensor prelu(const Tensor& x, const Tensor& weight) {
  MINIDL_CHECK(x.defined() && weight.defined(), "prelu: undefined input or weight");
  MINIDL_CHECK(x.is_floating_point(), "prelu: expected a floating tensor, got ",
               dtype_name(x.dtype()));
  MINIDL_CHECK(weight.dim() <= 1, "prelu: weight must be 0-d or 1-d, got shape ",
               weight.shape_str());
  const int64_t n = weight.numel();
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  MINIDL_CHECK(n == 1 || n == channels,
               "Mismatch of parameter numbers and input channel size. Found parameter numbers = ",
               n, " and channel size = ", channels, ".");
  Tensor w = weight;
  if (n == 1 || x.dim() < 2) {
    w = weight.reshape({});
  } else {
    Shape ws(size_t(x.dim() - 1), 1);  // [C, 1, ...]: broadcasts over dim 1
    ws[0] = n;
    w = weight.reshape(ws);
  }
  return where(gt(x, zeros({}, x.dtype(), x.device())), x, mul(w, x));
}

Tensor hardswish(const Tensor& x) {
  MINIDL_CHECK(x.defined(), "hardswish: undefined input");
  MINIDL_CHECK(x.is_floating_point(), "hardswish: expected a floating tensor, got ",
               dtype_name(x.dtype()));
  Tensor out;
  {
    NoGradGuard no_grad;  // the forward formula; the node below carries torch's gradient
    out = div(mul(x, clamp(add(x, Scalar(3)), Scalar(0), Scalar(6))), Scalar(6));
  }
  // torch 1.13's (vectorised CPU and CUDA) hardswish_backward: 0 for x < -3, grad for x >= 3,
  // grad * (x/3 + 1/2) between (so the gradient at x = 3 is 1, the right-hand derivative)
  autograd::record("HardswishBackward", {x}, {&out}, {x}, [](const auto& g, const auto& s) {
    const Tensor& xs = s[0];
    Tensor mid = mul(g[0], add(div(xs, Scalar(3)), Scalar(0.5)));
    Tensor upper = where(ge(xs, full({}, Scalar(3), xs.dtype(), xs.device())), g[0], mid);
    return std::vector<Tensor>{
        where(lt(xs, full({}, Scalar(-3), xs.dtype(), xs.device())), zeros_like(g[0]), upper)};
  });
  return out;
}

}  // namespace functional

Tensor LeakyReLU::forward(const Tensor& x) {
  return functional::leaky_relu(x, negative_slope);
}

std::string LeakyReLU::extra_repr() const {
  return "negative_slope=" + py_float(negative_slope);
}

PReLU::PReLU(int64_t n, double init) : num_parameters(n) {
  MINIDL_CHECK(n > 0, "PReLU: num_parameters must be positive, got ", n);
  weight = full({n}, Scalar(init));
  register_parameter("weight", &weight);
}

Tensor PReLU::forward(const Tensor& x) {
  return functional::prelu(x, weight);
}

std::string PReLU::extra_repr() const {
  return "num_parameters=" + std::to_string(num_parameters);
}

Tensor Hardswish::forward(const Tensor& x) {
  return functional::hardswish(x);
}

}  // namespace minidl::nn
