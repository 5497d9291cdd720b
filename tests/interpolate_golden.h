// The arguments of one F::interpolate golden case (tools/golden/golden_layers_extra.py and
// interpolate_modes.py write the same fields): mode, dtype, align_corners, size or scale_factor.
#pragma once
#include <optional>
#include <string>

#include "golden.h"

namespace testutil {

struct InterpolateCase {
  std::string mode;
  minidl::DType dtype;
  std::optional<bool> align_corners;
  std::optional<minidl::nn::Size2> size;
  std::optional<minidl::nn::Scale2> scale;

  explicit InterpolateCase(const json& c)
      : mode(c["mode"].get<std::string>()),
        dtype(c["dtype"].get<std::string>() == "f64" ? minidl::kFloat64 : minidl::kFloat32) {
    if (!c["align_corners"].is_null()) align_corners = c["align_corners"].get<bool>();
    if (!c["size"].is_null())
      size = minidl::nn::Size2(c["size"][0].get<int64_t>(), c["size"][1].get<int64_t>());
    if (c["scale"].is_number()) scale = minidl::nn::Scale2(c["scale"].get<double>());
    if (c["scale"].is_array())
      scale = minidl::nn::Scale2(c["scale"][0].get<double>(), c["scale"][1].get<double>());
  }
  // "bilinear align_corners true size (5, 7) scale - f64", for INFO()
  std::string str() const {
    return mode + " align_corners " +
           (align_corners ? (*align_corners ? "true" : "false") : "none") + " size " +
           (size ? size->str() : "-") + " scale " + (scale ? scale->str() : "-") + " " +
           std::string(minidl::dtype_name(dtype));
  }
};

}  // namespace testutil
