// read_file / read_image / decode_image (format by magic bytes), read_image_info, write_png and
// write_jpeg, and the pixel layout code the PNG and JPEG codecs share: interleaved decoder rows
// scattered into the planes of uint8 x:[C,H,W] with PIL's mode conversions, and back.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <system_error>

#include "data/image/image_codec.h"
#include "tensor/error.h"

namespace minidl::data {
namespace image_detail {
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

std::string errno_text(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// The whole file; errors read "<ctx>: <reason>".
std::vector<uint8_t> slurp(const std::string& path, const std::string& ctx) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  MINIDL_CHECK(f, ctx, ": ", errno_text(errno));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(f, std::fclose);
  struct stat st {};
  MINIDL_CHECK(::fstat(::fileno(f), &st) == 0, ctx, ": ", errno_text(errno));
  MINIDL_CHECK(!S_ISDIR(st.st_mode), ctx, ": is a directory");
  std::vector<uint8_t> bytes(S_ISREG(st.st_mode) ? size_t(st.st_size) : 0);
  bytes.resize(std::fread(bytes.data(), 1, bytes.size(), f));
  uint8_t more[16384];  // a file that grew since fstat, or a pipe: read on to the end
  for (size_t got; (got = std::fread(more, 1, sizeof more, f)) > 0;)
    bytes.insert(bytes.end(), more, more + got);
  MINIDL_CHECK(!std::ferror(f), ctx, ": read error: ", errno_text(errno));
  MINIDL_CHECK(!bytes.empty(), ctx, ": empty file");
  return bytes;
}

// What the first bytes say when they are neither JPEG nor PNG.
std::string not_an_image(const uint8_t* p, size_t n) {
  auto starts = [&](const char* magic) {
    const size_t m = std::strlen(magic);
    return n >= m && std::memcmp(p, magic, m) == 0;
  };
  if (starts("GIF8")) return "GIF files are not supported (JPEG and PNG only)";
  if (starts("BM")) return "BMP files are not supported (JPEG and PNG only)";
  if (n >= 12 && starts("RIFF") && std::memcmp(p + 8, "WEBP", 4) == 0)
    return "WebP files are not supported (JPEG and PNG only)";
  return "not a JPEG or PNG file (unknown first bytes)";
}

Tensor decode_any(const uint8_t* data, size_t size, ImageReadMode mode, const std::string& ctx) {
  MINIDL_CHECK(size > 0, ctx, ": empty input");
  if (is_jpeg(data, size)) return jpeg_decode(data, size, mode, ctx);
  if (is_png(data, size)) return png_decode(data, size, mode, ctx);
  MINIDL_FAIL(ctx, ": ", not_an_image(data, size));
}

void write_bytes(const std::vector<uint8_t>& bytes, const std::string& path,
                 const std::string& ctx) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  MINIDL_CHECK(f, ctx, ": ", errno_text(errno));
  const bool wrote = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  MINIDL_CHECK(wrote && closed, ctx, ": write error: ", errno_text(wrote ? errno : err));
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

}  // namespace image_detail

std::vector<uint8_t> read_file(const std::string& path) {
  return image_detail::slurp(path, "read_file: " + path);
}

Tensor decode_image(const uint8_t* data, size_t size, ImageReadMode mode, const std::string& what) {
  return image_detail::decode_any(data, size, mode, "decode_image: " + what);
}

Tensor read_image(const std::string& path, ImageReadMode mode) {
  const std::string ctx = "read_image: " + path;
  const std::vector<uint8_t> bytes = image_detail::slurp(path, ctx);
  return image_detail::decode_any(bytes.data(), bytes.size(), mode, ctx);
}

ImageInfo read_image_info(const std::string& path) {
  const std::string ctx = "read_image_info: " + path;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  MINIDL_CHECK(f, ctx, ": ", image_detail::errno_text(errno));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(f, std::fclose);
  uint8_t head[12] = {};
  const size_t n = std::fread(head, 1, sizeof head, f);
  MINIDL_CHECK(n > 0 || !std::ferror(f), ctx, ": ", image_detail::errno_text(errno));
  MINIDL_CHECK(n > 0, ctx, ": empty file");
  MINIDL_CHECK(std::fseek(f, 0, SEEK_SET) == 0, ctx, ": cannot seek back to the header");
  if (image_detail::is_jpeg(head, n)) return image_detail::jpeg_header_info(f, ctx);
  if (image_detail::is_png(head, n)) return image_detail::png_header_info(f, ctx);
  MINIDL_FAIL(ctx, ": ", image_detail::not_an_image(head, n));
}

void write_png(const Tensor& x, const std::string& path, int compression_level) {
  const std::string ctx = "write_png: " + path;
  std::vector<uint8_t> bytes;
  try {
    bytes = encode_png(x, compression_level);
  } catch (const Error& e) {
    throw Error(ctx + ": " + e.what());
  }
  image_detail::write_bytes(bytes, path, ctx);
}

void write_jpeg(const Tensor& x, const std::string& path, int quality) {
  const std::string ctx = "write_jpeg: " + path;
  std::vector<uint8_t> bytes;
  try {
    bytes = encode_jpeg(x, quality);
  } catch (const Error& e) {
    throw Error(ctx + ": " + e.what());
  }
  image_detail::write_bytes(bytes, path, ctx);
}

}  // namespace minidl::data
