// Strided head views for the attention kernels (CPU and CUDA): element (bh, i, x) of a
// [BH,n,d] (H = 1) or [B,H,n,d] tensor with unit stride in d lies at
// data + offset(bh) + i * row_stride + x, so q, k, v can be read from a fused QKV projection
// and out written into [B,T,C] without copies. Included only by the attention code.
#pragma once
#include <cstdint>

#include "tensor/error.h"
#include "tensor/half.h"  // MINIDL_HD
#include "tensor/tensor.h"

namespace minidl {

struct HeadLayout {
  int64_t H = 1;  // heads per batch entry (bh = b * H + h)
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
  MINIDL_HD int64_t offset(int64_t bh) const {
    return (bh / H) * batch_stride + (bh % H) * head_stride;
  }
};

// t:[BH,n,d] or [B,H,n,d] with stride(-1) == 1 (any d when d <= 1) -> its layout.
inline HeadLayout head_layout(const Tensor& t) {
  MINIDL_CHECK(t.defined() && (t.dim() == 3 || t.dim() == 4) &&
                   (t.size(-1) <= 1 || t.strides()[size_t(t.dim() - 1)] == 1),
               "attention: expected a [BH, n, d] or [B, H, n, d] head view with unit stride in d, "
               "got ",
               t.defined() ? t.shape_str() : std::string("undefined"));
  const auto& st = t.strides();
  HeadLayout l;
  if (t.dim() == 3) {
    l.batch_stride = st[0];
    l.row_stride = st[1];
  } else {
    l.H = t.size(1) > 0 ? t.size(1) : 1;
    l.batch_stride = st[0];
    l.head_stride = st[1];
    l.row_stride = st[2];
  }
  return l;
}

// Batch-heads of a head view: BH, or B * H.
inline int64_t head_count(const Tensor& t) {
  return t.dim() == 4 ? t.size(0) * t.size(1) : t.size(0);
}

}  // namespace minidl
