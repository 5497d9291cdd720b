// nn::functional: stateless helpers behind the layers (dropout, adaptive average pooling) and
// the Size2 argument type (an int or an (h, w) pair, remembered for PyTorch-style printing).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "tensor/random.h"
#include "tensor/tensor.h"

namespace minidl::nn {

// An int or a pair of ints: `3` or `{3, 5}` (PyTorch's _pair arguments).
struct Size2 {
  int64_t h = 0, w = 0;
  bool scalar = true;  // given as one int (prints as "3" rather than "(3, 3)")
  Size2(int64_t v) : h(v), w(v), scalar(true) {}  // NOLINT(implicit)
  Size2(int64_t h_, int64_t w_) : h(h_), w(w_), scalar(false) {}
  Size2(std::pair<int64_t, int64_t> p) : h(p.first), w(p.second), scalar(false) {}  // NOLINT
  bool operator==(const Size2& o) const { return h == o.h && w == o.w; }
  std::string str() const;        // "3" or "(3, 5)", as given
  std::string tuple_str() const;  // always "(3, 3)"
};

// Python's repr of a float: 0.25 -> "0.25", 1 -> "1.0".
std::string py_float(double v);

namespace functional {

// Inverted dropout: x * mask (mask from dropout_mask, scaled by 1/(1-p)); identity when not
// training or p == 0; zeros when p == 1. Differentiable through mul.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);

// x:[N,C,H,W] or [C,H,W] -> [..., out.h, out.w]. Divisible sizes use avg_pool2d; otherwise
// PyTorch's windows [floor(i*H/oh), ceil((i+1)*H/oh)) averaged with mean (differentiable).
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);

}  // namespace functional
}  // namespace minidl::nn

namespace minidl {
// PyTorch's `import torch.nn.functional as F`: F::interpolate, F::mse_loss, F::gelu, ...
namespace F = nn::functional;
}  // namespace minidl
