// SGD and Adam/AdamW update formulas on one tensor, with raw ops (no history; see the header).
#include "tensor/update_rules.h"

#include <cmath>

#include "tensor/half.h"
#include "tensor/ops.h"
#include "tensor/parallel_for.h"

// Built with -ffp-contract=off: the one-pass loops round each product and sum to f32 as the
// separate ops of the general path do (no a*b+c contraction); and -fno-math-errno, so that the
// square root vectorises (CMakeLists.txt; a '#pragma GCC optimize' would keep std::sqrt from
// being inlined, and the Adam loop from vectorising).

namespace minidl::update_rules {
namespace {

bool dense_f32_cpu(const Tensor& t, int64_t n) {
  return t.defined() && t.device().is_cpu() && t.dtype() == kFloat32 && t.is_contiguous() &&
         t.numel() == n;
}

// Pointers to element 0 of each array; vmax null: no amsgrad; copy null: no copy, else bf16
// (copy_bf16) or f16 bits of the new parameter, rounded to nearest even like Tensor::to.
// The scalars are the f32 values the op-by-op path rounds its operands to.
struct AdamF32Pass {
  float* p = nullptr;
  const float* g = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  float* vmax = nullptr;
  uint16_t* copy = nullptr;
  bool copy_bf16 = true;
  bool decay = false;  // AdamW: p *= p_scale first
  bool l2 = false;     // Adam with weight decay: g += p * wd
  float p_scale = 1, wd = 0, b1 = 0, one_minus_b1 = 0, b2 = 0, one_minus_b2 = 0, bc2_sqrt = 1,
        eps = 0, step = 0;  // step: -lr / (1 - beta1^t)
};

enum class CopyKind { none, bf16, f16 };
enum class Decay { none, decoupled, l2 };  // template arguments: no branch in the loops

template <Decay D, bool Amsgrad, CopyKind Copy>
void adam_loop(const AdamF32Pass& a, int64_t begin, int64_t end) {
  // Locals, so that the stores through the arrays cannot alias them and the loop vectorises.
  float* const pp = a.p;
  const float* const gp = a.g;
  float* const mp = a.m;
  float* const vp = a.v;
  float* const maxp = a.vmax;
  uint16_t* const cp = a.copy;
  const float p_scale = a.p_scale, wd = a.wd, b1 = a.b1, omb1 = a.one_minus_b1, b2 = a.b2,
              omb2 = a.one_minus_b2, bc2_sqrt = a.bc2_sqrt, eps = a.eps, step = a.step;
  for (int64_t i = begin; i < end; ++i) {
    float pi = pp[i], g = gp[i];
    if constexpr (D == Decay::decoupled) pi = pi * p_scale;
    if constexpr (D == Decay::l2) {
      const float wp = pi * wd;
      g = g + wp;
    }
    const float mg = g * omb1;
    const float mb = mp[i] * b1;
    const float mi = mb + mg;
    const float gg = g * g;
    const float vg = gg * omb2;
    const float vb = vp[i] * b2;
    const float vi = vb + vg;
    float vmax = vi;
    if constexpr (Amsgrad) {
      // maximum(maxp[i], vi) as the op-by-op path (and torch.maximum): NaN on either side wins
      vmax = (maxp[i] != maxp[i] || maxp[i] > vi) ? maxp[i] : vi;
      maxp[i] = vmax;
    }
    const float root = std::sqrt(vmax) / bc2_sqrt;
    const float denom = root + eps;
    const float quotient = mi / denom;
    const float upd = quotient * step;
    const float pn = pi + upd;
    mp[i] = mi, vp[i] = vi, pp[i] = pn;
    if constexpr (Copy == CopyKind::bf16) cp[i] = BFloat16::from_float(pn);
    if constexpr (Copy == CopyKind::f16) cp[i] = Half::from_float(pn);
  }
}

using AdamLoop = void (*)(const AdamF32Pass&, int64_t, int64_t);

// The instantiation of adam_loop for a's weight decay, amsgrad and copy.
template <Decay D, bool Amsgrad>
AdamLoop adam_loop_copy(const AdamF32Pass& a) {
  if (!a.copy) return adam_loop<D, Amsgrad, CopyKind::none>;
  return a.copy_bf16 ? adam_loop<D, Amsgrad, CopyKind::bf16> : adam_loop<D, Amsgrad, CopyKind::f16>;
}
template <Decay D>
AdamLoop adam_loop_amsgrad(const AdamF32Pass& a) {
  return a.vmax ? adam_loop_copy<D, true>(a) : adam_loop_copy<D, false>(a);
}
AdamLoop adam_loop_for(const AdamF32Pass& a) {
  if (a.decay) return adam_loop_amsgrad<Decay::decoupled>(a);
  return a.l2 ? adam_loop_amsgrad<Decay::l2>(a) : adam_loop_amsgrad<Decay::none>(a);
}

// adam() below in one pass over memory for contiguous f32 CPU tensors (a 124M-parameter step reads
// and writes each state tensor once instead of ~10 times through temporaries), writing `copy`
// (contiguous bf16/f16, or undefined) in the same pass. Each element goes through the same f32
// operations, in the same order, as the op sequence of the general path: scalars are rounded to
// f32 as the ops wrap them, and every product and sum is rounded to f32 (adam_loop above).
bool adam_dense_f32(const Tensor& p, const Tensor& grad, const Tensor& m, const Tensor& v,
                    const Tensor& max_v, double t, const AdamHyper& h, const Tensor& copy) {
  const int64_t n = p.numel();
  if (!dense_f32_cpu(p, n) || !dense_f32_cpu(grad, n) || !dense_f32_cpu(m, n) ||
      !dense_f32_cpu(v, n) || (max_v.defined() && !dense_f32_cpu(max_v, n)))
    return false;
  if (copy.defined() &&
      !(copy.device().is_cpu() && (copy.dtype() == kBFloat16 || copy.dtype() == kFloat16) &&
        copy.is_contiguous() && copy.numel() == n))
    return false;
  AdamF32Pass a;
  a.p = p.data_ptr<float>();
  a.g = grad.data_ptr<float>();
  a.m = m.data_ptr<float>();
  a.v = v.data_ptr<float>();
  a.vmax = max_v.defined() ? max_v.data_ptr<float>() : nullptr;
  a.copy = copy.defined() ? static_cast<uint16_t*>(copy.data_ptr()) : nullptr;
  a.copy_bf16 = copy.defined() && copy.dtype() == kBFloat16;
  a.decay = h.decoupled;
  a.l2 = !h.decoupled && h.weight_decay != 0;
  a.p_scale = float(1 - h.lr * h.weight_decay), a.wd = float(h.weight_decay);
  a.b1 = float(h.beta1), a.one_minus_b1 = float(1 - h.beta1);
  a.b2 = float(h.beta2), a.one_minus_b2 = float(1 - h.beta2);
  a.bc2_sqrt = float(std::sqrt(1 - std::pow(h.beta2, t)));
  a.eps = float(h.eps), a.step = float(-h.lr / (1 - std::pow(h.beta1, t)));
  const AdamLoop loop = adam_loop_for(a);
  cpu::parallel_for(n, cpu::kParallelGrain,
                    [&](int64_t begin, int64_t end) { loop(a, begin, end); });
  return true;
}

// sgd() below in one pass for contiguous f32 CPU tensors, with the general path's f32 roundings.
bool sgd_dense_f32(const Tensor& p, const Tensor& grad, const Tensor& buf, bool first,
                   const SgdHyper& h) {
  const int64_t n = p.numel();
  if (!dense_f32_cpu(p, n) || !dense_f32_cpu(grad, n) || (buf.defined() && !dense_f32_cpu(buf, n)))
    return false;
  float* pp = p.data_ptr<float>();
  const float* gp = grad.data_ptr<float>();
  float* bp = buf.defined() ? buf.data_ptr<float>() : nullptr;
  const bool l2 = h.weight_decay != 0;
  const float wd = float(h.weight_decay), momentum = float(h.momentum);
  const float keep = float(1 - h.dampening), step = float(-h.lr);
  cpu::parallel_for(n, cpu::kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float pi = pp[i];
      float d = gp[i];
      if (l2) {
        const float wp = pi * wd;
        d = d + wp;
      }
      if (bp) {
        float b;
        if (first) {
          b = d;
        } else {
          const float bm = bp[i] * momentum;
          const float dk = d * keep;
          b = bm + dk;
        }
        bp[i] = b;
        if (h.nesterov) {
          const float bn = b * momentum;
          d = d + bn;
        } else {
          d = b;
        }
      }
      const float upd = d * step;
      pp[i] = pi + upd;
    }
  });
  return true;
}

}  // namespace

void sgd(const Tensor& p_in, const Tensor& grad, const Tensor& buf_in, bool first,
         const SgdHyper& h) {
  if (sgd_dense_f32(p_in, grad, buf_in, first, h)) return;
  Tensor p = p_in;
  Tensor d = h.weight_decay != 0 ? native::add(grad, p, h.weight_decay) : grad;
  if (buf_in.defined()) {
    Tensor buf = buf_in;
    if (first) {
      native::copy_(buf, d);
    } else {
      native::mul_(buf, h.momentum);
      native::add_(buf, d, 1 - h.dampening);
    }
    d = h.nesterov ? native::add(d, buf, h.momentum) : buf;
  }
  native::add_(p, d, -h.lr);
}

void adam(const Tensor& p_in, const Tensor& grad0, const Tensor& exp_avg, const Tensor& exp_avg_sq,
          const Tensor& max_exp_avg_sq, double t, const AdamHyper& h, const Tensor& copy) {
  if (adam_dense_f32(p_in, grad0, exp_avg, exp_avg_sq, max_exp_avg_sq, t, h, copy)) return;
  Tensor p = p_in, m = exp_avg, v = exp_avg_sq;
  Tensor grad = grad0;
  if (h.decoupled)
    native::mul_(p, 1 - h.lr * h.weight_decay);
  else if (h.weight_decay != 0)
    grad = native::add(grad0, p, h.weight_decay);
  native::mul_(m, h.beta1);
  native::add_(m, grad, 1 - h.beta1);
  native::mul_(v, h.beta2);
  native::add_(v, native::mul(grad, grad), 1 - h.beta2);
  const double bc1 = 1 - std::pow(h.beta1, t), bc2_sqrt = std::sqrt(1 - std::pow(h.beta2, t));
  Tensor denom;
  if (max_exp_avg_sq.defined()) {
    native::copy_(max_exp_avg_sq, native::maximum(max_exp_avg_sq, v));
    denom = native::div(native::sqrt(max_exp_avg_sq), bc2_sqrt);
  } else {
    denom = native::div(native::sqrt(v), bc2_sqrt);
  }
  native::add_(denom, h.eps);
  native::add_(p, native::div(m, denom), -h.lr / bc1);
  if (copy.defined()) {
    Tensor c = copy;
    native::copy_(c, p);
  }
}

}  // namespace minidl::update_rules
