// Internals shared by image_io.cpp, png_io.cpp and jpeg_io.cpp: the decoders with an error
// prefix of the caller's choosing ("read_image: <path>"), header-only readers, and the row
// converters between interleaved decoder rows and planar uint8 x:[C,H,W] (PIL's mode rules).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "data/image/image_io.h"

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

// Decoders; errors read "<ctx>: PNG: <reason>" / "<ctx>: JPEG: <reason>".
Tensor png_decode(const uint8_t* data, size_t size, ImageReadMode mode, const std::string& ctx);
Tensor jpeg_decode(const uint8_t* data, size_t size, ImageReadMode mode, const std::string& ctx);

// Headers only, from `f` positioned at the start of the file (reads no further than needed).
ImageInfo png_header_info(std::FILE* f, const std::string& ctx);
ImageInfo jpeg_header_info(std::FILE* f, const std::string& ctx);

inline bool is_png(const uint8_t* p, size_t n) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n < 8) return false;
  for (int i = 0; i < 8; ++i)
    if (p[i] != sig[i]) return false;
  return true;
}
inline bool is_jpeg(const uint8_t* p, size_t n) {
  return n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF;
}

}  // namespace minidl::data::image_detail
