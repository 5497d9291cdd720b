// SGD and Adam/AdamW update formulas on one tensor, with raw ops (no history; see the header).
#include "tensor/update_rules.h"

#include <cmath>

#include "tensor/ops.h"
#include "tensor/parallel_for.h"

// The one-pass Adam rounds each product and sum to f32 as the separate ops of the general path
// do: no a*b+c contraction.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace minidl::update_rules {
namespace {

bool dense_f32_cpu(const Tensor& t, int64_t n) {
  return t.defined() && t.device().is_cpu() && t.dtype() == kFloat32 && t.is_contiguous() &&
         t.numel() == n;
}

// adam() below in one pass over memory for contiguous f32 CPU tensors (a 124M-parameter step reads
// and writes each state tensor once instead of ~10 times through temporaries). Each element goes
// through the same f32 operations, in the same order, as the op sequence of the general path:
// scalars are rounded to f32 as the ops wrap them, and every product and sum is rounded to f32.
bool adam_dense_f32(const Tensor& p, const Tensor& grad, const Tensor& m, const Tensor& v,
                    const Tensor& max_v, double t, const AdamHyper& h) {
  const int64_t n = p.numel();
  if (!dense_f32_cpu(p, n) || !dense_f32_cpu(grad, n) || !dense_f32_cpu(m, n) ||
      !dense_f32_cpu(v, n) || (max_v.defined() && !dense_f32_cpu(max_v, n)))
    return false;
  float* pp = p.data_ptr<float>();
  const float* gp = grad.data_ptr<float>();
  float* mp = m.data_ptr<float>();
  float* vp = v.data_ptr<float>();
  float* maxp = max_v.defined() ? max_v.data_ptr<float>() : nullptr;
  const bool decay = h.decoupled, l2 = !h.decoupled && h.weight_decay != 0;
  const float p_scale = float(1 - h.lr * h.weight_decay), wd = float(h.weight_decay);
  const float b1 = float(h.beta1), one_minus_b1 = float(1 - h.beta1);
  const float b2 = float(h.beta2), one_minus_b2 = float(1 - h.beta2);
  const float bc2_sqrt = float(std::sqrt(1 - std::pow(h.beta2, t)));
  const float eps = float(h.eps), step = float(-h.lr / (1 - std::pow(h.beta1, t)));
  cpu::parallel_for(n, cpu::kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float pi = pp[i], g = gp[i];
      if (decay) pi = pi * p_scale;
      if (l2) {
        const float wp = pi * wd;
        g = g + wp;
      }
      const float mg = g * one_minus_b1;
      const float mb = mp[i] * b1;
      const float mi = mb + mg;
      const float gg = g * g;
      const float vg = gg * one_minus_b2;
      const float vb = vp[i] * b2;
      const float vi = vb + vg;
      float vmax = vi;
      if (maxp) {
        vmax = std::max(maxp[i], vi);
        maxp[i] = vmax;
      }
      const float root = std::sqrt(vmax) / bc2_sqrt;
      const float denom = root + eps;
      const float quotient = mi / denom;
      const float upd = quotient * step;
      mp[i] = mi, vp[i] = vi, pp[i] = pi + upd;
    }
  });
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
          const Tensor& max_exp_avg_sq, double t, const AdamHyper& h) {
  if (adam_dense_f32(p_in, grad0, exp_avg, exp_avg_sq, max_exp_avg_sq, t, h)) return;
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
}

}  // namespace minidl::update_rules
