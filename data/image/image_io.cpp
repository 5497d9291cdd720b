// read_file / read_image / decode_image (format by magic bytes), read_image_info, write_png and
// write_jpeg over the PNG and JPEG codecs (png_io.h, jpeg_io.h).
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <system_error>

#include "data/image/image_rows.h"
#include "data/image/jpeg_io.h"
#include "data/image/png_io.h"
#include "tensor/error.h"

namespace minidl::data {
namespace image_detail {
namespace {

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
