// Image files in and out (torchvision.io): read_image / decode_image for JPEG (libjpeg-turbo) and
// PNG (libpng), giving uint8 x:[C,H,W]; encode_png / write_png and encode_jpeg / write_jpeg from
// uint8 x:[C,H,W] with C = 1 or 3 (PNG also 2, 4). Errors name the file and the reason.
// Pixels equal PIL's Image.open(p).convert(...) (tests/test_image_io.cpp); where torchvision 0.14
// differs (its GRAY, palettes in UNCHANGED, tRNS, 16-bit and CMYK files), minidl follows PIL.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/image/image_types.h"
#include "data/image/jpeg_io.h"
#include "data/image/png_io.h"
#include "tensor/tensor.h"

namespace minidl::data {

// Reads and decodes `path` (format by content, not by extension) -> uint8 x:[C,H,W].
// 16-bit PNGs keep the high byte of each sample. Throws minidl::Error naming `path` and the
// reason for a missing, empty, truncated, corrupt or unsupported file, one line:
// "read_image: <path>: JPEG: Premature end of JPEG file". Images over 2^31 bytes are refused.
Tensor read_image(const std::string& path, ImageReadMode mode = ImageReadMode::UNCHANGED);

// The same on bytes in memory; `what` names the source in errors.
Tensor decode_image(const uint8_t* data, size_t size, ImageReadMode mode = ImageReadMode::UNCHANGED,
                    const std::string& what = "<memory>");
// decode_jpeg / encode_jpeg: data/image/jpeg_io.h; decode_png / encode_png: data/image/png_io.h.

// Size and stored channels from the header only (for crops planned before decoding); reads no
// further into the file than the header.
ImageInfo read_image_info(const std::string& path);

// The whole file as bytes (torchvision.io.read_file); throws naming `path`.
std::vector<uint8_t> read_file(const std::string& path);

// encode_png / encode_jpeg to a file. x: uint8 [C,H,W] (contiguous or not), C in {1,2,3,4} for
// PNG, {1,3} for JPEG.
void write_png(const Tensor& x, const std::string& path, int compression_level = 6);
void write_jpeg(const Tensor& x, const std::string& path, int quality = 75);

}  // namespace minidl::data
