// The PNG codec: decode_png / encode_png, and for image_io.cpp decoding with an error prefix of the
// caller's choosing ("read_image: <path>: PNG: ..."), the header-only reader, the signature test.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "data/image/image_types.h"
#include "tensor/tensor.h"

namespace minidl::data {

// PNG bytes in memory -> uint8 x:[C,H,W] (read_image's decoding; `what` names the source in
// errors), and uint8 x:[C,H,W] -> PNG bytes (C in {1,2,3,4}).
Tensor decode_png(const uint8_t* data, size_t size, ImageReadMode mode = ImageReadMode::UNCHANGED,
                  const std::string& what = "<memory>");
std::vector<uint8_t> encode_png(const Tensor& x, int compression_level = 6);

namespace image_detail {

// Errors read "<ctx>: PNG: <reason>".
Tensor png_decode(const uint8_t* data, size_t size, ImageReadMode mode, const std::string& ctx);

// The header only, from `f` positioned at the start of the file (reads no further than needed).
ImageInfo png_header_info(std::FILE* f, const std::string& ctx);

inline bool is_png(const uint8_t* p, size_t n) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n < 8) return false;
  for (int i = 0; i < 8; ++i)
    if (p[i] != sig[i]) return false;
  return true;
}

}  // namespace image_detail
}  // namespace minidl::data
