// Type promotion (PyTorch's table and its 0-d/scalar priority rules) and broadcasting.
#include <algorithm>

#include "tensor/ops.h"

namespace minidl {

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::boolean) return b;
  if (b == DType::boolean) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa && fb) {
    if (a == DType::f64 || b == DType::f64) return DType::f64;
    return DType::f32;  // f16+bf16, f16+f32, bf16+f32
  }
  if (fa) return a;
  if (fb) return b;
  // both integral: u8, i32, i64
  if (a == DType::i64 || b == DType::i64) return DType::i64;
  return DType::i32;  // u8 + i32
}

namespace {
// PyTorch's combine_categories: a dimensioned operand's dtype wins within its category.
DType combine_categories(DType higher, DType lower) {
  if (is_floating(higher)) return higher;
  if (higher == DType::boolean || is_floating(lower)) return promote_types(higher, lower);
  return higher;
}
}  // namespace

DType result_type(const Tensor& a, const Tensor& b) {
  const bool za = a.dim() == 0, zb = b.dim() == 0;
  if (za == zb) return promote_types(a.dtype(), b.dtype());
  return za ? combine_categories(b.dtype(), a.dtype()) : combine_categories(a.dtype(), b.dtype());
}

DType result_type(const Tensor& a, Scalar b) {
  return combine_categories(a.dtype(), b.default_dtype());
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MINIDL_CHECK(da == db || da == 1 || db == 1, "op `", op, "`: shapes ", shape_str(a), " and ",
                 shape_str(b), " are not broadcastable (size ", da, " vs ", db, " at dim ", i, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace minidl
