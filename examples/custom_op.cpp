// Guide example 3 (docs/guide.md): a custom differentiable op written with autograd::record (a
// backward closure in tensor ops, so it runs on CPU and CUDA), checked with gradcheck in f64,
// then used inside a module.
// Usage: custom_op
#include <cstdio>

#include "minidl.h"
using namespace minidl;

// [snippet:op]
// softplus(x) = log(1 + exp(x)); d/dx = sigmoid(x). x: any shape.
Tensor my_softplus(const Tensor& x) {
  Tensor y;
  {
    NoGradGuard raw;  // compute the values without recording the composite's own graph
    y = log1p(exp(x));
  }
  // One node: inputs {x}, outputs {&y}, saved {x}; backward maps grad(y) to grad(x).
  autograd::record("MySoftplusBackward", {x}, {&y}, {x},
                   [](const std::vector<Tensor>& grads, const std::vector<Tensor>& saved) {
                     return std::vector<Tensor>{mul(grads[0], sigmoid(saved[0]))};
                   });
  return y;
}
// [/snippet]

int main() try {
  // [snippet:gradcheck]
  manual_seed(0);
  Tensor x = randn({4, 3}, kFloat64).requires_grad_(true);  // gradcheck wants f64 leaves
  auto result =
      autograd::gradcheck([](const std::vector<Tensor>& in) { return my_softplus(in[0]); }, {x});
  std::printf("gradcheck: %s (max abs error %.2e) %s\n", result.ok ? "ok" : "FAILED",
              result.max_abs_error, result.message.c_str());
  // [/snippet]
  // The op in a training step: its gradient reaches the weights.
  nn::Linear fc(3, 2);
  Tensor in = randn({5, 3});
  Tensor loss = my_softplus(fc(in)).sum();
  loss.backward();
  const bool grads = fc.weight.grad().defined() && fc.weight.grad().abs().sum().item<double>() > 0;
  // The same values as the composite the op replaces.
  const bool same = allclose(my_softplus(in), log1p(exp(in)));
  std::printf("custom_op: gradcheck %s, weight gradient %s, values %s\n",
              result.ok ? "passed" : "FAILED", grads ? "present" : "MISSING",
              same ? "match" : "DIFFER");
  return result.ok && grads && same ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "custom_op: error: %s\n", e.what());
  return 2;
}
