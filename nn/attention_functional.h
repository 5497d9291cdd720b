// Attention functions: torch's F.scaled_dot_product_attention (the fused op, true = attend), and
// the composite returning weights (matmul, softmax, where; true = masked) under
// MultiheadAttention.
#pragma once
#include "autograd/ops.h"

namespace minidl::nn::functional {

struct AttentionResult {
  Tensor output;   // [..., L, Ev]
  Tensor weights;  // [..., L, S] (softmax probabilities after dropout)
};

// torch.nn.functional.scaled_dot_product_attention (PyTorch 2.x signature and mask convention:
// bool true = takes part): the fused op minidl::scaled_dot_product_attention (tensor/ops.h).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = {}, double dropout_p = 0.0,
                                    bool is_causal = false, std::optional<double> scale = {},
                                    Generator* gen = nullptr);

// The composite path with the attention weights (MultiheadAttention with need_weights).
// q:[..., L, E] k:[..., S, E] v:[..., S, Ev]. attn_mask broadcasts to [..., L, S]: bool with
// true = masked out (MultiheadAttention's convention, the opposite of
// scaled_dot_product_attention's) or floating (added to the scores). key_padding_mask broadcasts to
// [..., 1, S] the same way. is_causal masks keys after each query (j > i). dropout_p > 0 drops
// attention weights (pass training=false to disable).
AttentionResult attention_with_weights(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& attn_mask = {}, bool is_causal = false,
                                       double dropout_p = 0.0, bool training = true,
                                       Generator* gen = nullptr);

// [L, S] bool mask with true above the diagonal (the future keys).
Tensor causal_mask(int64_t L, int64_t S, Device device = kCPU);

// Applies a bool (true = masked -> -inf) or floating (additive) mask to attention scores.
Tensor apply_attention_mask(const Tensor& scores, const Tensor& mask, std::string_view op);

}  // namespace minidl::nn::functional
