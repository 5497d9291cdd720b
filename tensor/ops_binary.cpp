// Binary op frontends with broadcasting and PyTorch type promotion (add, div, pow, comparisons,
// where, ...), their Scalar overloads and in-place forms, plus equal/allclose. Inputs are cast to
// the common dtype and expanded to the output shape before the kernel runs.
#include <algorithm>
#include <limits>

#include "tensor/ops.h"

namespace minidl {
namespace {

// PyTorch's ScalarType names, used in its casting error messages.
std::string_view torch_type_name(DType t) {
  switch (t) {
    case DType::f32:
      return "Float";
    case DType::f64:
      return "Double";
    case DType::f16:
      return "Half";
    case DType::bf16:
      return "BFloat16";
    case DType::i32:
      return "Int";
    case DType::i64:
      return "Long";
    case DType::u8:
      return "Byte";
    case DType::boolean:
      return "Bool";
  }
  return "?";
}

// PyTorch's canCast: no float -> integral, no non-bool -> bool.
bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != kBool && to == kBool) return false;
  return true;
}

void check_pair(const Tensor& a, const Tensor& b, std::string_view op) {
  MINIDL_CHECK(a.defined() && b.defined(), "op `", op, "`: undefined input tensor");
  MINIDL_CHECK(a.device() == b.device(), "op `", op,
               "`: expected all tensors to be on the same device, got ", a.device(), " and ",
               b.device());
}

// A 0-d tensor holding `s` as dtype `dt`.
Tensor wrap_scalar(Scalar s, DType dt, Device device) {
  Tensor t = empty({}, dt, device);
  t.fill_(s);
  return t;
}

// Broadcast output shape plus both inputs cast to `dt` and expanded to it.
struct Operands {
  Tensor a, b;
  Shape shape;
};
Operands prepare(const Tensor& a, const Tensor& b, DType dt, std::string_view op) {
  check_pair(a, b, op);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  return {a.to(dt).expand(shape), b.to(dt).expand(shape), shape};
}

// out = kernel(a, b) computed in dtype `dt`, stored as `out_dt`.
template <Op op>
Tensor run_binary(const Tensor& a, const Tensor& b, DType dt, DType out_dt, std::string_view name) {
  Operands o = prepare(a, b, dt, name);
  Tensor out = empty(o.shape, out_dt, a.device());
  if (out.numel() > 0) kernel<op>(a.device())(o.a, o.b, out);
  return out;
}

template <Op op>
Tensor arith(const Tensor& a, const Tensor& b, std::string_view name) {
  check_pair(a, b, name);
  DType dt = result_type(a, b);
  return run_binary<op>(a, b, dt, dt, name);
}

template <Op op>
Tensor compare(const Tensor& a, const Tensor& b, std::string_view name) {
  check_pair(a, b, name);
  return run_binary<op>(a, b, result_type(a, b), kBool, name);
}

Scalar negate(Scalar s) {
  if (s.is_floating()) return Scalar(-s.to_double());
  return Scalar(-s.to_int());
}

bool is_one(Scalar s) {
  return s.to_double() == 1.0;
}

// In-place: result dtype castable to self, broadcast shape equal to self's, no self-overlap.
void check_inplace(const Tensor& self, const Tensor& b, DType result, std::string_view op) {
  check_pair(self, b, op);
  MINIDL_CHECK(can_cast(result, self.dtype()), "op `", op, "`: result type ",
               torch_type_name(result), " can't be cast to the desired output type ",
               torch_type_name(self.dtype()));
  Shape shape = broadcast_shapes(self.shape(), b.shape(), op);
  MINIDL_CHECK(shape == self.shape(), "op `", op, "`: output with shape ", self.shape_str(),
               " doesn't match the broadcast shape ", shape_str(shape));
  for (int64_t d = 0; d < self.dim(); ++d)
    MINIDL_CHECK(self.stride(d) != 0 || self.size(d) <= 1, "op `", op,
                 "`: unsupported operation: more than one element of the written-to tensor "
                 "refers to a single memory location (shape ",
                 self.shape_str(), ", dim ", d, " has stride 0)");
}

// self = kernel(self, b) in place, or through `out_of_place` when self's dtype differs from
// the computed one (e.g. f16 self with an f32 operand: compute in f32, round once).
template <Op op, typename F>
Tensor& inplace(Tensor& self, const Tensor& b, std::string_view name, F out_of_place) {
  const DType dt = result_type(self, b);
  check_inplace(self, b, dt, name);
  if (dt != self.dtype()) {
    self.copy_(out_of_place());
    return self;
  }
  Tensor other = b.to(dt);
  const bool same_view =
      other.is_same(self) || (other.storage_offset() == self.storage_offset() &&
                              other.strides() == self.strides() && other.shape() == self.shape());
  if (other.shares_storage(self) && !same_view) other = other.clone();  // may overlap self
  other = other.expand(self.shape());
  if (self.numel() > 0) kernel<op>(self.device())(self, other, self);
  self.storage()->bump_version();
  return self;
}

}  // namespace

// ---- tensor-tensor
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  check_pair(a, b, "add");
  if (is_one(alpha)) return arith<Op::add>(a, b, "add");
  const DType dt = result_type(a, b);
  MINIDL_CHECK(!(is_integral(dt, true) && alpha.is_floating()), "op `add`: for integral input ",
               "tensors, argument alpha must not be a floating point number (got ", alpha, ")");
  MINIDL_CHECK(!(alpha.is_bool() && dt != kBool), "op `add`: boolean alpha only supported for ",
               "boolean results");
  // a + alpha*b, with f16/bf16 computed in f32 and rounded once.
  const DType ct = (dt == kFloat16 || dt == kBFloat16) ? kFloat32 : dt;
  Tensor scaled = mul(b.to(ct), wrap_scalar(alpha, ct, b.device()));
  return arith<Op::add>(a.to(ct), scaled, "add").to(dt);
}

Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  check_pair(a, b, "sub");
  MINIDL_CHECK(!(a.dtype() == kBool && b.dtype() == kBool),
               "op `sub`: subtraction, the `-` operator, with two bool tensors is not supported. "
               "Use the `^` or `logical_xor()` operator instead (shapes ",
               a.shape_str(), " and ", b.shape_str(), ")");
  if (is_one(alpha)) return arith<Op::sub>(a, b, "sub");
  return add(a, b, negate(alpha));
}

Tensor mul(const Tensor& a, const Tensor& b) {
  return arith<Op::mul>(a, b, "mul");
}

Tensor div(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "div");
  DType dt = result_type(a, b);
  if (!is_floating(dt)) dt = kFloat32;  // true division
  return run_binary<Op::div>(a, b, dt, dt, "div");
}

Tensor pow(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "pow");
  const DType dt = result_type(a, b);
  MINIDL_CHECK(dt != kBool, "op `pow`: not supported for bool tensors (shapes ", a.shape_str(),
               " and ", b.shape_str(), ")");
  return run_binary<Op::pow>(a, b, dt, dt, "pow");
}

Tensor pow(const Tensor& a, Scalar exponent) {
  MINIDL_CHECK(a.defined(), "op `pow`: undefined input tensor");
  const DType dt = result_type(a, exponent);
  MINIDL_CHECK(dt != kBool, "op `pow`: not supported for bool tensors (shape ", a.shape_str(), ")");
  MINIDL_CHECK(!(is_integral(dt) && exponent.to_double() < 0),
               "op `pow`: integers to negative integer powers are not allowed (exponent ", exponent,
               ", dtype ", dt, ")");
  return pow(a, wrap_scalar(exponent, dt, a.device()));
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  return arith<Op::maximum>(a, b, "maximum");
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return arith<Op::minimum>(a, b, "minimum");
}
Tensor eq(const Tensor& a, const Tensor& b) {
  return compare<Op::eq>(a, b, "eq");
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return compare<Op::ne>(a, b, "ne");
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return compare<Op::lt>(a, b, "lt");
}
Tensor le(const Tensor& a, const Tensor& b) {
  return compare<Op::le>(a, b, "le");
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return compare<Op::gt>(a, b, "gt");
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return compare<Op::ge>(a, b, "ge");
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return compare<Op::logical_and>(a, b, "logical_and");
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return compare<Op::logical_or>(a, b, "logical_or");
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  MINIDL_CHECK(cond.defined(), "op `where`: undefined condition tensor");
  check_pair(a, b, "where");
  check_pair(cond, a, "where");
  MINIDL_CHECK(cond.dtype() == kBool,
               "op `where`: expected condition to be a boolean tensor, "
               "but got a tensor with dtype ",
               cond.dtype(), " (shape ", cond.shape_str(), ")");
  const DType dt = result_type(a, b);
  Shape shape =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor c = cond.expand(shape), x = a.to(dt).expand(shape), y = b.to(dt).expand(shape);
  Tensor out = empty(shape, dt, a.device());
  if (out.numel() > 0) kernel<Op::where>(a.device())(c, x, y, out);
  return out;
}

// ---- Scalar overloads: the scalar becomes a 0-d tensor of the promoted dtype.
namespace {
Tensor wrap_for(const Tensor& a, Scalar s, std::string_view op) {
  MINIDL_CHECK(a.defined(), "op `", op, "`: undefined input tensor");
  return wrap_scalar(s, result_type(a, s), a.device());
}
}  // namespace

Tensor add(const Tensor& a, Scalar b) {
  return add(a, wrap_for(a, b, "add"));
}
Tensor sub(const Tensor& a, Scalar b) {
  return sub(a, wrap_for(a, b, "sub"));
}
Tensor mul(const Tensor& a, Scalar b) {
  return mul(a, wrap_for(a, b, "mul"));
}
Tensor div(const Tensor& a, Scalar b) {
  return div(a, wrap_for(a, b, "div"));
}
Tensor maximum(const Tensor& a, Scalar b) {
  return maximum(a, wrap_for(a, b, "maximum"));
}
Tensor minimum(const Tensor& a, Scalar b) {
  return minimum(a, wrap_for(a, b, "minimum"));
}
Tensor eq(const Tensor& a, Scalar b) {
  return eq(a, wrap_for(a, b, "eq"));
}
Tensor ne(const Tensor& a, Scalar b) {
  return ne(a, wrap_for(a, b, "ne"));
}
Tensor lt(const Tensor& a, Scalar b) {
  return lt(a, wrap_for(a, b, "lt"));
}
Tensor le(const Tensor& a, Scalar b) {
  return le(a, wrap_for(a, b, "le"));
}
Tensor gt(const Tensor& a, Scalar b) {
  return gt(a, wrap_for(a, b, "gt"));
}
Tensor ge(const Tensor& a, Scalar b) {
  return ge(a, wrap_for(a, b, "ge"));
}
Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  return where(cond, a, wrap_for(a, b, "where"));
}
Tensor operator-(Scalar a, const Tensor& b) {
  return sub(wrap_for(b, a, "sub"), b);
}
Tensor operator/(Scalar a, const Tensor& b) {
  return div(wrap_for(b, a, "div"), b);
}

// ---- in place
Tensor& add_(Tensor& self, const Tensor& b, Scalar alpha) {
  if (!is_one(alpha)) {
    check_inplace(self, b, result_type(self, b), "add_");
    return self.copy_(add(self, b, alpha));
  }
  return inplace<Op::add>(self, b, "add_", [&] { return add(self, b); });
}

Tensor& sub_(Tensor& self, const Tensor& b, Scalar alpha) {
  if (!is_one(alpha) || (self.dtype() == kBool && b.dtype() == kBool)) {
    check_inplace(self, b, result_type(self, b), "sub_");
    return self.copy_(sub(self, b, alpha));
  }
  return inplace<Op::sub>(self, b, "sub_", [&] { return sub(self, b); });
}

Tensor& mul_(Tensor& self, const Tensor& b) {
  return inplace<Op::mul>(self, b, "mul_", [&] { return mul(self, b); });
}

Tensor& div_(Tensor& self, const Tensor& b) {
  check_pair(self, b, "div_");
  DType dt = result_type(self, b);
  if (!is_floating(dt)) dt = kFloat32;
  check_inplace(self, b, dt, "div_");
  return inplace<Op::div>(self, b, "div_", [&] { return div(self, b); });
}

Tensor& add_(Tensor& self, Scalar b) {
  return add_(self, wrap_for(self, b, "add_"));
}
Tensor& mul_(Tensor& self, Scalar b) {
  return mul_(self, wrap_for(self, b, "mul_"));
}

// ---- exact comparisons (tests)
bool equal(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "equal");
  if (a.shape() != b.shape()) return false;
  std::vector<uint8_t> v = eq(a, b).tolist<uint8_t>();
  return std::all_of(v.begin(), v.end(), [](uint8_t x) { return x != 0; });
}

// |a - b| <= atol + rtol*|b| with |a - b| finite, elementwise (broadcasting); equal infinities
// are close, NaN is not.
bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  check_pair(a, b, "allclose");
  broadcast_shapes(a.shape(), b.shape(), "allclose");
  Tensor x = a.to(kFloat64), y = b.to(kFloat64);
  Tensor diff = abs(sub(x, y));
  Tensor close = logical_and(le(diff, add(mul(abs(y), rtol), atol)),
                             lt(diff, std::numeric_limits<double>::infinity()));
  std::vector<uint8_t> v = logical_or(close, eq(x, y)).tolist<uint8_t>();
  return std::all_of(v.begin(), v.end(), [](uint8_t x) { return x != 0; });
}

}  // namespace minidl
