// Internals shared by the PNG and JPEG codecs (png_io.cpp, jpeg_io.cpp): the row converters
// between interleaved decoder rows and planar uint8 x:[C,H,W] (PIL's mode rules), the channels
// of a mode, and the size-guarded image allocation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/image/image_types.h"
#include "tensor/tensor.h"

namespace minidl::data::image_detail {

// The channels a mode asks for (GRAY 1, GRAY_ALPHA 2, RGB 3, RGB_ALPHA 4); 0 for UNCHANGED.
// Throws naming `ctx` for a value outside the enum.
int mode_channels(ImageReadMode mode, const std::string& ctx);

// uint8 x:[C,H,W] for a decoded image; throws "<ctx>: ..." for a zero size or more than 2^31
// bytes, before anything is allocated.
Tensor alloc_image(int64_t channels, int64_t height, int64_t width, const std::string& ctx);

// One row of `width` pixels, `src_c` interleaved 8-bit channels (1 grey, 2 grey+alpha, 3 RGB,
// 4 RGBA) -> `dst_c` planes at dst, dst + plane, ...; PIL's convert(): grey from colour is
// (R*19595 + G*38470 + B*7471 + 0x8000) >> 16, grey to colour replicates, a missing alpha is
// 255, a dropped alpha is dropped (no compositing).
using RowConverter = void (*)(const uint8_t* src, uint8_t* dst, size_t plane, size_t width);
RowConverter row_converter(int src_c, int dst_c);

// The reverse for the encoders: row y of a contiguous x:[C,H,W] (dst: width*C interleaved).
void gather_row(const uint8_t* chw, int channels, size_t plane, size_t width, uint8_t* dst);

}  // namespace minidl::data::image_detail
