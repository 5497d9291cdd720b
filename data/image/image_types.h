// The image types torchvision.io's functions share: ImageReadMode (the channels a decode returns)
// and ImageInfo (an image file's header).
#pragma once
#include <cstdint>
#include <string>

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

}  // namespace minidl::data
