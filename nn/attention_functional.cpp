// attention_with_weights from differentiable ops: scores = q k^T / sqrt(E), masks via where(-inf)
// or addition, softmax over keys, optional dropout, weighted sum of values; and the fused
// F::scaled_dot_product_attention.
#include <cmath>
#include <limits>

#include "nn/attention_functional.h"
#include "autograd/autocast.h"

namespace minidl::nn::functional {

Tensor causal_mask(int64_t L, int64_t S, Device device) {
  Tensor i = arange(L, kInt64, device).unsqueeze(1);  // [L,1]
  Tensor j = arange(S, kInt64, device).unsqueeze(0);  // [1,S]
  return gt(j, i);
}

Tensor apply_attention_mask(const Tensor& scores, const Tensor& mask, std::string_view op) {
  if (!mask.defined()) return scores;
  MINIDL_CHECK(mask.device() == scores.device(), "op `", op, "`: mask is on ", mask.device(),
               " but scores are on ", scores.device());
  broadcast_shapes(mask.shape(), scores.shape(), op);
  if (mask.dtype() == kBool)
    return where(logical_not(mask), scores, Scalar(-std::numeric_limits<double>::infinity()));
  MINIDL_CHECK(mask.is_floating_point(), "op `", op,
               "`: expected a bool or floating mask, got dtype ", mask.dtype());
  return scores + mask.to(scores.dtype());
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, Generator* gen) {
  return minidl::scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale, gen);
}

AttentionResult attention_with_weights(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& attn_mask, bool is_causal, double dropout_p,
                                       bool training, Generator* gen) {
  if (auto ac =
          amp::autocast_inputs<amp::AutocastOp::scaled_dot_product_attention>(q, k, v, attn_mask))
    return attention_with_weights(ac[0], ac[1], ac[2], ac[3], is_causal, dropout_p, training, gen);
  constexpr std::string_view op = "attention_with_weights";
  MINIDL_CHECK(q.defined() && k.defined() && v.defined(), "op `", op, "`: undefined input");
  MINIDL_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, "op `", op,
               "`: expected q, k, v of rank >= 2, got ", q.shape_str(), ", ", k.shape_str(), ", ",
               v.shape_str());
  MINIDL_CHECK(q.size(-1) == k.size(-1), "op `", op, "`: q ", q.shape_str(), " and k ",
               k.shape_str(), " must have the same last dim");
  MINIDL_CHECK(k.size(-2) == v.size(-2), "op `", op, "`: k ", k.shape_str(), " and v ",
               v.shape_str(), " must have the same number of keys (dim -2)");
  MINIDL_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "op `", op, "`: dropout_p must be in [0, 1), ",
               "got ", dropout_p);
  const int64_t L = q.size(-2), S = k.size(-2);
  const double scale = 1.0 / std::sqrt(double(q.size(-1)));
  Tensor scores = matmul(q * scale, k.transpose(-2, -1));  // [..., L, S]
  if (is_causal) scores = apply_attention_mask(scores, causal_mask(L, S, q.device()), op);
  scores = apply_attention_mask(scores, attn_mask, op);
  Tensor w = softmax(scores, -1);
  if (training && dropout_p > 0.0)
    w = w * dropout_mask(w.shape(), dropout_p, w.dtype(), w.device(), gen);
  return {matmul(w, v), w};
}

}  // namespace minidl::nn::functional
