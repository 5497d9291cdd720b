// The JPEG codec: decode_jpeg / encode_jpeg, and for image_io.cpp decoding with an error prefix of
// the caller's choosing ("read_image: <path>: JPEG: ..."), the header-only reader, the signature
// test.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "data/image/image_types.h"
#include "tensor/tensor.h"

namespace minidl::data {

// JPEG bytes in memory -> uint8 x:[C,H,W] (read_image's decoding; `what` names the source in
// errors), and uint8 x:[C,H,W] -> JPEG bytes (C in {1,3}).
Tensor decode_jpeg(const uint8_t* data, size_t size, ImageReadMode mode = ImageReadMode::UNCHANGED,
                   const std::string& what = "<memory>");
std::vector<uint8_t> encode_jpeg(const Tensor& x, int quality = 75);

namespace image_detail {

// Errors read "<ctx>: JPEG: <reason>".
Tensor jpeg_decode(const uint8_t* data, size_t size, ImageReadMode mode, const std::string& ctx);

// The header only, from `f` positioned at the start of the file (reads no further than needed).
ImageInfo jpeg_header_info(std::FILE* f, const std::string& ctx);

inline bool is_jpeg(const uint8_t* p, size_t n) {
  return n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF;
}

}  // namespace image_detail
}  // namespace minidl::data
