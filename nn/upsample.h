// torch.nn.Upsample and F::interpolate for x:[N,C,L], [N,C,H,W] and [N,C,D,H,W]: "nearest",
// "nearest-exact" and "area" on each, "linear" (3-D), "bilinear" and "bicubic" (4-D) and
// "trilinear" (5-D), with PyTorch 1.13's index and coordinate rules (align_corners, given scales).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

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

// F.interpolate's arguments for any spatial rank. Exactly one of size and scale_factor is given,
// with one value per spatial dim or one value for all of them (size=5, scale_factor=2.0).
// mode: nearest | nearest-exact | linear | bilinear | bicubic | trilinear | area; align_corners
// only with linear, bilinear, bicubic and trilinear. (Every member has a default, so designated
// initializers may name any subset: {.size = {8}, .mode = "linear"}.)
struct InterpolateOptions {
  std::vector<int64_t> size = {};
  std::vector<double> scale_factor = {};
  std::string mode = "nearest";
  std::optional<bool> align_corners = std::nullopt;
};

namespace functional {
// x:[N,C,d1..dk], k = 1, 2 or 3, as torch.nn.functional.interpolate (the rules below per dim;
// linear / trilinear weight like bilinear, one dim after the other from the last).
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);
// The 4-D form: exactly one of size and scale_factor. Output size: `size`, or floor(in * scale) per
// dim; a given scale is also used for the source coordinates (recompute_scale_factor=None), as
// torch.
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
  explicit Upsample(InterpolateOptions options);  // any spatial rank (e.g. mode "trilinear")
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Upsample"; }
  std::string extra_repr() const override;  // "scale_factor=2.0, mode=nearest"
  InterpolateOptions options;
};

}  // namespace minidl::nn
