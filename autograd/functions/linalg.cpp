// The differentiable matmul, mm, bmm, linear, linear_gelu and linear_gelu_linear: the autocast
// hook, the raw op (tensor/ops/linalg.cpp), then one node each: grad_a = g @ b^T,
// grad_b = a^T @ g (un-broadcast).
#include <optional>
#include <tuple>
#include <utility>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "tensor/linear_weight_grad.h"
#include "tensor/variants.h"

namespace minidl {
namespace {

// Gradients of matmul(a, b) (torch.matmul semantics) for output gradient g; only the
// requested ones are computed (others undefined).
std::pair<Tensor, Tensor> matmul_grads(const Tensor& g, const Tensor& a, const Tensor& b,
                                       bool need_a, bool need_b) {
  Tensor ga, gb;
  if (a.dim() == 1 && b.dim() == 1) {  // dot: g is 0-d
    if (need_a) ga = mul(g, b);
    if (need_b) gb = mul(g, a);
    return {ga, gb};
  }
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;  // [.., M, K]
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;  // [.., K, N]
  Tensor g2 = g;                                        // [.., M, N]
  if (a.dim() == 1) g2 = g2.unsqueeze(-2);
  if (b.dim() == 1) g2 = g2.unsqueeze(-1);
  if (need_a) ga = sum_to_shape(matmul(g2, b2.transpose(-1, -2)), a2.shape()).reshape(a.shape());
  if (need_b) gb = sum_to_shape(matmul(a2.transpose(-1, -2), g2), b2.shape()).reshape(b.shape());
  return {ga, gb};
}

void record_matmul(const char* name, const Tensor& a, const Tensor& b, Tensor& out) {
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  autograd::record(name, {a, b}, {&out}, {a, b},
                   [need_a, need_b](const std::vector<Tensor>& g, const std::vector<Tensor>& s) {
                     auto [ga, gb] = matmul_grads(g[0], s[0], s[1], need_a, need_b);
                     return std::vector<Tensor>{ga, gb};
                   });
}

// linear under autocast with an f32 weight (and bias): the GEMM runs on the 16-bit casts, and
// one node takes the gradients straight to the f32 weight and bias, dW and db from the GEMM's
// f32 accumulator (linear_weight_grad_into). The casts' own nodes, which would round dW to 16
// bits and cast it back (one more dispatch per parameter), are left out of the graph.
// xc, wc: the autocast casts of x and w.
bool autocast_linear_applies(const Tensor& xc, const Tensor& w, const Tensor& b, const Tensor& wc) {
  const bool widen_w = w.dtype() == kFloat32 && wc.dtype() != kFloat32 && w.requires_grad();
  return widen_w && w.dim() == 2 && xc.dim() >= 2 && variants::fused("autocast_linear") &&
         variants::fused("linear_wgrad") && (!b.defined() || b.dtype() == kFloat32);
}

// The node of that case on out = xc wd^T + bd (wd: the detached 16-bit copy of w).
void record_autocast_linear(const Tensor& xc, const Tensor& w, const Tensor& b, const Tensor& wd,
                            Tensor& out) {
  const bool need_x = xc.requires_grad();
  const bool need_b = b.defined() && b.requires_grad();
  autograd::record("LinearBackward", {xc, w, b}, {&out}, {xc, wd},
                   [need_x, need_b](const std::vector<Tensor>& g, const std::vector<Tensor>& s) {
                     const Tensor& x = s[0];  // x:[*, K] 16-bit
                     const Tensor& w = s[1];  // w:[N, K] 16-bit copy of the f32 weight
                     Tensor gx = need_x ? matmul(g[0], w) : Tensor();
                     Tensor gw = empty(w.shape(), kFloat32, w.device());
                     Tensor gb = need_b ? empty({w.size(0)}, kFloat32, w.device()) : Tensor();
                     native::linear_weight_grad_into(g[0], x, gw, gb);
                     return std::vector<Tensor>{gx, gw, gb};
                   });
}

// The node of out = x @ w^T + b (x, w, b of one dtype): grads for x, w and b.
void record_linear(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out) {
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const bool need_b = b.defined() && b.requires_grad();
  const Shape b_shape = b.defined() ? b.shape() : Shape{};
  autograd::record("LinearBackward", {x, w, b}, {&out}, {x, w},
                   [need_x, need_w, need_b, b_shape](const std::vector<Tensor>& g,
                                                     const std::vector<Tensor>& s) {
                     const Tensor& w = s[1];
                     const Tensor& x = s[0];
                     if (w.dim() == 2 && x.dim() >= 2) {
                       // Fold the batch dims into one GEMM per gradient, gw = g^T x [N,K]
                       // directly, with gb beside it (one dispatch, a GEMM epilogue on CUDA):
                       // two dispatches in all, no per-batch partial products summed again
                       // (rounded to 16 bits for f16/bf16), no transposing copy.
                       const int64_t N = w.size(0);
                       const bool bias_1d = need_b && b_shape == Shape{N};
                       Tensor gx = need_x ? matmul(g[0], w) : Tensor();
                       Tensor gw, gb;
                       if (need_w && x.dtype() == g[0].dtype() && variants::fused("linear_wgrad"))
                         std::tie(gw, gb) = native::linear_weight_grad(g[0], x, bias_1d);
                       else if (need_w)
                         gw = mm(g[0].reshape({-1, N}).t(), x.reshape({-1, w.size(1)}));
                       if (need_b && !gb.defined()) gb = sum_to_shape(g[0], b_shape).contiguous();
                       return std::vector<Tensor>{gx, gw, gb};
                     }
                     const Tensor wt = w.dim() == 2 ? w.t() : w;
                     // x:[M,K], w:[N,K]: gw = g^T x [N,K] as one GEMM on a transposed view,
                     // not (x^T g)^T, whose transposing copy cost as much as the GEMM.
                     const bool gw_direct = need_w && w.dim() == 2 && x.dim() == 2;
                     auto [gx, gwt] = matmul_grads(g[0], s[0], wt, need_x, need_w && !gw_direct);
                     Tensor gw = gw_direct                       ? mm(g[0].t(), x)
                                 : gwt.defined() && w.dim() == 2 ? gwt.t().contiguous()
                                                                 : gwt;
                     Tensor gb = need_b ? sum_to_shape(g[0], b_shape).contiguous() : Tensor();
                     return std::vector<Tensor>{gx, gw, gb};
                   });
}

// gelu(pre, "tanh")'s node on out (the GELU frontend's, autograd/functions/unary.cpp).
void record_gelu_tanh(const Tensor& pre, Tensor& out) {
  autograd::record("GeluBackward", {pre}, {&out}, {pre},
                   [](const std::vector<Tensor>& g, const std::vector<Tensor>& s) {
                     return std::vector<Tensor>{gelu_backward(g[0], s[0], "tanh")};
                   });
}

// The node of out = gelu_tanh(pre) w^T + b where h = gelu_tanh(pre) is linear_gelu's output
// (an MLP's c_proj): the gradient goes to pre with the GELU's derivative applied in the
// input-gradient GEMM (matmul_gelu_backward; cuBLASLt's DGELU epilogue), and to w and b: from
// the GEMM's f32 accumulator when f32_grads (autocast with an f32 weight; wd its 16-bit copy,
// else wd is w). h has no node of its own in this graph.
void record_gelu_linear(const Tensor& pre, const Tensor& h, const Tensor& w, const Tensor& b,
                        const Tensor& wd, bool f32_grads, Tensor& out) {
  const bool need_pre = pre.requires_grad(), need_w = w.requires_grad();
  const bool need_b = b.defined() && b.requires_grad();
  autograd::record("GeluLinearBackward", {pre, w, b}, {&out}, {pre, h, wd},
                   [need_pre, need_w, need_b, f32_grads](const std::vector<Tensor>& g,
                                                         const std::vector<Tensor>& s) {
                     const Tensor& pre = s[0];  // pre:[*, K]
                     const Tensor& h = s[1];    // h:[*, K] = gelu_tanh(pre)
                     const Tensor& w = s[2];    // w:[N, K]
                     const int64_t N = w.size(0);
                     Tensor gpre = need_pre ? native::matmul_gelu_backward(g[0], w, pre) : Tensor();
                     Tensor gw, gb;
                     if (f32_grads) {
                       gw = empty(w.shape(), kFloat32, w.device());
                       if (need_b) gb = empty({N}, kFloat32, w.device());
                       native::linear_weight_grad_into(g[0], h, gw, gb);
                     } else if (need_w && variants::fused("linear_wgrad")) {
                       std::tie(gw, gb) = native::linear_weight_grad(g[0], h, need_b);
                     } else {
                       if (need_w) gw = mm(g[0].reshape({-1, N}).t(), h.reshape({-1, w.size(1)}));
                       if (need_b) gb = sum_to_shape(g[0], {N}).contiguous();
                     }
                     return std::vector<Tensor>{gpre, gw, gb};
                   });
}

bool one_dtype(const Tensor& x, const Tensor& w, const Tensor& b) {
  return w.dtype() == x.dtype() && (!b.defined() || b.dtype() == x.dtype());
}

// linear_gelu's dispatch and its Linear node on pre: {h, pre}, h without a GELU node yet (the
// caller records one, or routes pre's gradient itself); nullopt where the fused op does not
// apply (decided before autocast's casts: the unfused calls then cast for themselves).
std::optional<std::pair<Tensor, Tensor>> linear_gelu_parts(const Tensor& x, const Tensor& w,
                                                           const Tensor& b) {
  if (!(b.defined() && x.dim() >= 2 && w.dim() == 2 && b.dim() == 1 && x.is_floating_point() &&
        w.device() == x.device() && b.device() == x.device() && variants::fused("linear_gelu")))
    return std::nullopt;
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::linear>(x, w, b)) {
    if (!one_dtype(ac[0], ac[1], ac[2])) return std::nullopt;
    // autocast is off while `ac` lives: the plain path on the casts
    if (!autocast_linear_applies(ac[0], w, b, ac[1])) return linear_gelu_parts(ac[0], ac[1], ac[2]);
    const Tensor wd = ac[1].detach(), bd = ac[2].detach();
    auto [out, pre] = native::linear_gelu(ac[0], wd, bd);
    record_autocast_linear(ac[0], w, b, wd, pre);
    return std::pair{out, pre};
  }
  if (!one_dtype(x, w, b)) return std::nullopt;
  auto [out, pre] = native::linear_gelu(x, w, b);
  record_linear(x, w, b, pre);
  return std::pair{out, pre};
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::mm>(a, b)) return mm(ac[0], ac[1]);
  Tensor out = native::mm(a, b);
  record_matmul("MmBackward", a, b, out);
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::bmm>(a, b)) return bmm(ac[0], ac[1]);
  Tensor out = native::bmm(a, b);
  record_matmul("BmmBackward", a, b, out);
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::matmul>(a, b)) return matmul(ac[0], ac[1]);
  Tensor out = native::matmul(a, b);
  record_matmul("MatmulBackward", a, b, out);
  return out;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::linear>(x, w, b)) {
    if (autocast_linear_applies(ac[0], w, b, ac[1])) {
      const Tensor wd = ac[1].detach(), bd = ac[2].defined() ? ac[2].detach() : Tensor();
      Tensor out = native::linear(ac[0], wd, bd);
      record_autocast_linear(ac[0], w, b, wd, out);
      return out;
    }
    return linear(ac[0], ac[1], ac[2]);
  }
  Tensor out = native::linear(x, w, b);
  record_linear(x, w, b, out);  // out = x @ w^T + b: one node for x, w and b
  return out;
}

// The same graph as gelu(linear(x, w, b), "tanh"), from one linear_gelu dispatch: the Linear
// node on pre, the GELU node on out.
Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (auto parts = linear_gelu_parts(x, w, b)) {
    record_gelu_tanh(parts->second, parts->first);
    return parts->first;
  }
  return gelu(linear(x, w, b), "tanh");
}

// linear(linear_gelu(x, w1, b1), w2, b2) whose backward applies the GELU's derivative inside
// c_proj's input-gradient GEMM (one GeluLinearBackward node for pre, w2, b2).
Tensor linear_gelu_linear(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                          const Tensor& b2) {
  const bool fits =
      variants::fused("mlp_dgelu") && w1.dim() == 2 && w2.dim() == 2 && w2.size(1) == w1.size(0) &&
      w2.device() == x.device() &&
      (!b2.defined() || (b2.dim() == 1 && b2.size(0) == w2.size(0) && b2.device() == x.device()));
  if (!fits) return linear(linear_gelu(x, w1, b1), w2, b2);
  auto parts = linear_gelu_parts(x, w1, b1);
  if (!parts) return linear(gelu(linear(x, w1, b1), "tanh"), w2, b2);
  const Tensor h = parts->first, pre = parts->second;
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::linear>(h, w2, b2)) {
    if (ac[0].dtype() == h.dtype() && one_dtype(ac[0], ac[1], ac[2]) &&
        autocast_linear_applies(ac[0], w2, b2, ac[1])) {
      const Tensor wd = ac[1].detach(), bd = ac[2].defined() ? ac[2].detach() : Tensor();
      Tensor out = native::linear(h, wd, bd);
      record_gelu_linear(pre, h, w2, b2, wd, true, out);
      return out;
    }
  } else if (one_dtype(h, w2, b2)) {
    Tensor out = native::linear(h, w2, b2);
    record_gelu_linear(pre, h, w2, b2, w2, false, out);
    return out;
  }
  Tensor hg = h;  // c_proj unfused after all: h takes its GELU node
  record_gelu_tanh(pre, hg);
  return linear(hg, w2, b2);
}

}  // namespace minidl
