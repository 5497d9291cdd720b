// The differentiable binary ops: the autocast hook where AMP applies, the raw op
// (tensor/ops/binary.cpp), then one two-input node whose gradients are un-broadcast with
// sum_to_shape. Scalar overloads are the tensor ops with the scalar as a 0-d tensor.
#include <utility>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"

namespace minidl {
namespace {

using Saved = std::vector<Tensor>;
using GradPair = std::pair<Tensor, Tensor>;

// The scalar operand of `op` as a 0-d tensor of the promoted dtype (as the raw layer wraps it).
Tensor wrap_for(const Tensor& a, Scalar s, std::string_view op) {
  MINIDL_CHECK(a.defined(), "op `", op, "`: undefined input tensor");
  return scalar_tensor(s, result_type(a, s), a.device());
}

Scalar negate(Scalar s) {
  if (s.is_floating()) return Scalar(-s.to_double());
  return Scalar(-s.to_int());
}

bool is_one(Scalar s) {
  return s.to_double() == 1.0;
}

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

// out = a + alpha*b: da = g, db = alpha g
Tensor add_node(Tensor out, const Tensor& a, const Tensor& b, double al) {
  return with_grad2(out, "AddBackward", a, b, {},
                    [al](const Tensor& g, const Saved&, bool, bool nb) {
                      return GradPair{g, nb && al != 1 ? mul(g, al) : g};
                    });
}

// da = g b a^(b-1) (0 where b == 0), db = g a^b log(a) (0 where a == 0 and b >= 0), like
// PyTorch's masks for the 0 * inf cases. saved: a, b, out (out only when b needs a gradient).
GradPair pow_grads(const Tensor& g, const Saved& s, bool na, bool nb) {
  const Tensor &x = s[0], &e = s[1];
  Tensor ga, gb;
  if (na) ga = where(ne(e, 0), mul(g, mul(e, pow(x, sub(e, 1)))), 0);
  if (nb) gb = where(logical_or(ne(x, 0), lt(e, 0)), mul(g, mul(s[2], log(x))), 0);
  return {ga, gb};
}

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

// ---- tensor-tensor
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  Tensor out = native::add(a, b, alpha);
  return add_node(out, a, b, alpha.to_double());
}

// alpha != 1 is add(a, b, -alpha): its AddBackward node.
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  Tensor out = native::sub(a, b, alpha);
  if (!is_one(alpha)) return add_node(out, a, b, negate(alpha).to_double());
  return with_grad2(out, "SubBackward", a, b, {}, [](const Tensor& g, const Saved&, bool, bool nb) {
    return GradPair{g, nb ? neg(g) : Tensor()};
  });
}

// da = g b, db = g a
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = native::mul(a, b);
  return with_grad2(out, "MulBackward", a, b, {b.requires_grad() ? a : Tensor(), b},
                    [](const Tensor& g, const Saved& s, bool na, bool nb) {
                      return GradPair{na ? mul(g, s[1]) : Tensor(), nb ? mul(g, s[0]) : Tensor()};
                    });
}

// da = g / b, db = -g a / b^2
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = native::div(a, b);
  return with_grad2(out, "DivBackward", a, b, {b.requires_grad() ? a : Tensor(), b},
                    [](const Tensor& g, const Saved& s, bool na, bool nb) {
                      return GradPair{na ? div(g, s[1]) : Tensor(),
                                      nb ? neg(div(mul(g, s[0]), mul(s[1], s[1]))) : Tensor()};
                    });
}

Tensor pow(const Tensor& a, const Tensor& b) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::pow>(a, b)) return pow(ac[0], ac[1]);
  Tensor out = native::pow(a, b);
  return with_grad2(out, "PowBackward", a, b, {a, b, b.requires_grad() ? out : Tensor()},
                    pow_grads);
}

// The node of pow(a, e), e the exponent as a 0-d tensor of the result dtype (the raw op has
// validated the exponent and computed pow(a, e)).
Tensor pow(const Tensor& a, Scalar exponent) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::pow>(a)) return pow(ac[0], exponent);
  Tensor out = native::pow(a, exponent);
  if (!GradMode::is_enabled() || !a.requires_grad()) return out;
  const Tensor e = wrap_for(a, exponent, "pow");
  return with_grad2(out, "PowBackward", a, e, {a, e, Tensor()}, pow_grads);
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  return with_grad2(native::maximum(a, b), "MaximumBackward", a, b, {a, b},
                    [](const Tensor& g, const Saved& s, bool na, bool nb) {
                      return select_grads(g, lt(s[0], s[1]), gt(s[0], s[1]), eq(s[0], s[1]), na,
                                          nb);
                    });
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return with_grad2(native::minimum(a, b), "MinimumBackward", a, b, {a, b},
                    [](const Tensor& g, const Saved& s, bool na, bool nb) {
                      return select_grads(g, gt(s[0], s[1]), lt(s[0], s[1]), eq(s[0], s[1]), na,
                                          nb);
                    });
}

// da = g where cond, db = g elsewhere; cond gets none
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::where>(cond, a, b))
    return where(ac[0], ac[1], ac[2]);
  Tensor out = native::where(cond, a, b);
  return with_grad2(out, "WhereBackward", a, b, {cond},
                    [](const Tensor& g, const Saved& s, bool na, bool nb) {
                      return GradPair{na ? where(s[0], g, 0) : Tensor(),
                                      nb ? where(logical_not(s[0]), g, 0) : Tensor()};
                    });
}

// ---- Scalar overloads (composite: the tensor op with the wrapped scalar)
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
Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  return where(cond, a, wrap_for(a, b, "where"));
}
Tensor operator-(Scalar a, const Tensor& b) {
  return sub(wrap_for(b, a, "sub"), b);
}
Tensor operator/(Scalar a, const Tensor& b) {
  return div(wrap_for(b, a, "div"), b);
}

// ---- rounded division: torch's rounded quotient is piecewise constant, its gradient zero
Tensor div(const Tensor& a, const Tensor& b, std::optional<std::string_view> rounding_mode) {
  if (!rounding_mode) return div(a, b);
  Tensor out = native::div(a, b, rounding_mode);
  autograd::record("DivBackward", {a, b}, {&out}, {},
                   [ta = a.requires_grad(), tb = b.requires_grad(), sa = a.shape(), sb = b.shape(),
                    da = a.dtype(), db = b.dtype(), dev = a.device()](const auto&, const auto&) {
                     return std::vector<Tensor>{ta ? zeros(sa, da, dev) : Tensor(),
                                                tb ? zeros(sb, db, dev) : Tensor()};
                   });
  return out;
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

// ---- in place: refused for tensors taking part in autograd, then the raw op
Tensor& add_(Tensor& self, const Tensor& b, Scalar alpha) {
  autograd::check_inplace("add_", self, b);
  return native::add_(self, b, alpha);
}
Tensor& sub_(Tensor& self, const Tensor& b, Scalar alpha) {
  autograd::check_inplace("sub_", self, b);
  return native::sub_(self, b, alpha);
}
Tensor& mul_(Tensor& self, const Tensor& b) {
  autograd::check_inplace("mul_", self, b);
  return native::mul_(self, b);
}
Tensor& div_(Tensor& self, const Tensor& b) {
  // Undefined operands and a device mismatch are reported before the autograd check, as before
  // (the raw op throws for them).
  if (!self.defined() || !b.defined() || self.device() != b.device()) return native::div_(self, b);
  autograd::check_inplace("div_", self, b);
  return native::div_(self, b);
}
Tensor& add_(Tensor& self, Scalar b) {
  return add_(self, wrap_for(self, b, "add_"));
}
Tensor& mul_(Tensor& self, Scalar b) {
  return mul_(self, wrap_for(self, b, "mul_"));
}

}  // namespace minidl
