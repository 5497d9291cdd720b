// Binary op frontends with broadcasting and PyTorch type promotion (add, div, pow, comparisons,
// where, ...), their Scalar overloads and in-place forms, plus equal/allclose. Inputs are cast to
// the common dtype and expanded to the output shape before the kernel runs. Differentiable ops
// record one autograd node whose gradients are un-broadcast with sum_to_shape.
#include <algorithm>
#include <limits>
#include <utility>

#include "autograd/function.h"
#include "tensor/autocast.h"
#include "tensor/cpu/kernels.h"
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
  check_same_device(op, a, b);
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
  NoGradGuard guard;  // the casts/expands are internal: the caller records one node
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
void check_inplace_result(const Tensor& self, const Tensor& b, DType result, std::string_view op) {
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
  check_inplace_result(self, b, dt, name);
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

using Saved = std::vector<Tensor>;

// An input's gradient: the output-shaped `g` summed to the input's shape, in the input's dtype.
Tensor reduce_grad(const Tensor& g, const Shape& shape, DType dt) {
  Tensor r = sum_to_shape(g, shape);
  return r.dtype() == dt || !is_floating(dt) ? r : r.to(dt);
}

// Attaches a two-input node to `out`. fn(g, saved, need_a, need_b) returns (da, db) with the
// output's shape (undefined where not needed); they are un-broadcast to each input.
template <typename F>
Tensor with_grad2(Tensor out, const char* name, const Tensor& a, const Tensor& b,
                  const Saved& saved, F fn) {
  const bool na = a.requires_grad(), nb = b.requires_grad();
  if (!GradMode::is_enabled() || !(na || nb)) return out;
  autograd::record(name, {a, b}, {&out}, saved,
                   [fn, na, nb, sa = a.shape(), sb = b.shape(), da = a.dtype(), db = b.dtype()](
                       const auto& g, const auto& s) {
                     auto [ga, gb] = fn(g[0], s, na, nb);
                     return std::vector<Tensor>{na ? reduce_grad(ga, sa, da) : Tensor(),
                                                nb ? reduce_grad(gb, sb, db) : Tensor()};
                   });
  return out;
}

using GradPair = std::pair<Tensor, Tensor>;

// a + alpha*b for alpha != 1.
Tensor add_scaled(const Tensor& a, const Tensor& b, Scalar alpha) {
  const DType dt = result_type(a, b);
  MINIDL_CHECK(!(is_integral(dt, true) && alpha.is_floating()), "op `add`: for integral input ",
               "tensors, argument alpha must not be a floating point number (got ", alpha, ")");
  MINIDL_CHECK(!(alpha.is_bool() && dt != kBool), "op `add`: boolean alpha only supported for ",
               "boolean results");
  // a + alpha*b, with f16/bf16 computed in f32 and rounded once: on CPU per element, without
  // f32 copies of the operands.
  const DType ct = (dt == kFloat16 || dt == kBFloat16) ? kFloat32 : dt;
  if (ct != dt && a.device().type == DeviceType::cpu) {
    Operands o = prepare(a, b, dt, "add");
    Tensor out = empty(o.shape, dt, a.device());
    if (out.numel() > 0) cpu::add_scaled_reduced(o.a, o.b, float(alpha.to_double()), out);
    return out;
  }
  Tensor scaled = mul(b.to(ct), wrap_scalar(alpha, ct, b.device()));
  return arith<Op::add>(a.to(ct), scaled, "add").to(dt);
}

}  // namespace

// ---- device checks (declared in tensor/ops.h, used by every frontend file)
void check_same_device(std::string_view op, Device a, Device b) {
  MINIDL_CHECK(a == b, "op `", op, "`: expected all tensors on one device, got ", a, " and ", b);
}

// ---- tensor-tensor
// da = g, db = alpha g
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  check_pair(a, b, "add");
  Tensor out;
  if (is_one(alpha)) {
    out = arith<Op::add>(a, b, "add");
  } else {
    NoGradGuard guard;
    out = add_scaled(a, b, alpha);
  }
  const double al = alpha.to_double();
  return with_grad2(out, "AddBackward", a, b, {},
                    [al](const Tensor& g, const Saved&, bool, bool nb) {
                      return GradPair{g, nb && al != 1 ? mul(g, al) : g};
                    });
}

Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  check_pair(a, b, "sub");
  MINIDL_CHECK(!(a.dtype() == kBool && b.dtype() == kBool),
               "op `sub`: subtraction, the `-` operator, with two bool tensors is not supported. "
               "Use the `^` or `logical_xor()` operator instead (shapes ",
               a.shape_str(), " and ", b.shape_str(), ")");
  if (!is_one(alpha)) return add(a, b, negate(alpha));
  return with_grad2(arith<Op::sub>(a, b, "sub"), "SubBackward", a, b, {},
                    [](const Tensor& g, const Saved&, bool, bool nb) {
                      return GradPair{g, nb ? neg(g) : Tensor()};
                    });
}

// da = g b, db = g a
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = arith<Op::mul>(a, b, "mul");
  return with_grad2(out, "MulBackward", a, b, {b.requires_grad() ? a : Tensor(), b},
                    [](const Tensor& g, const Saved& s, bool na, bool nb) {
                      return GradPair{na ? mul(g, s[1]) : Tensor(), nb ? mul(g, s[0]) : Tensor()};
                    });
}

Tensor div(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "div");
  DType dt = result_type(a, b);
  if (!is_floating(dt)) dt = kFloat32;  // true division
  Tensor out = run_binary<Op::div>(a, b, dt, dt, "div");
  // da = g / b, db = -g a / b^2
  return with_grad2(out, "DivBackward", a, b, {b.requires_grad() ? a : Tensor(), b},
                    [](const Tensor& g, const Saved& s, bool na, bool nb) {
                      return GradPair{na ? div(g, s[1]) : Tensor(),
                                      nb ? neg(div(mul(g, s[0]), mul(s[1], s[1]))) : Tensor()};
                    });
}

Tensor pow(const Tensor& a, const Tensor& b) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::pow>(a, b)) return pow(ac[0], ac[1]);
  check_pair(a, b, "pow");
  const DType dt = result_type(a, b);
  MINIDL_CHECK(dt != kBool, "op `pow`: not supported for bool tensors (shapes ", a.shape_str(),
               " and ", b.shape_str(), ")");
  Tensor out = run_binary<Op::pow>(a, b, dt, dt, "pow");
  // da = g b a^(b-1) (0 where b == 0), db = g a^b log(a) (0 where a == 0 and b >= 0), like
  // PyTorch's masks for the 0 * inf cases.
  return with_grad2(out, "PowBackward", a, b, {a, b, b.requires_grad() ? out : Tensor()},
                    [](const Tensor& g, const Saved& s, bool na, bool nb) {
                      const Tensor &x = s[0], &e = s[1];
                      Tensor ga, gb;
                      if (na) ga = where(ne(e, 0), mul(g, mul(e, pow(x, sub(e, 1)))), 0);
                      if (nb)
                        gb = where(logical_or(ne(x, 0), lt(e, 0)), mul(g, mul(s[2], log(x))), 0);
                      return GradPair{ga, gb};
                    });
}

Tensor pow(const Tensor& a, Scalar exponent) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::pow>(a)) return pow(ac[0], exponent);
  MINIDL_CHECK(a.defined(), "op `pow`: undefined input tensor");
  const DType dt = result_type(a, exponent);
  MINIDL_CHECK(dt != kBool, "op `pow`: not supported for bool tensors (shape ", a.shape_str(), ")");
  MINIDL_CHECK(!(is_integral(dt) && exponent.to_double() < 0),
               "op `pow`: integers to negative integer powers are not allowed (exponent ", exponent,
               ", dtype ", dt, ")");
  return pow(a, wrap_scalar(exponent, dt, a.device()));
}

namespace {
// PyTorch 1.13's rule: a gets g where(a == b, g / 2, g) masked to 0 where a loses, b likewise;
// a NaN operand compares false both ways, so both operands get the whole g.
GradPair select_grads(const Tensor& g, const Tensor& a_loses, const Tensor& b_loses,
                      const Tensor& tie, bool na, bool nb) {
  Tensor shared = where(tie, mul(g, 0.5), g);
  Tensor ga, gb;
  if (na) ga = where(logical_not(a_loses), shared, 0);
  if (nb) gb = where(logical_not(b_loses), shared, 0);
  return {ga, gb};
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  return with_grad2(arith<Op::maximum>(a, b, "maximum"), "MaximumBackward", a, b, {a, b},
                    [](const Tensor& g, const Saved& s, bool na, bool nb) {
                      return select_grads(g, lt(s[0], s[1]), gt(s[0], s[1]), eq(s[0], s[1]), na,
                                          nb);
                    });
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return with_grad2(arith<Op::minimum>(a, b, "minimum"), "MinimumBackward", a, b, {a, b},
                    [](const Tensor& g, const Saved& s, bool na, bool nb) {
                      return select_grads(g, gt(s[0], s[1]), lt(s[0], s[1]), eq(s[0], s[1]), na,
                                          nb);
                    });
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
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::where>(cond, a, b))
    return where(ac[0], ac[1], ac[2]);
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
  {
    NoGradGuard guard;
    Tensor c = cond.expand(shape), x = a.to(dt).expand(shape), y = b.to(dt).expand(shape);
    if (out.numel() > 0) kernel<Op::where>(a.device())(c, x, y, out);
  }
  // da = g where cond, db = g elsewhere; cond gets none
  return with_grad2(out, "WhereBackward", a, b, {cond},
                    [](const Tensor& g, const Saved& s, bool na, bool nb) {
                      return GradPair{na ? where(s[0], g, 0) : Tensor(),
                                      nb ? where(logical_not(s[0]), g, 0) : Tensor()};
                    });
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
  autograd::check_inplace("add_", self, b);
  if (!is_one(alpha)) {
    check_inplace_result(self, b, result_type(self, b), "add_");
    return self.copy_(add(self, b, alpha));
  }
  return inplace<Op::add>(self, b, "add_", [&] { return add(self, b); });
}

Tensor& sub_(Tensor& self, const Tensor& b, Scalar alpha) {
  autograd::check_inplace("sub_", self, b);
  if (!is_one(alpha) || (self.dtype() == kBool && b.dtype() == kBool)) {
    check_inplace_result(self, b, result_type(self, b), "sub_");
    return self.copy_(sub(self, b, alpha));
  }
  return inplace<Op::sub>(self, b, "sub_", [&] { return sub(self, b); });
}

Tensor& mul_(Tensor& self, const Tensor& b) {
  autograd::check_inplace("mul_", self, b);
  return inplace<Op::mul>(self, b, "mul_", [&] { return mul(self, b); });
}

Tensor& div_(Tensor& self, const Tensor& b) {
  check_pair(self, b, "div_");
  autograd::check_inplace("div_", self, b);
  DType dt = result_type(self, b);
  if (!is_floating(dt)) dt = kFloat32;
  check_inplace_result(self, b, dt, "div_");
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
