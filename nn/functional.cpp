// nn::functional implementations: dropout and adaptive average pooling built from tensor ops.
#include "nn/functional.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "tensor/error.h"
#include "autograd/ops.h"

namespace minidl::nn {

std::string Size2::str() const {
  return scalar ? std::to_string(h) : tuple_str();
}

std::string Size2::tuple_str() const {
  std::ostringstream os;  // (operator+ chains trip gcc 12's bogus -Wrestrict)
  os << "(" << h << ", " << w << ")";
  return os.str();
}

std::string py_float(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf) - 2, v);
  char* end = res.ptr;
  if (std::find_if(buf, end, [](char c) { return c == '.' || c == 'e' || c == 'n' || c == 'i'; }) ==
      end) {
    *end++ = '.';  // Python prints integral floats as "1.0"
    *end++ = '0';
  }
  return std::string(buf, end);
}

namespace functional {

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  MINIDL_CHECK(p >= 0 && p <= 1, "dropout: probability has to be between 0 and 1, but got ", p);
  MINIDL_CHECK(x.is_floating_point(), "dropout: expected a floating tensor, got ",
               dtype_name(x.dtype()));
  if (!training || p == 0) return x;
  if (p == 1) return mul(x, zeros_like(x));
  return mul(x, dropout_mask(x.shape(), p, x.dtype(), x.device(), gen));
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 out) {
  MINIDL_CHECK(x.dim() == 3 || x.dim() == 4, "adaptive_avg_pool2d: expected a 3-D or 4-D input, ",
               "got shape ", x.shape_str());
  MINIDL_CHECK(out.h > 0 && out.w > 0, "adaptive_avg_pool2d: output size ", out.tuple_str(),
               " must be positive");
  if (x.dim() == 3) return adaptive_avg_pool2d(x.unsqueeze(0), out).squeeze(0);
  const int64_t H = x.size(2), W = x.size(3);
  MINIDL_CHECK(H > 0 && W > 0, "adaptive_avg_pool2d: input shape ", x.shape_str(),
               " has an empty spatial dim");
  if (H % out.h == 0 && W % out.w == 0) {
    Pool2dParams p;
    p.kernel[0] = p.stride[0] = H / out.h;
    p.kernel[1] = p.stride[1] = W / out.w;
    return avg_pool2d(x, p);
  }
  auto windows = [](const Tensor& t, int64_t dim, int64_t in, int64_t n) {
    std::vector<Tensor> parts;
    for (int64_t i = 0; i < n; ++i) {
      int64_t s = (i * in) / n, e = ((i + 1) * in + n - 1) / n;
      parts.push_back(mean(t.narrow(dim, s, e - s), {dim}, true));
    }
    return cat(parts, dim);
  };
  Tensor rows = H == out.h ? x : windows(x, 2, H, out.h);  // [N,C,oh,W]
  return W == out.w ? rows : windows(rows, 3, W, out.w);   // [N,C,oh,ow]
}

}  // namespace functional
}  // namespace minidl::nn
