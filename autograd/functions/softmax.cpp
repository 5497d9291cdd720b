// The differentiable softmax / log_softmax: the autocast hook, the raw op
// (tensor/ops/softmax.cpp), then a node whose backward uses the saved output.
#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"

namespace minidl {

Tensor softmax(const Tensor& x, int64_t dim) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::softmax>(x)) return softmax(ac[0], dim);
  Tensor out = native::softmax(x, dim);
  autograd::record("SoftmaxBackward", {x}, {&out}, {out},
                   [dim](const std::vector<Tensor>& g, const std::vector<Tensor>& s) {
                     return std::vector<Tensor>{softmax_backward(g[0], s[0], dim)};
                   });
  return out;
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::log_softmax>(x))
    return log_softmax(ac[0], dim);
  Tensor out = native::log_softmax(x, dim);
  autograd::record("LogSoftmaxBackward", {x}, {&out}, {out},
                   [dim](const std::vector<Tensor>& g, const std::vector<Tensor>& s) {
                     return std::vector<Tensor>{log_softmax_backward(g[0], s[0], dim)};
                   });
  return out;
}

}  // namespace minidl
