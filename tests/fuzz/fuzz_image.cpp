// Fuzz target of the image decoders (data/image/): the input decoded in memory in all five
// ImageReadModes, which must agree with each other (GRAY is PIL's luma of RGB, the alpha planes
// match, RGB is RGB_ALPHA without alpha), and as a file through read_image_info, which must
// agree with what UNCHANGED decoded.
#include <stdexcept>

#include "data/image/image_io.h"
#include "fuzz_targets.h"
#include "tensor/error.h"

namespace minidl::fuzz {
namespace {

using data::ImageReadMode;

Tensor decode(const uint8_t* data, size_t size, ImageReadMode mode) {
  try {
    Tensor x = data::decode_image(data, size, mode, "<fuzz>");
    if (x.dtype() != DType::u8 || x.dim() != 3 || !x.is_contiguous() || x.size(0) < 1 ||
        x.size(0) > 4 || x.numel() == 0)
      throw std::logic_error("fuzz_image: decode_image returned a bad tensor " +
                             shape_str(x.shape()));
    return x;
  } catch (const Error&) {
    return Tensor();
  }
}

void expect(bool ok, const char* what) {
  if (!ok) throw std::logic_error(std::string("fuzz_image: modes disagree: ") + what);
}

// The modes describe one image: same size, GRAY = luma(RGB), shared alpha.
void check_modes(const Tensor& gray, const Tensor& gray_a, const Tensor& rgb, const Tensor& rgba) {
  const int64_t h = rgb.size(1), w = rgb.size(2), n = h * w;
  for (const Tensor* t : {&gray, &gray_a, &rgba})
    expect(t->size(1) == h && t->size(2) == w, "sizes");
  expect(gray.size(0) == 1 && gray_a.size(0) == 2 && rgb.size(0) == 3 && rgba.size(0) == 4,
         "channels");
  const uint8_t* g = gray.data_ptr<uint8_t>();
  const uint8_t* ga = gray_a.data_ptr<uint8_t>();
  const uint8_t* c = rgb.data_ptr<uint8_t>();
  const uint8_t* ca = rgba.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    const unsigned l = (c[i] * 19595u + c[n + i] * 38470u + c[2 * n + i] * 7471u + 0x8000u) >> 16;
    expect(g[i] == l, "GRAY is not the luma of RGB");
    expect(ga[i] == l, "GRAY_ALPHA's grey");
    expect(ga[n + i] == ca[3 * n + i], "alpha planes");
    for (int k = 0; k < 3; ++k) expect(ca[k * n + i] == c[k * n + i], "RGB_ALPHA's colour");
  }
}

}  // namespace

int fuzz_image(const uint8_t* data, size_t size) {
  const Tensor unchanged = decode(data, size, ImageReadMode::UNCHANGED);
  const Tensor gray = decode(data, size, ImageReadMode::GRAY);
  const Tensor gray_a = decode(data, size, ImageReadMode::GRAY_ALPHA);
  const Tensor rgb = decode(data, size, ImageReadMode::RGB);
  const Tensor rgba = decode(data, size, ImageReadMode::RGB_ALPHA);
  // RGB_ALPHA / GRAY_ALPHA decode tRNS as alpha, which the other modes skip, so a file with a
  // broken tRNS chunk may fail in some modes only; when all succeed they must agree.
  if (gray.defined() && gray_a.defined() && rgb.defined() && rgba.defined())
    check_modes(gray, gray_a, rgb, rgba);

  const std::string path = write_scratch("image", data, size);
  try {
    const data::ImageInfo info = data::read_image_info(path);
    if (info.height < 1 || info.width < 1 || info.channels < 1 || info.channels > 4 ||
        (info.format != "png" && info.format != "jpeg"))
      throw std::logic_error("fuzz_image: read_image_info returned a bad header");
    if (unchanged.defined() && unchanged.shape() != Shape{info.channels, info.height, info.width})
      throw std::logic_error("fuzz_image: read_image_info disagrees with decode_image " +
                             shape_str(unchanged.shape()));
  } catch (const Error&) {
    if (unchanged.defined())  // a decodable file has a readable header
      throw std::logic_error("fuzz_image: read_image_info fails on a decodable file");
  }
  return 0;
}

}  // namespace minidl::fuzz
