// PNG through libpng 1.6: decode_png (any bit depth, colour type and Adam7 interlacing -> uint8
// x:[C,H,W], 16-bit samples keep their high byte) and encode_png (C = 1..4, 8-bit). libpng's
// errors come back through png_set_error_fn + setjmp inside small stage functions that hold no
// C++ objects, so a longjmp never skips a destructor; they become one minidl::Error.
#include <png.h>

#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "data/image/png_io.h"
#include "data/image/image_rows.h"
#include "tensor/error.h"

namespace minidl::data {
namespace image_detail {
namespace {

// Bounds a hostile header before libpng allocates rows; the 2^31-byte image limit is checked
// again in alloc_image. Ancillary chunks (iCCP, zTXt, ...) may not inflate past 8 MB.
constexpr png_uint_32 kMaxDim = 1u << 24;
constexpr png_alloc_size_t kMaxChunk = 8u << 20;

// Everything the setjmp stages share; plain data, owned by the caller's frame.
struct PngState {
  png_structp png = nullptr;
  png_infop info = nullptr;
  char msg[256] = "unknown libpng error";
  const uint8_t* data = nullptr;  // decoding: the input
  size_t size = 0, pos = 0;
  uint8_t* out = nullptr;  // encoding: a malloc'd growing buffer
  size_t out_size = 0, out_cap = 0;
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0, interlace = 0, src_c = 0, passes = 1;
  bool trns = false;
};

void on_error(png_structp png, png_const_charp msg) {
  auto* s = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(s->msg, sizeof s->msg, "%s", msg);
  png_longjmp(png, 1);
}
// Warnings (benign errors included: a bad ancillary CRC, an sRGB profile libpng dislikes) leave
// the pixels intact; PIL reads such files too.
void on_warning(png_structp, png_const_charp) {}

void read_bytes(png_structp png, png_bytep dst, size_t n) {
  auto* s = static_cast<PngState*>(png_get_io_ptr(png));
  if (n > s->size - s->pos) png_error(png, "unexpected end of file (truncated)");
  std::memcpy(dst, s->data + s->pos, n);
  s->pos += n;
}

void write_bytes(png_structp png, png_bytep src, size_t n) {
  auto* s = static_cast<PngState*>(png_get_io_ptr(png));
  if (s->out_cap - s->out_size < n) {
    size_t cap = std::max(s->out_cap * 2, s->out_size + n + 4096);
    void* p = std::realloc(s->out, cap);
    if (!p) png_error(png, "out of memory");
    s->out = static_cast<uint8_t*>(p);
    s->out_cap = cap;
  }
  std::memcpy(s->out + s->out_size, src, n);
  s->out_size += n;
}
void flush_bytes(png_structp) {}

void set_limits(png_structp png) {
  png_set_user_limits(png, kMaxDim, kMaxDim);
  png_set_chunk_malloc_max(png, kMaxChunk);
  png_set_chunk_cache_max(png, 1000);
}

// Stage 1: the header, then the transforms that give 8-bit rows of s.src_c channels.
// tRNS becomes alpha for palettes always and for grey/RGB only when `alpha` (an *_ALPHA mode).
bool read_header(PngState& s, bool alpha) {
  if (setjmp(png_jmpbuf(s.png))) return false;
  set_limits(s.png);
  png_read_info(s.png, s.info);
  png_get_IHDR(s.png, s.info, &s.width, &s.height, &s.bit_depth, &s.color_type, &s.interlace,
               nullptr, nullptr);
  s.trns = png_get_valid(s.png, s.info, PNG_INFO_tRNS) != 0;
  if (s.bit_depth == 16) png_set_strip_16(s.png);
  if (s.color_type == PNG_COLOR_TYPE_GRAY && s.bit_depth < 8) png_set_expand_gray_1_2_4_to_8(s.png);
  if (s.color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(s.png);
  if (s.trns && (s.color_type == PNG_COLOR_TYPE_PALETTE || alpha)) png_set_tRNS_to_alpha(s.png);
  s.passes = png_set_interlace_handling(s.png);
  return true;
}

bool update_info(PngState& s) {
  if (setjmp(png_jmpbuf(s.png))) return false;
  png_read_update_info(s.png, s.info);
  s.src_c = png_get_channels(s.png, s.info);
  if (png_get_bit_depth(s.png, s.info) != 8 ||
      png_get_rowbytes(s.png, s.info) != size_t(s.width) * size_t(s.src_c))
    png_error(s.png, "unexpected row layout after transforms");
  return true;
}

// Stage 2: the pixels. Sequential files go row by row through `rows` (one row); interlaced ones
// need the whole interleaved image in `rows` first (Adam7 passes revisit every row).
bool read_pixels(PngState& s, uint8_t* rows, uint8_t* out, size_t plane, RowConverter convert) {
  if (setjmp(png_jmpbuf(s.png))) return false;
  const size_t w = s.width, stride = w * size_t(s.src_c);
  if (s.passes == 1) {
    for (png_uint_32 y = 0; y < s.height; ++y) {
      png_read_row(s.png, rows, nullptr);
      convert(rows, out + size_t(y) * w, plane, w);
    }
    return true;
  }
  for (int p = 0; p < s.passes; ++p)
    for (png_uint_32 y = 0; y < s.height; ++y) png_read_row(s.png, rows + y * stride, nullptr);
  for (png_uint_32 y = 0; y < s.height; ++y) convert(rows + y * stride, out + y * w, plane, w);
  return true;
}

// Owns the read structs; the destructor runs outside every setjmp stage.
struct Reader {
  PngState s;
  explicit Reader(const std::string& ctx) {
    s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, on_error, on_warning);
    MINIDL_CHECK(s.png, ctx, ": PNG: out of memory");
    s.info = png_create_info_struct(s.png);
    if (!s.info) png_destroy_read_struct(&s.png, nullptr, nullptr);
    MINIDL_CHECK(s.png, ctx, ": PNG: out of memory");
  }
  ~Reader() { png_destroy_read_struct(&s.png, &s.info, nullptr); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
};

int stored_channels(const PngState& s) {
  switch (s.color_type) {
    case PNG_COLOR_TYPE_GRAY:
      return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      return 2;
    case PNG_COLOR_TYPE_RGB:
      return 3;
    case PNG_COLOR_TYPE_PALETTE:
      return s.trns ? 4 : 3;
    default:
      return 4;
  }
}

bool write_image(PngState& s, const uint8_t* chw, int channels, int level, uint8_t* row) {
  if (setjmp(png_jmpbuf(s.png))) return false;
  static const int kTypes[5] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                                PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
  png_set_user_limits(s.png, 0x7fffffffu, 0x7fffffffu);
  png_set_write_fn(s.png, &s, write_bytes, flush_bytes);
  png_set_IHDR(s.png, s.info, s.width, s.height, 8, kTypes[channels], PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(s.png, level);
  png_write_info(s.png, s.info);
  const size_t w = s.width, plane = size_t(s.width) * s.height;
  for (png_uint_32 y = 0; y < s.height; ++y) {
    gather_row(chw + size_t(y) * w, channels, plane, w, row);
    png_write_row(s.png, row);
  }
  png_write_end(s.png, nullptr);
  return true;
}

}  // namespace

Tensor png_decode(const uint8_t* data, size_t size, ImageReadMode mode, const std::string& ctx) {
  const int want = mode_channels(mode, ctx);
  MINIDL_CHECK(is_png(data, size), ctx, ": not a PNG file (no PNG signature)");
  Reader r(ctx);
  PngState& s = r.s;
  s.data = data;
  s.size = size;
  png_set_read_fn(s.png, &s, read_bytes);
  const bool alpha = mode == ImageReadMode::GRAY_ALPHA || mode == ImageReadMode::RGB_ALPHA;
  MINIDL_CHECK(read_header(s, alpha), ctx, ": PNG: ", s.msg);
  const int dst_c = want ? want : stored_channels(s);
  Tensor out = alloc_image(dst_c, s.height, s.width, ctx);
  MINIDL_CHECK(update_info(s), ctx, ": PNG: ", s.msg);
  const size_t stride = size_t(s.width) * size_t(s.src_c);
  const size_t nrows = s.passes == 1 ? 1 : size_t(s.height);  // h*w <= 2^31: alloc_image
  std::unique_ptr<uint8_t[]> rows(new uint8_t[stride * nrows]);
  MINIDL_CHECK(read_pixels(s, rows.get(), out.data_ptr<uint8_t>(),
                           size_t(s.width) * size_t(s.height), row_converter(s.src_c, dst_c)),
               ctx, ": PNG: ", s.msg);
  return out;
}

ImageInfo png_header_info(std::FILE* f, const std::string& ctx) {
  Reader r(ctx);
  png_init_io(r.s.png, f);
  MINIDL_CHECK(read_header(r.s, false), ctx, ": PNG: ", r.s.msg);
  return ImageInfo{int64_t(r.s.height), int64_t(r.s.width), stored_channels(r.s), "png"};
}

}  // namespace image_detail

Tensor decode_png(const uint8_t* data, size_t size, ImageReadMode mode, const std::string& what) {
  return image_detail::png_decode(data, size, mode, "decode_png: " + what);
}

std::vector<uint8_t> encode_png(const Tensor& x, int compression_level) {
  MINIDL_CHECK(x.defined(), "encode_png: undefined tensor");
  MINIDL_CHECK(x.dtype() == DType::u8 && x.dim() == 3,
               "encode_png: expected a uint8 [C,H,W] tensor, got ", dtype_name(x.dtype()), " ",
               shape_str(x.shape()));
  const int64_t c = x.size(0), h = x.size(1), w = x.size(2);
  MINIDL_CHECK(c >= 1 && c <= 4,
               "encode_png: expected 1 to 4 channels, got x:", shape_str(x.shape()));
  MINIDL_CHECK(h >= 1 && w >= 1 && h <= 0x7fffffff && w <= 0x7fffffff,
               "encode_png: bad image size x:", shape_str(x.shape()));
  MINIDL_CHECK(compression_level >= 0 && compression_level <= 9,
               "encode_png: compression_level must be 0 to 9, got ", compression_level);
  const Tensor src = x.cpu().contiguous();
  std::unique_ptr<uint8_t[]> row(new uint8_t[size_t(w) * size_t(c)]);
  image_detail::PngState s;
  s.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &s, image_detail::on_error,
                                  image_detail::on_warning);
  MINIDL_CHECK(s.png, "encode_png: out of memory");
  s.info = png_create_info_struct(s.png);
  s.width = png_uint_32(w);
  s.height = png_uint_32(h);
  if (!s.info) std::snprintf(s.msg, sizeof s.msg, "out of memory");
  const bool ok = s.info && image_detail::write_image(s, src.data_ptr<uint8_t>(), int(c),
                                                      compression_level, row.get());
  png_destroy_write_struct(&s.png, &s.info);
  std::unique_ptr<uint8_t, void (*)(void*)> owned(s.out, std::free);
  MINIDL_CHECK(ok, "encode_png: x:", shape_str(x.shape()), ": ", s.msg);
  return std::vector<uint8_t>(s.out, s.out + s.out_size);
}

}  // namespace minidl::data
