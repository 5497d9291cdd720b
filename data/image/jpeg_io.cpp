// JPEG through libjpeg-turbo: decode_jpeg (grey -> 1 channel, YCbCr/RGB -> RGB, CMYK/YCCK ->
// RGB as PIL converts Adobe CMYK) with libjpeg's defaults (JDCT_ISLOW, fancy upsampling), so RGB
// bytes equal PIL's; encode_jpeg (C = 1 or 3, torchvision's settings). libjpeg's errors, and the
// warnings that mean lost pixels (a truncated file, a bad Huffman code), longjmp out of small
// stage functions that hold no C++ objects and become one minidl::Error.
#include <cstdio>  // before jpeglib.h, which uses FILE and size_t
#include <jpeglib.h>
#include <jerror.h>

#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "data/image/jpeg_io.h"
#include "data/image/image_rows.h"
#include "tensor/error.h"

namespace minidl::data {
namespace image_detail {
namespace {

struct JpegErr {
  jpeg_error_mgr pub;  // first: libjpeg's cinfo->err points here
  std::jmp_buf jump;
  char msg[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_error_exit(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErr*>(c->err);
  (*c->err->format_message)(c, e->msg);
  std::longjmp(e->jump, 1);
}

// Trace messages are dropped; a warning is fatal when the decoded pixels would be wrong (libjpeg
// pads a truncated file with grey and resyncs past corrupt data). Warnings about headers
// (an unknown JFIF revision, a bad ICC marker, stray bytes before a marker) are not.
void on_message(j_common_ptr c, int level) {
  if (level >= 0) return;
  switch (c->err->msg_code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_ARITH_BAD_CODE:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_BOGUS_PROGRESSION:
      on_error_exit(c);
    default:
      ++c->err->num_warnings;
  }
}

void init_errors(JpegErr& e) {
  jpeg_std_error(&e.pub);
  e.pub.error_exit = on_error_exit;
  e.pub.emit_message = on_message;
  std::snprintf(e.msg, sizeof e.msg, "unknown libjpeg error");
}

// Plain data shared by the decoding stages; value-initialised, so destroying it is always safe.
struct Decoder {
  jpeg_decompress_struct cinfo;
  JpegErr err;
};

// Stage 1: the header, and the output colour space for its number of components.
bool read_header(Decoder& d, const uint8_t* data, size_t size, std::FILE* f) {
  d.cinfo.err = &d.err.pub;
  if (setjmp(d.err.jump)) return false;
  jpeg_create_decompress(&d.cinfo);
  if (f)
    jpeg_stdio_src(&d.cinfo, f);
  else
    jpeg_mem_src(&d.cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&d.cinfo, TRUE);
  switch (d.cinfo.num_components) {
    case 1:
      d.cinfo.out_color_space = JCS_GRAYSCALE;
      break;
    case 3:
      d.cinfo.out_color_space = JCS_RGB;
      break;
    case 4:
      d.cinfo.out_color_space = JCS_CMYK;
      break;  // CMYK or YCCK
    default:
      std::snprintf(d.err.msg, sizeof d.err.msg, "unsupported number of components (%d)",
                    d.cinfo.num_components);
      return false;
  }
  d.cinfo.dct_method = JDCT_ISLOW;
  d.cinfo.do_fancy_upsampling = TRUE;
  return true;
}

// PIL's Adobe CMYK: the stored samples are inverted ("CMYK;I"), then cmyk2rgb's
// nk - nk*c/255 (rounded) per channel, with nk = 255 - k.
void cmyk_to_rgb(const uint8_t* src, uint8_t* dst, size_t width) {
  for (size_t x = 0; x < width; ++x, src += 4, dst += 3) {
    const unsigned nk = src[3];  // 255 - (255 - stored k)
    for (int i = 0; i < 3; ++i) {
      const unsigned t = (255u - src[i]) * nk + 128u;
      dst[i] = uint8_t(nk - (((t >> 8) + t) >> 8));
    }
  }
}

// Stage 2: decompression and the scanlines, converted straight into out's planes.
bool read_pixels(Decoder& d, uint8_t* row, uint8_t* rgb, uint8_t* out, size_t plane,
                 RowConverter convert) {
  if (setjmp(d.err.jump)) return false;
  jpeg_start_decompress(&d.cinfo);
  const size_t w = d.cinfo.output_width;
  const bool cmyk = d.cinfo.out_color_space == JCS_CMYK;
  while (d.cinfo.output_scanline < d.cinfo.output_height) {
    const size_t y = d.cinfo.output_scanline;
    JSAMPROW rows[1] = {row};
    if (jpeg_read_scanlines(&d.cinfo, rows, 1) != 1) {
      std::snprintf(d.err.msg, sizeof d.err.msg, "no scanline %zu", y);
      return false;
    }
    if (cmyk) cmyk_to_rgb(row, rgb, w);
    convert(cmyk ? rgb : row, out + y * w, plane, w);
  }
  return true;
}

struct DecoderGuard {
  Decoder& d;
  ~DecoderGuard() { jpeg_destroy_decompress(&d.cinfo); }
};

// What UNCHANGED gives: grey 1, everything else RGB.
int stored_channels(const Decoder& d) {
  return d.cinfo.num_components == 1 ? 1 : 3;
}

struct Encoder {
  jpeg_compress_struct cinfo;
  JpegErr err;
  unsigned char* buf;  // jpeg_mem_dest's malloc'd output
  unsigned long len;
};

bool write_image(Encoder& e, const uint8_t* chw, int channels, size_t height, size_t width,
                 int quality, uint8_t* row) {
  e.cinfo.err = &e.err.pub;
  if (setjmp(e.err.jump)) return false;
  jpeg_create_compress(&e.cinfo);
  jpeg_mem_dest(&e.cinfo, &e.buf, &e.len);
  e.cinfo.image_width = JDIMENSION(width);
  e.cinfo.image_height = JDIMENSION(height);
  e.cinfo.input_components = channels;
  e.cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&e.cinfo);
  jpeg_set_quality(&e.cinfo, quality, TRUE);
  jpeg_start_compress(&e.cinfo, TRUE);
  for (size_t y = 0; y < height; ++y) {
    gather_row(chw + y * width, channels, height * width, width, row);
    JSAMPROW rows[1] = {row};
    jpeg_write_scanlines(&e.cinfo, rows, 1);
  }
  jpeg_finish_compress(&e.cinfo);
  return true;
}

}  // namespace

Tensor jpeg_decode(const uint8_t* data, size_t size, ImageReadMode mode, const std::string& ctx) {
  const int want = mode_channels(mode, ctx);
  Decoder d{};
  init_errors(d.err);
  DecoderGuard guard{d};
  MINIDL_CHECK(read_header(d, data, size, nullptr), ctx, ": JPEG: ", d.err.msg);
  const int dst_c = want ? want : stored_channels(d);
  const size_t w = d.cinfo.image_width;
  Tensor out = alloc_image(dst_c, d.cinfo.image_height, d.cinfo.image_width, ctx);
  std::unique_ptr<uint8_t[]> row(new uint8_t[w * 4]), rgb(new uint8_t[w * 3]);
  const int src_c = d.cinfo.num_components == 1 ? 1 : 3;
  MINIDL_CHECK(read_pixels(d, row.get(), rgb.get(), out.data_ptr<uint8_t>(),
                           w * d.cinfo.image_height, row_converter(src_c, dst_c)),
               ctx, ": JPEG: ", d.err.msg);
  return out;
}

ImageInfo jpeg_header_info(std::FILE* f, const std::string& ctx) {
  Decoder d{};
  init_errors(d.err);
  DecoderGuard guard{d};
  MINIDL_CHECK(read_header(d, nullptr, 0, f), ctx, ": JPEG: ", d.err.msg);
  return ImageInfo{d.cinfo.image_height, d.cinfo.image_width, stored_channels(d), "jpeg"};
}

}  // namespace image_detail

Tensor decode_jpeg(const uint8_t* data, size_t size, ImageReadMode mode, const std::string& what) {
  return image_detail::jpeg_decode(data, size, mode, "decode_jpeg: " + what);
}

std::vector<uint8_t> encode_jpeg(const Tensor& x, int quality) {
  MINIDL_CHECK(x.defined(), "encode_jpeg: undefined tensor");
  MINIDL_CHECK(x.dtype() == DType::u8 && x.dim() == 3,
               "encode_jpeg: expected a uint8 [C,H,W] tensor, got ", dtype_name(x.dtype()), " ",
               shape_str(x.shape()));
  const int64_t c = x.size(0), h = x.size(1), w = x.size(2);
  MINIDL_CHECK(c == 1 || c == 3,
               "encode_jpeg: expected 1 or 3 channels, got x:", shape_str(x.shape()));
  MINIDL_CHECK(h >= 1 && w >= 1 && h <= JPEG_MAX_DIMENSION && w <= JPEG_MAX_DIMENSION,
               "encode_jpeg: image size must be 1 to ", JPEG_MAX_DIMENSION,
               " pixels, got x:", shape_str(x.shape()));
  MINIDL_CHECK(quality >= 1 && quality <= 100, "encode_jpeg: quality must be 1 to 100, got ",
               quality);
  const Tensor src = x.cpu().contiguous();
  std::unique_ptr<uint8_t[]> row(new uint8_t[size_t(w) * size_t(c)]);
  image_detail::Encoder e{};
  image_detail::init_errors(e.err);
  const bool ok = image_detail::write_image(e, src.data_ptr<uint8_t>(), int(c), size_t(h),
                                            size_t(w), quality, row.get());
  jpeg_destroy_compress(&e.cinfo);
  std::unique_ptr<unsigned char, void (*)(void*)> owned(e.buf, std::free);
  MINIDL_CHECK(ok, "encode_jpeg: x:", shape_str(x.shape()), ": ", e.err.msg);
  return std::vector<uint8_t>(e.buf, e.buf + e.len);
}

}  // namespace minidl::data
