// Raw linear algebra: matmul (torch.matmul semantics: 1-D operands, broadcast batch dims), mm,
// bmm and linear, all lowered onto the bmm kernel a:[B,M,K] x b:[B,K,N] (linear with a bias may
// use a fused GEMM epilogue). No history: autograd/functions/linalg.cpp records the nodes.
#include <algorithm>
#include <string>

#include "tensor/linear_weight_grad.h"
#include "tensor/ops.h"

namespace minidl::native {
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
  return native::squeeze(bmm_out(native::unsqueeze(a, 0), native::unsqueeze(b, 0)), 0);
}

void check_mm_shapes(const Tensor& a, const Tensor& b, std::string_view op) {
  MINIDL_CHECK(a.size(1) == b.size(0), "op `", op, "`: mat1 and mat2 shapes cannot be multiplied (",
               dims_x(a), " and ", dims_x(b), ")");
}

// nn.Linear on CUDA with a bias: the bias add runs as the GEMM's cuBLASLt epilogue (as
// PyTorch's addmm does) instead of a second kernel. x:[*,K] (at least 2-D) w:[N,K] b:[N] ->
// [*,N], floating, one dtype and device; otherwise (or without CUDA) an undefined tensor and
// the caller takes the generic path (with its errors).
Tensor cuda_linear_with_bias(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (!(x.device().is_cuda() && b.defined() && x.dim() >= 2 && w.dim() == 2 && b.dim() == 1 &&
        b.size(0) == w.size(0) && b.device() == x.device() && b.dtype() == x.dtype() &&
        (x.dtype() == kFloat32 || x.dtype() == kFloat16 || x.dtype() == kBFloat16)))
    return {};
  const Tensor x2d = x.dim() == 2 ? x : native::reshape(x, {-1, x.size(-1)});  // [M,K]
  Tensor out2d = empty({x2d.size(0), w.size(0)}, x.dtype(), x.device());
  if (!kernel<Op::linear_bias>(x.device())(x2d, w, b, out2d)) return {};
  Shape s(x.shape().begin(), x.shape().end() - 1);
  s.push_back(w.size(0));
  return native::view(out2d, s);
}

// CPU linear with a bias as one dispatch of linear_bias: oneDNN for f16/bf16 (the bias added to
// the f32 accumulator, one rounding, as torch's CPU addmm), the GEMM then the bias add otherwise
// (f32/f64: bitwise the unfused matmul + add_). x:[*,K] (at least 2-D) w:[N,K] b:[N], floating,
// one dtype and device; otherwise an undefined tensor and the caller takes the generic path.
Tensor cpu_linear_with_bias(const Tensor& x, const Tensor& w, const Tensor& b) {
  const DType dt = x.dtype();
  if (!(x.device().is_cpu() && b.defined() && x.dim() >= 2 && w.dim() == 2 && b.dim() == 1 &&
        b.size(0) == w.size(0) && w.size(1) == x.size(-1) && b.device() == x.device() &&
        w.device() == x.device() && b.dtype() == dt && w.dtype() == dt && is_floating(dt)))
    return {};
  const Tensor x2d = x.dim() == 2 ? x : native::reshape(x, {-1, x.size(-1)});  // [M,K]
  Tensor out2d = empty({x2d.size(0), w.size(0)}, dt, x.device());
  if (!kernel<Op::linear_bias>(x.device())(x2d, w, native::contiguous(b), out2d)) return {};
  Shape s(x.shape().begin(), x.shape().end() - 1);
  s.push_back(w.size(0));
  return native::view(out2d, s);
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  check_operands(a, b, "mm");
  MINIDL_CHECK(a.dim() == 2 && b.dim() == 2, "op `mm`: expected 2-D matrices, got shapes ",
               a.shape_str(), " and ", b.shape_str());
  check_mm_shapes(a, b, "mm");
  return mm_unchecked(a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_operands(a, b, "bmm");
  MINIDL_CHECK(a.dim() == 3 && b.dim() == 3, "op `bmm`: expected 3-D batches [B, M, K] and ",
               "[B, K, N], got shapes ", a.shape_str(), " and ", b.shape_str());
  MINIDL_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "op `bmm`: batch shapes ",
               a.shape_str(), " and ", b.shape_str(),
               " cannot be multiplied (expected batch2 to start with [", a.size(0), ", ", a.size(2),
               "])");
  return bmm_out(a, b);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_operands(a, b, "matmul");
  const int64_t da = a.dim(), db = b.dim();
  MINIDL_CHECK(da >= 1 && db >= 1, "op `matmul`: both arguments need at least 1 dimension, got ",
               da, "-D ", a.shape_str(), " and ", db, "-D ", b.shape_str());
  if (da == 1 && db == 1) {  // dot product -> 0-d
    MINIDL_CHECK(a.size(0) == b.size(0), "op `matmul`: inconsistent tensor size, expected ",
                 a.shape_str(), " and ", b.shape_str(), " to have the same number of elements");
    return native::reshape(mm_unchecked(native::unsqueeze(a, 0), native::unsqueeze(b, 1)), {});
  }
  // Contraction sizes: a's last dim against b's second-to-last (or only) dim.
  const int64_t ka = a.size(-1), kb = db == 1 ? b.size(0) : b.size(-2);
  if (ka != kb) {
    if (da <= 2 && db <= 2) {  // PyTorch's mm wording with 1-D operands as 1xK / Kx1
      Tensor a2 = da == 1 ? native::unsqueeze(a, 0) : a, b2 = db == 1 ? native::unsqueeze(b, 1) : b;
      check_mm_shapes(a2, b2, "matmul");
    }
    MINIDL_FAIL("op `matmul`: shapes ", a.shape_str(), " and ", b.shape_str(),
                " cannot be multiplied (contraction sizes ", ka, " and ", kb, " differ)");
  }
  if (da <= 2 && db <= 2) {
    Tensor a2 = da == 1 ? native::unsqueeze(a, 0) : a, b2 = db == 1 ? native::unsqueeze(b, 1) : b;
    Tensor r = mm_unchecked(a2, b2);
    if (da == 1) return native::squeeze(r, 0);
    if (db == 1) return native::squeeze(r, 1);
    return r;
  }
  if (db <= 2) {  // fold a's batch dims into M: [*, M, K] x [K, N] is one GEMM
    Tensor b2 = db == 1 ? native::unsqueeze(b, 1) : b;
    Shape s(a.shape().begin(), a.shape().end() - 1);
    Tensor r = mm_unchecked(native::reshape(a, {shape_numel(s), ka}), b2);
    if (db == 2) s.push_back(b.size(1));
    return native::view(r, s);
  }
  // General case: broadcast the batch dims, flatten them to one and run bmm.
  Tensor a3 = da == 1 ? native::unsqueeze(a, 0) : a;
  const int64_t M = a3.size(-2), N = b.size(-1);
  Shape batch_a(a3.shape().begin(), a3.shape().end() - 2);
  Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  const int64_t B = shape_numel(batch);
  Shape ea = batch, eb = batch;
  ea.insert(ea.end(), {M, ka});
  eb.insert(eb.end(), {ka, N});
  Tensor r = bmm_out(native::reshape(native::expand(a3, ea), {B, M, ka}),
                     native::reshape(native::expand(b, eb), {B, ka, N}));
  Shape s = batch;
  if (da != 1) s.push_back(M);
  s.push_back(N);
  return native::view(r, s);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_operands(x, w, "linear");
  MINIDL_CHECK(w.dim() == 1 || w.dim() == 2, "op `linear`: weight must be [out_features, ",
               "in_features], got shape ", w.shape_str(), " (input ", x.shape_str(), ")");
  MINIDL_CHECK(x.dim() >= 1, "op `linear`: input must have at least 1 dimension, got shape ",
               x.shape_str());
  const int64_t in = w.size(-1);
  if (x.size(-1) != in) {
    Tensor wt = w.dim() == 2 ? native::t(w) : native::unsqueeze(w, 1);
    MINIDL_FAIL("op `linear`: mat1 and mat2 shapes cannot be multiplied (",
                x.numel() / std::max<int64_t>(x.size(-1), 1), "x", x.size(-1), " and ", dims_x(wt),
                "); input ", x.shape_str(), ", weight ", w.shape_str());
  }
  Tensor out = cuda_linear_with_bias(x, w, b);
  if (!out.defined()) out = cpu_linear_with_bias(x, w, b);
  if (!out.defined()) {
    out = native::matmul(x, w.dim() == 2 ? native::t(w) : w);
    if (b.defined()) {
      check_operands(out, b, "linear");
      Shape s = broadcast_shapes(out.shape(), b.shape(), "linear");
      MINIDL_CHECK(s == out.shape(), "op `linear`: bias of shape ", b.shape_str(),
                   " does not broadcast to the output shape ", out.shape_str());
      native::add_(out, b);
    }
  }
  return out;
}

std::pair<Tensor, Tensor> linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_operands(x, w, "linear_gelu");
  MINIDL_CHECK(b.defined(), "op `linear_gelu`: needs a bias (input ", x.shape_str(), ", weight ",
               w.shape_str(), ")");
  check_operands(x, b, "linear_gelu");
  MINIDL_CHECK(x.is_floating_point(), "op `linear_gelu`: expected a floating input, got ",
               x.dtype());
  MINIDL_CHECK(x.dim() >= 2 && w.dim() == 2 && b.dim() == 1 && x.size(-1) == w.size(1) &&
                   b.size(0) == w.size(0),
               "op `linear_gelu`: expected x:[*, K] (at least 2-D), w:[N, K], b:[N], got x ",
               x.shape_str(), ", w ", w.shape_str(), ", b ", b.shape_str());
  const Tensor x2d = x.dim() == 2 ? x : native::reshape(x, {-1, x.size(-1)});  // [M,K]
  const int64_t M = x2d.size(0), N = w.size(0);
  Tensor pre = empty({M, N}, x.dtype(), x.device()), out = empty({M, N}, x.dtype(), x.device());
  kernel<Op::linear_gelu>(x.device())(x2d, w, native::contiguous(b), pre, out);
  Shape s(x.shape().begin(), x.shape().end() - 1);
  s.push_back(N);
  return {native::view(out, s), native::view(pre, s)};
}

Tensor matmul_gelu_backward(const Tensor& g, const Tensor& w, const Tensor& pre) {
  check_operands(g, w, "matmul_gelu_backward");
  check_operands(g, pre, "matmul_gelu_backward");
  MINIDL_CHECK(g.is_floating_point(), "op `matmul_gelu_backward`: expected a floating dtype, got ",
               g.dtype());
  MINIDL_CHECK(g.dim() >= 2 && w.dim() == 2 && pre.dim() == g.dim() && g.size(-1) == w.size(0) &&
                   pre.size(-1) == w.size(1) &&
                   std::equal(g.shape().begin(), g.shape().end() - 1, pre.shape().begin()),
               "op `matmul_gelu_backward`: expected g:[*, N], w:[N, K], pre:[*, K], got g ",
               g.shape_str(), ", w ", w.shape_str(), ", pre ", pre.shape_str());
  const Tensor g2d = native::reshape(g, {-1, g.size(-1)});                         // [M,N]
  const Tensor pre2d = native::reshape(native::contiguous(pre), {-1, w.size(1)});  // [M,K]
  Tensor out = empty(pre2d.shape(), pre.dtype(), pre.device());
  if (out.numel() > 0) kernel<Op::matmul_gelu_backward>(g.device())(g2d, w, pre2d, out);
  return native::view(out, pre.shape());
}

void linear_weight_grad_into(const Tensor& g, const Tensor& x, Tensor& grad_w, Tensor& grad_b) {
  check_operands(g, x, "linear_weight_grad");
  MINIDL_CHECK(
      g.dim() >= 1 && x.dim() >= 1 && g.dim() == x.dim() &&
          std::equal(g.shape().begin(), g.shape().end() - 1, x.shape().begin()),
      "op `linear_weight_grad`: expected g:[*, N] and x:[*, K] with the same leading dims, "
      "got g ",
      g.shape_str(), " and x ", x.shape_str());
  MINIDL_CHECK(is_floating(g.dtype()), "op `linear_weight_grad`: expected a floating dtype, got ",
               g.dtype());
  const int64_t N = g.size(-1), K = x.size(-1);
  const DType out = grad_w.defined() ? grad_w.dtype() : g.dtype();
  const bool half = g.dtype() == kBFloat16 || g.dtype() == kFloat16;
  const bool widened = out == kFloat32 && half;
  MINIDL_CHECK(grad_w.defined() && grad_w.shape() == Shape({N, K}) && grad_w.is_contiguous() &&
                   grad_w.device() == g.device() && (out == g.dtype() || widened),
               "op `linear_weight_grad`: expected grad_w a contiguous [", N, ", ", K,
               "] tensor of ", g.dtype(), (half ? " or float32" : ""), " on ", g.device(), ", got ",
               grad_w.defined() ? grad_w.shape_str() + " " + std::string(dtype_name(out))
                                : std::string("undefined"));
  MINIDL_CHECK(!grad_b.defined() || (grad_b.shape() == Shape({N}) && grad_b.dtype() == out &&
                                     grad_b.is_contiguous() && grad_b.device() == g.device()),
               "op `linear_weight_grad`: expected grad_b a contiguous [", N, "] tensor of ", out,
               ", got ", grad_b.shape_str(), " ", grad_b.dtype());
  const Tensor g2 = g.dim() == 2 ? g : reshape(g, {-1, N});  // [M,N]
  const Tensor x2 = x.dim() == 2 ? x : reshape(x, {-1, K});  // [M,K]
  kernel<Op::linear_weight_grad>(g.device())(g2, x2, grad_w, grad_b);
}

std::pair<Tensor, Tensor> linear_weight_grad(const Tensor& g, const Tensor& x, bool with_bias) {
  MINIDL_CHECK(g.defined() && x.defined() && g.dim() >= 1 && x.dim() >= 1,
               "op `linear_weight_grad`: expected g:[*, N] and x:[*, K]");
  Tensor gw = empty({g.size(-1), x.size(-1)}, g.dtype(), g.device());
  Tensor gb = with_bias ? empty({g.size(-1)}, g.dtype(), g.device()) : Tensor();
  linear_weight_grad_into(g, x, gw, gb);
  return {gw, gb};
}

}  // namespace minidl::native
