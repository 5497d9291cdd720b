// The pixel layout code the PNG and JPEG codecs share: interleaved decoder rows scattered into the
// planes of uint8 x:[C,H,W] with PIL's mode conversions, and back; the mode's channel count and
// the guarded image allocation.
#include "data/image/image_rows.h"

#include "tensor/error.h"

namespace minidl::data::image_detail {
namespace {

// PIL's convert("L"): ITU-R 601-2 luma in 16-bit fixed point, rounded.
inline uint8_t luma(const uint8_t* p) {
  return uint8_t((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
}

// S interleaved channels -> D planes; S and D are 1 (L), 2 (LA), 3 (RGB) or 4 (RGBA).
template <int S, int D>
void convert_row(const uint8_t* src, uint8_t* dst, size_t plane, size_t width) {
  if constexpr (S == D && S == 1) {
    std::memcpy(dst, src, width);
  } else {
    uint8_t* p0 = dst;
    uint8_t* p1 = dst + plane;
    uint8_t* p2 = dst + 2 * plane;
    uint8_t* p3 = dst + 3 * plane;
    for (size_t x = 0; x < width; ++x, src += S) {
      const uint8_t a = S == 2 ? src[1] : S == 4 ? src[3] : 255;
      if constexpr (D <= 2) {
        p0[x] = S >= 3 ? luma(src) : src[0];
        if constexpr (D == 2) p1[x] = a;
      } else {
        p0[x] = src[0];
        p1[x] = S >= 3 ? src[1] : src[0];
        p2[x] = S >= 3 ? src[2] : src[0];
        if constexpr (D == 4) p3[x] = a;
      }
    }
  }
}

template <int S>
RowConverter converter_to(int dst_c) {
  switch (dst_c) {
    case 1:
      return convert_row<S, 1>;
    case 2:
      return convert_row<S, 2>;
    case 3:
      return convert_row<S, 3>;
    default:
      return convert_row<S, 4>;
  }
}

template <int C>
void gather(const uint8_t* chw, size_t plane, size_t width, uint8_t* dst) {
  for (size_t x = 0; x < width; ++x, dst += C)
    for (int c = 0; c < C; ++c) dst[c] = chw[c * plane + x];
}

}  // namespace

int mode_channels(ImageReadMode mode, const std::string& ctx) {
  switch (mode) {
    case ImageReadMode::UNCHANGED:
      return 0;
    case ImageReadMode::GRAY:
      return 1;
    case ImageReadMode::GRAY_ALPHA:
      return 2;
    case ImageReadMode::RGB:
      return 3;
    case ImageReadMode::RGB_ALPHA:
      return 4;
  }
  MINIDL_FAIL(ctx, ": unknown ImageReadMode ", int(mode));
}

Tensor alloc_image(int64_t channels, int64_t height, int64_t width, const std::string& ctx) {
  MINIDL_CHECK(height > 0 && width > 0, ctx, ": empty image (", width, "x", height, ")");
  MINIDL_CHECK(channels * height * width <= (int64_t(1) << 31), ctx, ": image too large (", width,
               "x", height, "x", channels, " bytes > 2^31)");
  return empty({channels, height, width}, DType::u8);
}

RowConverter row_converter(int src_c, int dst_c) {
  switch (src_c) {
    case 1:
      return converter_to<1>(dst_c);
    case 2:
      return converter_to<2>(dst_c);
    case 3:
      return converter_to<3>(dst_c);
    default:
      return converter_to<4>(dst_c);
  }
}

void gather_row(const uint8_t* chw, int channels, size_t plane, size_t width, uint8_t* dst) {
  switch (channels) {
    case 1:
      std::memcpy(dst, chw, width);
      break;
    case 2:
      gather<2>(chw, plane, width, dst);
      break;
    case 3:
      gather<3>(chw, plane, width, dst);
      break;
    default:
      gather<4>(chw, plane, width, dst);
      break;
  }
}

}  // namespace minidl::data::image_detail
