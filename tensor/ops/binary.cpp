// The raw binary ops with broadcasting and PyTorch type promotion (add, div, pow, comparisons,
// where, ...), their Scalar overloads and in-place forms, plus equal/allclose: inputs are cast
// to the common dtype and expanded to the output shape before the kernel runs. No history here.
#include <algorithm>
#include <limits>
#include <utility>

#include "tensor/ops.h"

namespace minidl {

// ---- device checks (declared in tensor/ops.h, used by every frontend file)
void check_same_device(std::string_view op, Device a, Device b) {
  MINIDL_CHECK(a == b, "op `", op, "`: expected all tensors on one device, got ", a, " and ", b);
}

namespace native {
namespace {

// PyTorch's canCast: no float -> integral, no non-bool -> bool.
bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != kBool && to == kBool) return false;
  return true;
}

void check_pair(const Tensor& a, const Tensor& b, std::string_view op) {
  MINIDL_CHECK(a.defined() && b.defined(), "op `", op, "`: undefined input tensor");
  check_same_device(op, a, b);
}

// A 0-d tensor holding `s` as dtype `dt`.
Tensor wrap_scalar(Scalar s, DType dt, Device device) {
  Tensor t = empty({}, dt, device);
  fill_(t, s);
  return t;
}

// The scalar operand of `op` as a 0-d tensor of the promoted dtype.
Tensor wrap_for(const Tensor& a, Scalar s, std::string_view op) {
  MINIDL_CHECK(a.defined(), "op `", op, "`: undefined input tensor");
  return wrap_scalar(s, result_type(a, s), a.device());
}

// Broadcast output shape plus both inputs cast to `dt` and expanded to it.
struct Operands {
  Tensor a, b;
  Shape shape;
};
Operands prepare(const Tensor& a, const Tensor& b, DType dt, std::string_view op) {
  check_pair(a, b, op);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  return {expand(to(a, dt), shape), expand(to(b, dt), shape), shape};
}

// out = kernel(a, b) computed in dtype `dt`, stored as `out_dt`.
template <Op op>
Tensor run_binary(const Tensor& a, const Tensor& b, DType dt, DType out_dt, std::string_view name) {
  Operands o = prepare(a, b, dt, name);
  Tensor out = empty(o.shape, out_dt, a.device());
  if (out.numel() > 0) kernel<op>(a.device())(o.a, o.b, out);
  return out;
}

// Rounded division a / b in dtype dt (a and b already promoted), broadcast.
template <Op op>
Tensor div_rounded(const Tensor& a, const Tensor& b, DType dt) {
  Shape shape = broadcast_shapes(a.shape(), b.shape(), "div");
  Tensor ea = expand(to(a, dt), shape), eb = expand(to(b, dt), shape);
  if (is_integral(dt) && eb.numel() > 0)
    MINIDL_CHECK(sum(eq(eb, Scalar(0))).item<int64_t>() == 0,
                 "ZeroDivisionError: op `div` with rounding_mode: integer division by zero "
                 "(dtype ",
                 dt, ")");
  Tensor out = empty(shape, dt, a.device());
  if (out.numel() > 0) kernel<op>(a.device())(ea, eb, out);
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
void validate_inplace_result(const Tensor& self, const Tensor& b, DType result,
                             std::string_view op) {
  check_pair(self, b, op);
  MINIDL_CHECK(can_cast(result, self.dtype()), "op `", op, "`: result type ",
               dtype_torch_scalar_type(result), " can't be cast to the desired output type ",
               dtype_torch_scalar_type(self.dtype()));
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
  validate_inplace_result(self, b, dt, name);
  if (dt != self.dtype()) {
    copy_(self, out_of_place());
    return self;
  }
  Tensor other = to(b, dt);
  const bool same_view =
      other.is_same(self) || (other.storage_offset() == self.storage_offset() &&
                              other.strides() == self.strides() && other.shape() == self.shape());
  if (other.shares_storage(self) && !same_view) other = clone(other);  // may overlap self
  other = expand(other, self.shape());
  if (self.numel() > 0) kernel<op>(self.device())(self, other, self);
  self.storage()->bump_version();
  return self;
}

// a + alpha*b for alpha != 1.
Tensor add_scaled(const Tensor& a, const Tensor& b, Scalar alpha) {
  const DType dt = result_type(a, b);
  MINIDL_CHECK(!(is_integral(dt, true) && alpha.is_floating()), "op `add`: for integral input ",
               "tensors, argument alpha must not be a floating point number (got ", alpha, ")");
  MINIDL_CHECK(!(alpha.is_bool() && dt != kBool), "op `add`: boolean alpha only supported for ",
               "boolean results");
  // a + alpha*b, with f16/bf16 computed in f32 and rounded once (on CPU per element, without
  // f32 copies of the operands).
  const DType ct = (dt == kFloat16 || dt == kBFloat16) ? kFloat32 : dt;
  if (ct != dt) {
    Operands o = prepare(a, b, dt, "add");
    Tensor out = empty(o.shape, dt, a.device());
    if (out.numel() > 0)
      kernel<Op::add_scaled_reduced>(out.device())(o.a, o.b, float(alpha.to_double()), out);
    return out;
  }
  Tensor scaled = mul(to(b, ct), wrap_scalar(alpha, ct, b.device()));
  return to(arith<Op::add>(to(a, ct), scaled, "add"), dt);
}

}  // namespace

// ---- tensor-tensor
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  check_pair(a, b, "add");
  return is_one(alpha) ? arith<Op::add>(a, b, "add") : add_scaled(a, b, alpha);
}

Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  check_pair(a, b, "sub");
  MINIDL_CHECK(!(a.dtype() == kBool && b.dtype() == kBool),
               "op `sub`: subtraction, the `-` operator, with two bool tensors is not supported. "
               "Use the `^` or `logical_xor()` operator instead (shapes ",
               a.shape_str(), " and ", b.shape_str(), ")");
  if (!is_one(alpha)) return add(a, b, negate(alpha));
  return arith<Op::sub>(a, b, "sub");
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
  Tensor out = empty(shape, dt, a.device());
  Tensor c = expand(cond, shape), x = expand(to(a, dt), shape), y = expand(to(b, dt), shape);
  if (out.numel() > 0) kernel<Op::where>(a.device())(c, x, y, out);
  return out;
}

// ---- Scalar overloads: the scalar becomes a 0-d tensor of the promoted dtype.
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

// ---- rounded division (torch.div's rounding_mode, floor_divide): integer dtypes are kept
Tensor div(const Tensor& a, const Tensor& b, std::optional<std::string_view> rounding_mode) {
  if (!rounding_mode) return div(a, b);
  check_pair(a, b, "div");
  const std::string_view mode = *rounding_mode;
  MINIDL_CHECK(mode == "trunc" || mode == "floor", "op `div`: expected rounding_mode to be one ",
               "of None, 'trunc', or 'floor' but found '", mode, "'");
  const DType dt = result_type(a, b);
  MINIDL_CHECK(dt != kBool, "op `div` with rounding_mode '", mode, "': not implemented for ",
               "bool (shapes ", a.shape_str(), " and ", b.shape_str(), ")");
  return mode == "trunc" ? div_rounded<Op::div_trunc>(a, b, dt)
                         : div_rounded<Op::div_floor>(a, b, dt);
}
Tensor div(const Tensor& a, Scalar b, std::optional<std::string_view> rounding_mode) {
  return div(a, wrap_for(a, b, "div"), rounding_mode);
}
Tensor floor_divide(const Tensor& a, const Tensor& b) {
  return div(a, b, "floor");
}
Tensor floor_divide(const Tensor& a, Scalar b) {
  return div(a, b, "floor");
}

// ---- in place
Tensor& add_(Tensor& self, const Tensor& b, Scalar alpha) {
  if (!is_one(alpha)) {
    validate_inplace_result(self, b, result_type(self, b), "add_");
    copy_(self, add(self, b, alpha));
    return self;
  }
  return inplace<Op::add>(self, b, "add_", [&] { return add(self, b); });
}

Tensor& sub_(Tensor& self, const Tensor& b, Scalar alpha) {
  if (!is_one(alpha) || (self.dtype() == kBool && b.dtype() == kBool)) {
    validate_inplace_result(self, b, result_type(self, b), "sub_");
    copy_(self, sub(self, b, alpha));
    return self;
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
  validate_inplace_result(self, b, dt, "div_");
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
  Tensor x = to(a, kFloat64), y = to(b, kFloat64);
  Tensor diff = abs(sub(x, y));
  Tensor close = logical_and(le(diff, add(mul(abs(y), rtol), atol)),
                             lt(diff, std::numeric_limits<double>::infinity()));
  std::vector<uint8_t> v = logical_or(close, eq(x, y)).tolist<uint8_t>();
  return std::all_of(v.begin(), v.end(), [](uint8_t x) { return x != 0; });
}

}  // namespace native
}  // namespace minidl
