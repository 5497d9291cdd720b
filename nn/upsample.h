// torch.nn.Upsample and F::interpolate for 4-D inputs x:[N,C,H,W]: "nearest", "nearest-exact",
// "bilinear", "bicubic" and "area" with PyTorch 1.13's index and coordinate rules (align_corners
// false/true, given scales).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "nn/functional.h"
#include "nn/module.h"

namespace minidl::nn {

// A float or a pair of floats (scale_factor=2 or (2, 1.5)), remembered for printing.
struct Scale2 {
  double h = 1, w = 1;
  bool scalar = true;
  Scale2(double v) : h(v), w(v), scalar(true) {}  // NOLINT(implicit)
  Scale2(double h_, double w_) : h(h_), w(w_), scalar(false) {}
  std::string str() const;  // "2.0" or "(2.0, 1.5)"
};

namespace functional {
// Exactly one of size and scale_factor. Output size: `size`, or floor(in * scale) per dim; a
// given scale is also used for the source coordinates (recompute_scale_factor=None), as torch.
//  * nearest: src = min(floor(dst * s), in - 1) with s = 1/scale (or in/out) in float.
//  * nearest-exact: src = min(floor((dst + 0.5) * s), in - 1) (float).
//  * bilinear: align_corners: src = dst * (in-1)/(out-1); else src = max((dst + 0.5) * s - 0.5,
//    0); out = h0*(w0*x00 + w1*x01) + h1*(w0*x10 + w1*x11).
//  * bicubic: the same src without the clamp at 0; 4 taps floor(src)-1 .. +2 (clamped to the
//    border) weighted by cubic convolution with A = -0.75.
//  * area: adaptive_avg_pool2d to the output size.
// align_corners only with bilinear and bicubic.
// Composites of index_select, mul and add (gradients scatter-add back), any device.
Tensor interpolate(const Tensor& x, std::optional<Size2> size,
                   std::optional<Scale2> scale_factor = std::nullopt,
                   const std::string& mode = "nearest",
                   std::optional<bool> align_corners = std::nullopt);
}  // namespace functional

class Upsample : public Cloneable<Upsample> {
 public:
  Upsample(std::optional<Size2> size, std::optional<Scale2> scale_factor = std::nullopt,
           std::string mode = "nearest", std::optional<bool> align_corners = std::nullopt);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Upsample"; }
  std::string extra_repr() const override;  // "scale_factor=2.0, mode=nearest"
  std::optional<Size2> size;
  std::optional<Scale2> scale_factor;
  std::string mode;
  std::optional<bool> align_corners;
};

}  // namespace minidl::nn
