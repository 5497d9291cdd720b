// The differentiable scaled_dot_product_attention: the fused kernels (tensor/ops/attention.cpp)
// with one autograd node, and the composite (matmul/softmax) reference path, which also serves
// the inputs the fused path cannot differentiate (a floating mask that requires grad).
#include <cmath>
#include <limits>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"

namespace minidl {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, Generator* gen) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::scaled_dot_product_attention>(q, k, v))
    return scaled_dot_product_attention(ac[0], ac[1], ac[2], attn_mask, dropout_p, is_causal, scale,
                                        gen);
  if (attn_mask.defined() && attn_mask.requires_grad() && GradMode::is_enabled())
    return scaled_dot_product_attention_math(q, k, v, attn_mask, dropout_p, is_causal, scale, gen);
  // checks the inputs; nullopt beyond the fused kernels (CUDA head dims > 128)
  const std::optional<SdpaParams> params = native::scaled_dot_product_attention_params(
      q, k, v, attn_mask, dropout_p, is_causal, scale, gen);
  if (!params)
    return scaled_dot_product_attention_math(q, k, v, attn_mask, dropout_p, is_causal, scale, gen);
  SdpaForwardResult r = native::scaled_dot_product_attention_forward(q, k, v, *params);
  autograd::record(
      "ScaledDotProductFlashAttentionBackward", {q, k, v}, {&r.out}, {q, k, v, r.out, r.lse},
      [p = *params](const std::vector<Tensor>& g, const std::vector<Tensor>& sv) {
        SdpaGrads gr =
            scaled_dot_product_attention_backward(g[0], sv[0], sv[1], sv[2], sv[3], sv[4], p);
        return std::vector<Tensor>{gr.grad_q, gr.grad_k, gr.grad_v};
      });
  return r.out;
}

Tensor scaled_dot_product_attention_math(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& attn_mask, double dropout_p, bool is_causal,
                                         std::optional<double> scale, Generator* gen) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::scaled_dot_product_attention>(q, k, v))
    return scaled_dot_product_attention_math(ac[0], ac[1], ac[2], attn_mask, dropout_p, is_causal,
                                             scale, gen);
  native::check_scaled_dot_product_attention(q, k, v, attn_mask, dropout_p);
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1);
  const double sc = scale ? *scale : 1.0 / std::sqrt(double(E));
  const Scalar ninf(-std::numeric_limits<double>::infinity());
  Tensor scores = matmul(q * sc, k.transpose(-2, -1));  // [..., L, S]
  if (is_causal) {
    Tensor i = arange(L, kInt64, q.device()).unsqueeze(1);
    Tensor j = arange(S, kInt64, q.device()).unsqueeze(0);
    scores = where(le(j, i), scores, ninf);
  }
  if (attn_mask.defined())
    scores = attn_mask.dtype() == kBool ? where(attn_mask, scores, ninf)
                                        : scores + attn_mask.to(scores.dtype());
  Tensor w = softmax(scores, -1);
  if (dropout_p > 0.0) w = w * dropout_mask(w.shape(), dropout_p, w.dtype(), w.device(), gen);
  return matmul(w, v);
}

}  // namespace minidl
