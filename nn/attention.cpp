// MultiheadAttention (packed in-projection, per-head scaled dot-product attention, out_proj)
// and TransformerEncoderLayer (post-norm or pre-norm), following torch.nn's forward paths.
#include "nn/attention.h"

#include <limits>

#include "nn/functional.h"
#include "nn/init.h"

namespace minidl::nn {
namespace {

// bool (true = masked) -> additive float mask (-inf / 0); float masks pass through cast.
Tensor additive_mask(const Tensor& m, DType dt) {
  if (m.dtype() == kBool)
    return where(logical_not(m), zeros({}, dt, m.device()),
                 Scalar(-std::numeric_limits<double>::infinity()));
  MINIDL_CHECK(m.is_floating_point(), "MultiheadAttention: expected a bool or floating mask, ",
               "got dtype ", m.dtype());
  return m.to(dt);
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t e, int64_t h, MultiheadAttentionOptions o,
                                       Generator* g)
    : embed_dim(e),
      num_heads(h),
      head_dim(0),
      dropout(o.dropout),
      batch_first(o.batch_first),
      gen(g) {
  const double p = o.dropout;
  const bool bias = o.bias;
  MINIDL_CHECK(e > 0 && h > 0, "MultiheadAttention: embed_dim and num_heads must be positive, ",
               "got ", e, " and ", h);
  MINIDL_CHECK(e % h == 0, "MultiheadAttention: embed_dim ", e, " must be divisible by num_heads ",
               h);
  MINIDL_CHECK(p >= 0 && p < 1, "MultiheadAttention: dropout must be in [0, 1), got ", p);
  head_dim = e / h;
  in_proj_weight = empty({3 * e, e});
  init::xavier_uniform_(in_proj_weight, 1.0, gen);
  register_parameter("in_proj_weight", &in_proj_weight);
  if (bias) {
    in_proj_bias = zeros({3 * e});
    register_parameter("in_proj_bias", &in_proj_bias);
  }
  out_proj = std::make_shared<Linear>(e, e, bias, gen);
  if (bias) init::zeros_(out_proj->bias);
  register_module("out_proj", &out_proj);
}

std::string MultiheadAttention::extra_repr() const {
  return "";
}

Tensor MultiheadAttention::forward(const Tensor& x) {
  return forward(x, x, x, {}, false).output;
}

MultiheadAttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                                     const Tensor& value,
                                                     const Tensor& key_padding_mask,
                                                     bool need_weights, const Tensor& attn_mask,
                                                     bool average_attn_weights, bool is_causal) {
  constexpr const char* op = "MultiheadAttention";
  MINIDL_CHECK(query.defined() && key.defined() && value.defined(), op, ": undefined input");
  MINIDL_CHECK(query.dim() == key.dim() && key.dim() == value.dim() &&
                   (query.dim() == 2 || query.dim() == 3),
               op, ": expected query, key, value of rank 3 (batched) or 2 (unbatched), got ",
               query.shape_str(), ", ", key.shape_str(), ", ", value.shape_str());
  const int64_t E = embed_dim, H = num_heads, D = head_dim;
  MINIDL_CHECK(query.size(-1) == E && key.size(-1) == E && value.size(-1) == E, op,
               ": expected embed_dim ", E, " as the last dim, got query ", query.shape_str(),
               ", key ", key.shape_str(), ", value ", value.shape_str());
  const bool batched = query.dim() == 3;
  // -> batch-first [B,T,E] / [B,S,E]
  auto bf = [&](const Tensor& t) {
    if (!batched) return t.unsqueeze(0);
    return batch_first ? t : t.transpose(0, 1);
  };
  Tensor q = bf(query), k = bf(key), v = bf(value);
  const int64_t B = q.size(0), T = q.size(1), S = k.size(1);
  MINIDL_CHECK(k.size(0) == B && v.size(0) == B && v.size(1) == S, op, ": key ", key.shape_str(),
               " and value ", value.shape_str(), " must match each other and query ",
               query.shape_str(), " in batch and length");
  auto w = [&](int64_t i) { return in_proj_weight.narrow(0, i * E, E); };
  auto b = [&](int64_t i) {
    return in_proj_bias.defined() ? in_proj_bias.narrow(0, i * E, E) : Tensor();
  };
  // [B,L,E] -> [B,H,L,D]
  auto heads = [&](const Tensor& t, int64_t L) { return t.reshape({B, L, H, D}).transpose(1, 2); };
  Tensor qh = heads(linear(q, w(0), b(0)), T);
  Tensor kh = heads(linear(k, w(1), b(1)), S);
  Tensor vh = heads(linear(v, w(2), b(2)), S);

  Tensor mask;  // additive, broadcastable to [B,H,T,S]
  const DType dt = qh.dtype();
  // Without weights the fused op runs; it takes is_causal itself (no [T,S] mask needed).
  const bool fused_causal = !need_weights && is_causal && !attn_mask.defined();
  if (attn_mask.defined()) {
    if (attn_mask.dim() == 2) {
      MINIDL_CHECK(attn_mask.shape() == (Shape{T, S}), op, ": attn_mask of shape ",
                   attn_mask.shape_str(), " should be ", shape_str({T, S}));
      mask = additive_mask(attn_mask, dt);
    } else {
      MINIDL_CHECK(attn_mask.dim() == 3 && attn_mask.shape() == (Shape{B * H, T, S}), op,
                   ": attn_mask of shape ", attn_mask.shape_str(), " should be ", shape_str({T, S}),
                   " or ", shape_str({B * H, T, S}));
      mask = additive_mask(attn_mask, dt).reshape({B, H, T, S});
    }
  } else if (is_causal && !fused_causal) {
    mask = additive_mask(functional::causal_mask(T, S, q.device()), dt);
  }
  if (key_padding_mask.defined()) {
    Shape want = batched ? Shape{B, S} : Shape{S};
    MINIDL_CHECK(key_padding_mask.shape() == want, op, ": key_padding_mask of shape ",
                 key_padding_mask.shape_str(), " should be ", shape_str(want));
    Tensor kpm = additive_mask(key_padding_mask, dt).reshape({B, 1, 1, S});
    mask = mask.defined() ? mask + kpm : kpm;
  }
  functional::AttentionResult att;
  if (need_weights) {
    att = functional::attention_with_weights(qh, kh, vh, mask, false, dropout, is_training(), gen);
  } else {  // fused: a fully masked query row gives 0 here (NaN on the composite path)
    att.output = minidl::scaled_dot_product_attention(
        qh, kh, vh, mask, is_training() ? dropout : 0.0, fused_causal, std::nullopt, gen);
  }
  Tensor out = att.output.transpose(1, 2).reshape({B, T, E});  // [B,T,E]
  out = (*out_proj)(out);
  if (!batched) {
    out = out.squeeze(0);
  } else if (!batch_first) {
    out = out.transpose(0, 1);
  }
  MultiheadAttentionOutput res{out, {}};
  if (need_weights) {
    Tensor aw = average_attn_weights ? mean(att.weights, {1}) : att.weights;  // [B,T,S]
    res.weights = batched ? aw : aw.squeeze(0);
  }
  return res;
}

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                                                 TransformerEncoderLayerOptions o, Generator* gen)
    : activation(std::move(o.activation)), norm_first(o.norm_first) {
  const double p = o.dropout, eps = o.layer_norm_eps;
  const int64_t dim_feedforward = o.dim_feedforward;
  MINIDL_CHECK(activation == "relu" || activation == "gelu" || activation == "gelu_tanh",
               "TransformerEncoderLayer: activation should be relu/gelu/gelu_tanh, not ",
               activation);
  self_attn = std::make_shared<MultiheadAttention>(
      d_model, nhead, MultiheadAttentionOptions{.dropout = p, .batch_first = o.batch_first}, gen);
  linear1 = std::make_shared<Linear>(d_model, dim_feedforward, true, gen);
  dropout = std::make_shared<Dropout>(p, gen);
  linear2 = std::make_shared<Linear>(dim_feedforward, d_model, true, gen);
  norm1 = std::make_shared<LayerNorm>(Shape{d_model}, LayerNormOptions{.eps = eps});
  norm2 = std::make_shared<LayerNorm>(Shape{d_model}, LayerNormOptions{.eps = eps});
  dropout1 = std::make_shared<Dropout>(p, gen);
  dropout2 = std::make_shared<Dropout>(p, gen);
  register_module("self_attn", &self_attn);
  register_module("linear1", &linear1);
  register_module("dropout", &dropout);
  register_module("linear2", &linear2);
  register_module("norm1", &norm1);
  register_module("norm2", &norm2);
  register_module("dropout1", &dropout1);
  register_module("dropout2", &dropout2);
}

Tensor TransformerEncoderLayer::sa_block(const Tensor& x, const Tensor& mask, const Tensor& kpm,
                                         bool is_causal) {
  return (*dropout1)(self_attn->forward(x, x, x, kpm, false, mask, true, is_causal).output);
}

Tensor TransformerEncoderLayer::ff_block(const Tensor& x) {
  Tensor h = (*linear1)(x);
  h = activation == "relu" ? relu(h) : gelu(h, activation == "gelu_tanh" ? "tanh" : "none");
  return (*dropout2)((*linear2)((*dropout)(h)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask,
                                        const Tensor& src_key_padding_mask, bool is_causal) {
  Tensor x = src;
  if (norm_first) {
    x = x + sa_block((*norm1)(x), src_mask, src_key_padding_mask, is_causal);
    x = x + ff_block((*norm2)(x));
  } else {
    x = (*norm1)(x + sa_block(x, src_mask, src_key_padding_mask, is_causal));
    x = (*norm2)(x + ff_block(x));
  }
  return x;
}

}  // namespace minidl::nn
