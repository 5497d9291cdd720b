// Image files in and out (torchvision.io): read_image / decode_image for JPEG (libjpeg-turbo) and
// PNG (libpng), giving uint8 x:[C,H,W]; encode_png / write_png and encode_jpeg / write_jpeg from
// uint8 x:[C,H,W] with C = 1 or 3 (PNG also 2, 4). Errors name the file and the reason.
// Pixels equal PIL's Image.open(p).convert(...) (tests/test_image_io.cpp); where torchvision 0.14
// differs (its GRAY, palettes in UNCHANGED, tRNS, 16-bit and CMYK files), minidl follows PIL.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace minidl::data {

// torchvision.io.ImageReadMode: the channels read_image returns, converted as PIL's convert()
// does: grey from colour is (R*19595 + G*38470 + B*7471 + 0x8000) >> 16 (convert("L")), colour
// from grey replicates, a missing alpha is 255, a dropped alpha is dropped (no compositing).
// A PNG tRNS colour becomes alpha in the *_ALPHA modes only (palette tRNS: also UNCHANGED).
// JPEG: grey files are 1 channel, CMYK/YCCK files RGB (PIL's inverted Adobe CMYK).
enum class ImageReadMode {
  UNCHANGED,   // as stored: 1 (grey), 2 (grey+alpha), 3 (RGB) or 4 (RGBA); palette -> RGB(A)
  GRAY,        // 1 channel; PIL's convert("L")
  GRAY_ALPHA,  // 2 channels; PIL's convert("LA")
  RGB,         // 3 channels; bytes equal PIL's Image.open(p).convert("RGB")
  RGB_ALPHA,   // 4 channels; PIL's convert("RGBA")
};

// The header of an image file without decoding its pixels.
struct ImageInfo {
  int64_t height = 0, width = 0;
  int64_t channels = 0;  // what UNCHANGED decodes (a palette: 3, or 4 with tRNS; CMYK: 3)
  std::string format;    // "jpeg" or "png"
};

// Reads and decodes `path` (format by content, not by extension) -> uint8 x:[C,H,W].
// 16-bit PNGs keep the high byte of each sample. Throws minidl::Error naming `path` and the
// reason for a missing, empty, truncated, corrupt or unsupported file, one line:
// "read_image: <path>: JPEG: Premature end of JPEG file". Images over 2^31 bytes are refused.
Tensor read_image(const std::string& path, ImageReadMode mode = ImageReadMode::UNCHANGED);

// The same on bytes in memory; `what` names the source in errors.
Tensor decode_image(const uint8_t* data, size_t size, ImageReadMode mode = ImageReadMode::UNCHANGED,
                    const std::string& what = "<memory>");
Tensor decode_jpeg(const uint8_t* data, size_t size, ImageReadMode mode = ImageReadMode::UNCHANGED,
                   const std::string& what = "<memory>");
Tensor decode_png(const uint8_t* data, size_t size, ImageReadMode mode = ImageReadMode::UNCHANGED,
                  const std::string& what = "<memory>");

// Size and stored channels from the header only (for crops planned before decoding); reads no
// further into the file than the header.
ImageInfo read_image_info(const std::string& path);

// The whole file as bytes (torchvision.io.read_file); throws naming `path`.
std::vector<uint8_t> read_file(const std::string& path);

// x: uint8 [C,H,W] (contiguous or not), C in {1,2,3,4} for PNG, {1,3} for JPEG.
std::vector<uint8_t> encode_png(const Tensor& x, int compression_level = 6);
void write_png(const Tensor& x, const std::string& path, int compression_level = 6);
std::vector<uint8_t> encode_jpeg(const Tensor& x, int quality = 75);
void write_jpeg(const Tensor& x, const std::string& path, int quality = 75);

}  // namespace minidl::data
