// The losses' reduction step (private to nn/loss*.cpp): none keeps the per-element loss, sum
// adds it up, mean averages it (PyTorch's reduction argument).
#pragma once

#include "autograd/ops.h"

namespace minidl::nn::functional::detail {

inline Tensor reduce_loss(const Tensor& loss, Reduction r) {
  switch (r) {
    case Reduction::none:
      return loss;
    case Reduction::sum:
      return sum(loss);
    case Reduction::mean:
      break;
  }
  return mean(loss);
}

}  // namespace minidl::nn::functional::detail
