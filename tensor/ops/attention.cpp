// scaled_dot_product_attention, raw layer (torch.nn.functional's, PyTorch 2.x semantics): checks,
// broadcasting of the batch dims, mask and dropout-stream preparation, dispatch to the fused
// kernels, and the composite fallback where they do not apply. No history here.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/ops.h"
#include "tensor/sdpa_out.h"

namespace minidl::native {
namespace {

constexpr std::string_view kOp = "scaled_dot_product_attention";

struct SdpaShapes {
  Shape batch;  // broadcast leading dims of q, k, v
  int64_t BH = 1, L = 0, S = 0, E = 0, Ev = 0;
};

Shape leading(const Tensor& t) {
  return Shape(t.shape().begin(), t.shape().end() - 2);
}

SdpaShapes check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                        double dropout_p) {
  MINIDL_CHECK(q.defined() && k.defined() && v.defined(), "op `", kOp, "`: undefined input");
  MINIDL_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, "op `", kOp,
               "`: expected q, k, v of rank >= 2, got ", q.shape_str(), ", ", k.shape_str(), ", ",
               v.shape_str());
  MINIDL_CHECK(q.is_floating_point() && q.dtype() == k.dtype() && q.dtype() == v.dtype(), "op `",
               kOp, "`: expected q, k, v of one floating dtype, got ", q.dtype(), ", ", k.dtype(),
               ", ", v.dtype());
  check_same_device(kOp, q, k);
  check_same_device(kOp, q, v);
  check_same_device(kOp, q, mask);
  MINIDL_CHECK(q.size(-1) == k.size(-1), "op `", kOp, "`: q ", q.shape_str(), " and k ",
               k.shape_str(), " must have the same last dim");
  MINIDL_CHECK(k.size(-2) == v.size(-2), "op `", kOp, "`: k ", k.shape_str(), " and v ",
               v.shape_str(), " must have the same number of keys (dim -2)");
  MINIDL_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, "op `", kOp,
               "`: dropout_p must be in [0, 1], got ", dropout_p);
  SdpaShapes s;
  s.batch = broadcast_shapes(broadcast_shapes(leading(q), leading(k), kOp), leading(v), kOp);
  s.L = q.size(-2), s.S = k.size(-2), s.E = q.size(-1), s.Ev = v.size(-1);
  s.BH = shape_numel(s.batch);
  if (mask.defined()) {
    MINIDL_CHECK(mask.dtype() == kBool || mask.is_floating_point(), "op `", kOp,
                 "`: expected a bool or floating attn_mask, got dtype ", mask.dtype());
    Shape full = s.batch;
    full.push_back(s.L);
    full.push_back(s.S);
    MINIDL_CHECK(broadcast_shapes(mask.shape(), full, kOp) == full, "op `", kOp,
                 "`: attn_mask of shape ", mask.shape_str(), " does not broadcast to ",
                 shape_str(full));
  }
  return s;
}

// q/k/v -> contiguous [BH, n, d] with the broadcast batch dims.
Tensor flat3(const Tensor& t, const SdpaShapes& s) {
  Shape full = s.batch;
  full.push_back(t.size(-2));
  full.push_back(t.size(-1));
  return reshape(contiguous(expand(t, full)), {s.BH, t.size(-2), t.size(-1)});
}

// Whether the kernels read t:[batch..., n, d] as it is (HeadLayout): 3-D or 4-D, not broadcast,
// unit stride in d. E.g. q, k, v as [B,nh,T,hd] views of a fused [B,T,3C] projection.
bool is_head_view(const Tensor& t, const SdpaShapes& s) {
  return (t.dim() == 3 || t.dim() == 4) && leading(t) == s.batch &&
         (t.size(-1) <= 1 || t.strides()[size_t(t.dim() - 1)] == 1);
}

// q/k/v (or grad_out, out) as the kernels take them: a head view itself, else flat3's copy.
Tensor kernel_view(const Tensor& t, const SdpaShapes& s) {
  return is_head_view(t, s) ? t : flat3(t, s);
}

// A caller's buffer of shape [batch..., n, d] (out, or a gradient of q, k, v) as the kernels
// write it: a head view itself, or contiguous as [BH, n, d].
Tensor writable_view(const Tensor& buf, const SdpaShapes& s, int64_t n, int64_t d, DType dt,
                     Device dev, std::string_view what) {
  MINIDL_CHECK(
      buf.defined() && buf.numel() == s.BH * n * d && buf.dtype() == dt && buf.device() == dev,
      "op `", kOp, "`: ", what, " must be a ", dt, " tensor of ", s.BH * n * d, " elements on ",
      dev, ", got ",
      buf.defined() ? buf.shape_str() + " " + std::string(dtype_name(buf.dtype()))
                    : std::string("undefined"));
  if (buf.dim() >= 2 && buf.size(-2) == n && buf.size(-1) == d && is_head_view(buf, s)) return buf;
  MINIDL_CHECK(buf.is_contiguous(), "op `", kOp, "`: ", what, " of shape ", buf.shape_str(),
               " must be contiguous, or 3-D or 4-D with unit stride in the last dim");
  return reshape(buf, {s.BH, n, d});
}

DType acc_dtype(DType dt) {
  return dt == kFloat64 ? kFloat64 : kFloat32;
}

// Fills the kernel's view of the mask: floating masks in the accumulation dtype, expanded to
// [batch..., L, S] without a copy, with the element offset of each batch entry.
SdpaParams prepare(const SdpaParams& in, const SdpaShapes& s, DType dt, Device dev) {
  SdpaParams p = in;
  if (!p.mask.defined()) return p;
  Tensor m = p.mask.dtype() == kBool ? p.mask : to(p.mask, acc_dtype(dt));
  Shape full = s.batch;
  full.push_back(s.L);
  full.push_back(s.S);
  m = expand(m, full);
  const int64_t nb = int64_t(s.batch.size());
  std::vector<int64_t> offs(size_t(s.BH));
  for (int64_t bh = 0; bh < s.BH; ++bh) {
    int64_t rem = bh, off = 0;
    for (int64_t d = nb - 1; d >= 0; --d) {
      const int64_t n = s.batch[size_t(d)];
      off += (rem % n) * m.strides()[size_t(d)];
      rem /= n;
    }
    offs[size_t(bh)] = off;
  }
  p.mask = m;
  p.mask_offsets = to(tensor(offs, Shape{s.BH}), dev);
  p.mask_stride_l = m.strides()[size_t(nb)];
  p.mask_stride_s = m.strides()[size_t(nb + 1)];
  return p;
}

Shape with_last2(const Shape& batch, int64_t a, int64_t b) {
  Shape r = batch;
  r.push_back(a);
  r.push_back(b);
  return r;
}

// The composite path (matmul, softmax, where) from raw ops: what the differentiable
// scaled_dot_product_attention_math computes, for the inputs the fused kernels do not take.
Tensor sdpa_math(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                 double dropout_p, bool is_causal, std::optional<double> scale, Generator* gen) {
  const SdpaShapes s = check_inputs(q, k, v, attn_mask, dropout_p);
  const double sc = scale ? *scale : 1.0 / std::sqrt(double(s.E));
  const Scalar ninf(-std::numeric_limits<double>::infinity());
  Tensor scores = matmul(mul(q, sc), transpose(k, -2, -1));  // [..., L, S]
  if (is_causal) {
    Tensor i = unsqueeze(arange(s.L, kInt64, q.device()), 1);
    Tensor j = unsqueeze(arange(s.S, kInt64, q.device()), 0);
    scores = where(le(j, i), scores, ninf);
  }
  if (attn_mask.defined())
    scores = attn_mask.dtype() == kBool ? where(attn_mask, scores, ninf)
                                        : add(scores, to(attn_mask, scores.dtype()));
  Tensor w = softmax(scores, -1);
  if (dropout_p > 0.0) w = mul(w, dropout_mask(w.shape(), dropout_p, w.dtype(), w.device(), gen));
  return matmul(w, v);
}

}  // namespace

void check_scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& attn_mask, double dropout_p) {
  check_inputs(q, k, v, attn_mask, dropout_p);
}

std::optional<SdpaParams> scaled_dot_product_attention_params(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask, double dropout_p,
    bool is_causal, std::optional<double> scale, Generator* gen) {
  const SdpaShapes s = check_inputs(q, k, v, attn_mask, dropout_p);
  if (q.device().type == DeviceType::cuda && std::max(s.E, s.Ev) > 128)  // beyond the kernel
    return std::nullopt;
  SdpaParams p;
  p.scale = scale ? *scale : 1.0 / std::sqrt(double(s.E));
  p.is_causal = is_causal;
  p.dropout_p = dropout_p;
  p.mask = attn_mask;
  if (dropout_p > 0.0) {
    Generator& g = gen ? *gen : default_generator();
    const PhiloxStream st = g.reserve(PhiloxStream::blocks32(uint64_t(s.BH * s.L * s.S)));
    p.seed = st.seed;
    p.offset = st.offset;
  }
  return p;
}

// The forward into out_buf (any head view or contiguous buffer) or a new tensor (nullptr).
static SdpaForwardResult forward_impl(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const SdpaParams& p0, const Tensor* out_buf) {
  const SdpaShapes s = check_inputs(q, k, v, p0.mask, p0.dropout_p);
  const SdpaParams p = prepare(p0, s, q.dtype(), q.device());
  const Shape oshape = with_last2(s.batch, s.L, s.Ev);
  if (out_buf)
    MINIDL_CHECK(out_buf->defined() && out_buf->shape() == oshape, "op `", kOp,
                 "`: expected out of shape ", shape_str(oshape), ", got ",
                 out_buf->defined() ? out_buf->shape_str() : std::string("undefined"));
  Tensor out = out_buf ? writable_view(*out_buf, s, s.L, s.Ev, q.dtype(), q.device(), "out")
                       : empty({s.BH, s.L, s.Ev}, q.dtype(), q.device());
  Tensor lse = empty({s.BH, s.L}, acc_dtype(q.dtype()), q.device());
  if (out.numel() > 0 || lse.numel() > 0)
    kernel<Op::scaled_dot_product_attention>(q.device())(kernel_view(q, s), kernel_view(k, s),
                                                         kernel_view(v, s), out, lse, p);
  Shape lshape = s.batch;
  lshape.push_back(s.L);
  return {out_buf ? *out_buf : reshape(out, oshape), reshape(lse, lshape)};
}

SdpaGrads scaled_dot_product_attention_backward(const Tensor& grad_out, const Tensor& q,
                                                const Tensor& k, const Tensor& v, const Tensor& out,
                                                const Tensor& lse, const SdpaParams& p0,
                                                const SdpaGrads* into) {
  const SdpaShapes s = check_inputs(q, k, v, p0.mask, p0.dropout_p);
  const Shape oshape = with_last2(s.batch, s.L, s.Ev);
  MINIDL_CHECK(grad_out.defined() && grad_out.shape() == oshape && out.shape() == oshape, "op `",
               kOp, "_backward`: expected grad_out and out of shape ", shape_str(oshape), ", got ",
               grad_out.defined() ? grad_out.shape_str() : "undefined", " and ", out.shape_str());
  MINIDL_CHECK(lse.numel() == s.BH * s.L, "op `", kOp, "_backward`: expected lse with ", s.BH * s.L,
               " elements, got ", lse.shape_str());
  check_same_device(kOp, q, grad_out);
  const SdpaParams p = prepare(p0, s, q.dtype(), q.device());
  // q, k, v, grad_out, out: head views as they are (no copies), else contiguous [BH, n, d]
  const Tensor qf = kernel_view(q, s), kf = kernel_view(k, s), vf = kernel_view(v, s);
  Tensor g = kernel_view(to(grad_out, q.dtype()), s);
  Tensor o = kernel_view(to(out, q.dtype()), s);
  Tensor l = reshape(contiguous(to(lse, acc_dtype(q.dtype()))), {s.BH, s.L});
  // into: the caller's buffers, written in place (inputs broadcast over the batch dims: none)
  const auto grad_buf = [&](const Tensor* buf, int64_t n, int64_t d) {
    return into ? writable_view(*buf, s, n, d, q.dtype(), q.device(), "a gradient buffer")
                : empty({s.BH, n, d}, q.dtype(), q.device());
  };
  Tensor gq = grad_buf(into ? &into->grad_q : nullptr, s.L, s.E);
  Tensor gk = grad_buf(into ? &into->grad_k : nullptr, s.S, s.E);
  Tensor gv = grad_buf(into ? &into->grad_v : nullptr, s.S, s.Ev);
  if (gq.numel() + gk.numel() + gv.numel() > 0)
    kernel<Op::scaled_dot_product_attention_backward>(q.device())(g, qf, kf, vf, o, l, gq, gk, gv,
                                                                  p);
  if (into) return *into;
  auto back = [&](const Tensor& gr, const Tensor& x) {
    return sum_to_shape(reshape(gr, with_last2(s.batch, x.size(-2), x.size(-1))), x.shape());
  };  // (new gradients: contiguous [BH, n, d])
  return {back(gq, q), back(gk, k), back(gv, v)};
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, Generator* gen) {
  const std::optional<SdpaParams> p =
      scaled_dot_product_attention_params(q, k, v, attn_mask, dropout_p, is_causal, scale, gen);
  if (!p) return sdpa_math(q, k, v, attn_mask, dropout_p, is_causal, scale, gen);
  return scaled_dot_product_attention_forward(q, k, v, *p).out;
}

SdpaForwardResult scaled_dot_product_attention_forward(const Tensor& q, const Tensor& k,
                                                       const Tensor& v, const SdpaParams& p) {
  return forward_impl(q, k, v, p, nullptr);
}

SdpaForwardResult scaled_dot_product_attention_forward_out(const Tensor& q, const Tensor& k,
                                                           const Tensor& v, const SdpaParams& p,
                                                           const Tensor& out) {
  return forward_impl(q, k, v, p, &out);
}

}  // namespace minidl::native
