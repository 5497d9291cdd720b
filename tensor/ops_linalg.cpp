// Linear algebra frontends: matmul (torch.matmul semantics: 1-D operands, broadcast batch
// dims), mm, bmm and linear, all lowered onto the bmm kernel a:[B,M,K] x b:[B,K,N].
// Each records one autograd node: grad_a = g @ b^T, grad_b = a^T @ g (un-broadcast).
#include <string>

#include "autograd/function.h"
#include "tensor/autocast.h"
#include "tensor/cpu/onednn.h"
#include "tensor/cuda/gemm.h"
#include "tensor/ops.h"

namespace minidl {
namespace {

std::string dims_x(const Tensor& t) {  // "2x3" like PyTorch's messages
  std::string s;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d) s += 'x';
    s += std::to_string(t.size(d));
  }
  return s;
}

void check_operands(const Tensor& a, const Tensor& b, std::string_view op) {
  MINIDL_CHECK(a.defined() && b.defined(), "op `", op, "`: got an undefined tensor");
  check_same_device(op, a, b);
  MINIDL_CHECK(a.dtype() == b.dtype(), "op `", op,
               "`: expected both operands to have the same dtype, got ", a.dtype(), " and ",
               b.dtype(), " (shapes ", a.shape_str(), " and ", b.shape_str(), ")");
  MINIDL_CHECK(a.dtype() != kBool, "op `", op, "` does not support dtype bool");
}

// a:[B,M,K] b:[B,K,N] (any strides) -> new contiguous [B,M,N]; shapes already checked.
Tensor bmm_out(const Tensor& a, const Tensor& b) {
  Tensor out = empty({a.size(0), a.size(1), b.size(2)}, a.dtype(), a.device());
  kernel<Op::bmm>(a.device())(a, b, out);
  return out;
}

// a:[M,K] b:[K,N], checked, as a batch of one (views, no copies).
Tensor mm_unchecked(const Tensor& a, const Tensor& b) {
  return bmm_out(a.unsqueeze(0), b.unsqueeze(0)).squeeze(0);
}

void check_mm_shapes(const Tensor& a, const Tensor& b, std::string_view op) {
  MINIDL_CHECK(a.size(1) == b.size(0), "op `", op, "`: mat1 and mat2 shapes cannot be multiplied (",
               dims_x(a), " and ", dims_x(b), ")");
}

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

Tensor matmul_impl(const Tensor& a, const Tensor& b);

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::mm>(a, b)) return mm(ac[0], ac[1]);
  check_operands(a, b, "mm");
  MINIDL_CHECK(a.dim() == 2 && b.dim() == 2, "op `mm`: expected 2-D matrices, got shapes ",
               a.shape_str(), " and ", b.shape_str());
  check_mm_shapes(a, b, "mm");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = mm_unchecked(a, b);
  }
  record_matmul("MmBackward", a, b, out);
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::bmm>(a, b)) return bmm(ac[0], ac[1]);
  check_operands(a, b, "bmm");
  MINIDL_CHECK(a.dim() == 3 && b.dim() == 3, "op `bmm`: expected 3-D batches [B, M, K] and ",
               "[B, K, N], got shapes ", a.shape_str(), " and ", b.shape_str());
  MINIDL_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "op `bmm`: batch shapes ",
               a.shape_str(), " and ", b.shape_str(),
               " cannot be multiplied (expected batch2 to start with [", a.size(0), ", ", a.size(2),
               "])");
  Tensor out = bmm_out(a, b);
  record_matmul("BmmBackward", a, b, out);
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::matmul>(a, b)) return matmul(ac[0], ac[1]);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = matmul_impl(a, b);
  }
  record_matmul("MatmulBackward", a, b, out);
  return out;
}

namespace {

Tensor matmul_impl(const Tensor& a, const Tensor& b) {
  check_operands(a, b, "matmul");
  const int64_t da = a.dim(), db = b.dim();
  MINIDL_CHECK(da >= 1 && db >= 1, "op `matmul`: both arguments need at least 1 dimension, got ",
               da, "-D ", a.shape_str(), " and ", db, "-D ", b.shape_str());
  if (da == 1 && db == 1) {  // dot product -> 0-d
    MINIDL_CHECK(a.size(0) == b.size(0), "op `matmul`: inconsistent tensor size, expected ",
                 a.shape_str(), " and ", b.shape_str(), " to have the same number of elements");
    return mm_unchecked(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  }
  // Contraction sizes: a's last dim against b's second-to-last (or only) dim.
  const int64_t ka = a.size(-1), kb = db == 1 ? b.size(0) : b.size(-2);
  if (ka != kb) {
    if (da <= 2 && db <= 2) {  // PyTorch's mm wording with 1-D operands as 1xK / Kx1
      Tensor a2 = da == 1 ? a.unsqueeze(0) : a, b2 = db == 1 ? b.unsqueeze(1) : b;
      check_mm_shapes(a2, b2, "matmul");
    }
    MINIDL_FAIL("op `matmul`: shapes ", a.shape_str(), " and ", b.shape_str(),
                " cannot be multiplied (contraction sizes ", ka, " and ", kb, " differ)");
  }
  if (da <= 2 && db <= 2) {
    Tensor a2 = da == 1 ? a.unsqueeze(0) : a, b2 = db == 1 ? b.unsqueeze(1) : b;
    Tensor r = mm_unchecked(a2, b2);
    if (da == 1) return r.squeeze(0);
    if (db == 1) return r.squeeze(1);
    return r;
  }
  if (db <= 2) {  // fold a's batch dims into M: [*, M, K] x [K, N] is one GEMM
    Tensor b2 = db == 1 ? b.unsqueeze(1) : b;
    Shape s(a.shape().begin(), a.shape().end() - 1);
    Tensor r = mm_unchecked(a.reshape({shape_numel(s), ka}), b2);
    if (db == 2) s.push_back(b.size(1));
    return r.view(s);
  }
  // General case: broadcast the batch dims, flatten them to one and run bmm.
  Tensor a3 = da == 1 ? a.unsqueeze(0) : a;
  const int64_t M = a3.size(-2), N = b.size(-1);
  Shape batch_a(a3.shape().begin(), a3.shape().end() - 2);
  Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  const int64_t B = shape_numel(batch);
  Shape ea = batch, eb = batch;
  ea.insert(ea.end(), {M, ka});
  eb.insert(eb.end(), {ka, N});
  Tensor r = bmm_out(a3.expand(ea).reshape({B, M, ka}), b.expand(eb).reshape({B, ka, N}));
  Shape s = batch;
  if (da != 1) s.push_back(M);
  s.push_back(N);
  return r.view(s);
}

// nn.Linear on CUDA with a bias: the bias add runs as the GEMM's cuBLASLt epilogue (as
// PyTorch's addmm does) instead of a second kernel. x:[*,K] (at least 2-D) w:[N,K] b:[N] ->
// [*,N], floating, one dtype and device; otherwise (or without CUDA) an undefined tensor and
// the caller takes the generic path (with its errors).
Tensor cuda_linear_with_bias(const Tensor& x, const Tensor& w, const Tensor& b) {
#ifdef MINIDL_WITH_CUDA
  if (!(x.device().is_cuda() && b.defined() && x.dim() >= 2 && w.dim() == 2 && b.dim() == 1 &&
        b.size(0) == w.size(0) && b.device() == x.device() && b.dtype() == x.dtype() &&
        (x.dtype() == kFloat32 || x.dtype() == kFloat16 || x.dtype() == kBFloat16)))
    return {};
  NoGradGuard no_grad;
  const Tensor x2d = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});  // [M,K]
  Tensor out2d = empty({x2d.size(0), w.size(0)}, x.dtype(), x.device());
  cuda::gemm_bias_act(x2d, w, b, out2d, cuda::Epilogue::none);
  Shape s(x.shape().begin(), x.shape().end() - 1);
  s.push_back(w.size(0));
  return out2d.view(s);
#else
  (void)x, (void)w, (void)b;
  return {};
#endif
}

// CPU f16/bf16 linear with a bias through oneDNN, the bias added to the f32 accumulator (one
// rounding, one pass, as torch's CPU addmm): x:[*,K] (at least 2-D) w:[N,K] b:[N]. Undefined
// when it does not apply (f32/f64 keep matmul + add_, whose results are pinned bitwise).
Tensor cpu_half_linear_with_bias(const Tensor& x, const Tensor& w, const Tensor& b) {
  const DType dt = x.dtype();
  if (!(x.device().is_cpu() && b.defined() && x.dim() >= 2 && w.dim() == 2 && b.dim() == 1 &&
        b.size(0) == w.size(0) && w.size(1) == x.size(-1) && b.device() == x.device() &&
        w.device() == x.device() && b.dtype() == dt && w.dtype() == dt &&
        (dt == kBFloat16 || dt == kFloat16)))
    return {};
  NoGradGuard no_grad;
  const Tensor x2d = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});  // [M,K]
  Tensor out2d = empty({x2d.size(0), w.size(0)}, dt, x.device());
  if (!cpu::onednn::linear_bias(x2d, w, b.contiguous(), out2d)) return {};
  Shape s(x.shape().begin(), x.shape().end() - 1);
  s.push_back(w.size(0));
  return out2d.view(s);
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::linear>(x, w, b))
    return linear(ac[0], ac[1], ac[2]);
  check_operands(x, w, "linear");
  MINIDL_CHECK(w.dim() == 1 || w.dim() == 2, "op `linear`: weight must be [out_features, ",
               "in_features], got shape ", w.shape_str(), " (input ", x.shape_str(), ")");
  MINIDL_CHECK(x.dim() >= 1, "op `linear`: input must have at least 1 dimension, got shape ",
               x.shape_str());
  const int64_t in = w.size(-1);
  if (x.size(-1) != in) {
    Tensor wt = w.dim() == 2 ? w.t() : w.unsqueeze(1);
    MINIDL_FAIL("op `linear`: mat1 and mat2 shapes cannot be multiplied (",
                x.numel() / std::max<int64_t>(x.size(-1), 1), "x", x.size(-1), " and ", dims_x(wt),
                "); input ", x.shape_str(), ", weight ", w.shape_str());
  }
  Tensor out = cuda_linear_with_bias(x, w, b);
  if (!out.defined()) out = cpu_half_linear_with_bias(x, w, b);
  if (!out.defined()) {
    NoGradGuard no_grad;
    out = matmul_impl(x, w.dim() == 2 ? w.t() : w);
    if (b.defined()) {
      check_operands(out, b, "linear");
      Shape s = broadcast_shapes(out.shape(), b.shape(), "linear");
      MINIDL_CHECK(s == out.shape(), "op `linear`: bias of shape ", b.shape_str(),
                   " does not broadcast to the output shape ", out.shape_str());
      add_(out, b);
    }
  }
  // out = x @ w^T + b: one node for x, w and b.
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const bool need_b = b.defined() && b.requires_grad();
  const Shape b_shape = b.defined() ? b.shape() : Shape{};
  autograd::record("LinearBackward", {x, w, b}, {&out}, {x, w},
                   [need_x, need_w, need_b, b_shape](const std::vector<Tensor>& g,
                                                     const std::vector<Tensor>& s) {
                     const Tensor& w = s[1];
                     const Tensor& x = s[0];
                     const DType dt = g[0].dtype();
                     if ((dt == kBFloat16 || dt == kFloat16) && w.dim() == 2 && x.dim() >= 2) {
                       // 16-bit floats: fold the batch dims into one GEMM per gradient, gw =
                       // g^T x [N,K] directly: no per-batch partial products rounded to 16
                       // bits and summed again, no transposing copy. (f32/f64 keep the batched
                       // path below, whose summation order their results are pinned to.)
                       const int64_t N = w.size(0), K = w.size(1);
                       const Tensor g2 = g[0].reshape({-1, N});  // [M, N]
                       Tensor gx = need_x ? matmul(g[0], w) : Tensor();
                       Tensor gw = need_w ? mm(g2.t(), x.reshape({-1, K})) : Tensor();
                       Tensor gb = need_b ? sum_to_shape(g[0], b_shape).contiguous() : Tensor();
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
  return out;
}

}  // namespace minidl
