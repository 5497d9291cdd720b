// MultiheadAttention and TransformerEncoderLayer with PyTorch's parameter and submodule names
// (in_proj_weight, in_proj_bias, out_proj.*; self_attn, linear1, dropout, linear2, norm1/2,
// dropout1/2) so state_dicts from torch load directly.
#pragma once
#include <memory>
#include <string>

#include "nn/attention_functional.h"
#include "nn/linear_conv.h"
#include "nn/module.h"
#include "nn/normalization.h"

namespace minidl::nn {

struct MultiheadAttentionOutput {
  Tensor output;   // [B,T,E] (batch_first) / [T,B,E] / [T,E] unbatched
  Tensor weights;  // [B,T,S] averaged over heads ([B,H,T,S] when not averaged); undefined
                   // unless need_weights
};

// torch.nn.MultiheadAttention's keyword arguments (batch_first defaults to true here).
struct MultiheadAttentionOptions {
  double dropout = 0.0;
  bool bias = true;
  bool batch_first = true;
};

// MultiheadAttention(64, 4, {.dropout = 0.1, .bias = false}); gen: initialisation generator.
class MultiheadAttention : public Cloneable<MultiheadAttention> {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {},
                     Generator* gen = nullptr);
  // query:[B,T,E], key/value:[B,S,E] (batch_first; [T,B,E] otherwise; [T,E] unbatched).
  // key_padding_mask: [B,S] bool (true = ignore) or float (additive).
  // attn_mask: [T,S] or [B*H,T,S], bool (true = masked) or float (additive).
  // is_causal: mask keys j > i (used when attn_mask is undefined).
  MultiheadAttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& key_padding_mask = {}, bool need_weights = true,
                                   const Tensor& attn_mask = {}, bool average_attn_weights = true,
                                   bool is_causal = false);
  using Module::operator();
  MultiheadAttentionOutput operator()(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& key_padding_mask = {}, bool need_weights = true,
                                      const Tensor& attn_mask = {}) {
    return forward(q, k, v, key_padding_mask, need_weights, attn_mask);
  }
  Tensor forward(const Tensor& x) override;  // self-attention output
  std::string name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;

  int64_t embed_dim, num_heads, head_dim;
  double dropout;
  bool batch_first;
  Generator* gen;
  Tensor in_proj_weight, in_proj_bias;  // [3E,E], [3E] (undefined when bias=false)
  std::shared_ptr<Linear> out_proj;
};

// torch.nn.TransformerEncoderLayer's keyword arguments (batch_first defaults to true here).
struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // "relu" | "gelu" | "gelu_tanh"
  double layer_norm_eps = 1e-5;
  bool batch_first = true;
  bool norm_first = false;
};

// TransformerEncoderLayer(64, 4, {.dim_feedforward = 256, .norm_first = true})
class TransformerEncoderLayer : public Cloneable<TransformerEncoderLayer> {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                          TransformerEncoderLayerOptions options = {}, Generator* gen = nullptr);
  // src:[B,T,E] (batch_first); src_mask [T,T]; src_key_padding_mask [B,T] (true = ignore).
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  Tensor forward(const Tensor& src) override { return forward(src, {}, {}); }
  using Module::operator();
  std::string name() const override { return "TransformerEncoderLayer"; }

  std::string activation;  // "relu" | "gelu" | "gelu_tanh" (GELU with approximate="tanh")
  bool norm_first;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout1, dropout2;

 private:
  Tensor sa_block(const Tensor& x, const Tensor& mask, const Tensor& kpm, bool is_causal);
  Tensor ff_block(const Tensor& x);
};

}  // namespace minidl::nn
