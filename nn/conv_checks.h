// Argument checks shared by the convolution layers (Conv1d, Conv2d, ConvTranspose2d): the
// channel/group counts and the 2-D geometry, with errors naming the layer and the values.
#pragma once
#include <cstdint>
#include <string_view>

#include "nn/functional.h"

namespace minidl::nn::detail {

// groups > 0 and both channel counts divisible by it.
void check_conv_channels(std::string_view layer, int64_t in, int64_t out, int64_t groups);
// Positive kernel, stride and dilation; non-negative padding.
void check_conv2d_geometry(std::string_view layer, Size2 kernel, Size2 stride, Size2 padding,
                           Size2 dilation);

}  // namespace minidl::nn::detail
