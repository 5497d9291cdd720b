// torch.nn.TransformerEncoder, TransformerDecoderLayer and TransformerDecoder: stacks of N
// clones of a layer (submodules "layers.<i>.*", optional final "norm"), PyTorch's names, so
// state_dicts from torch load directly. batch_first defaults to TRUE here ([B,T,E]); PyTorch's
// default is False ([T,B,E]): pass {.batch_first = false} for torch's sequence-first layout.
#pragma once
#include <memory>
#include <string>

#include "nn/attention.h"
#include "nn/container.h"

namespace minidl::nn {

// TransformerEncoder(layer, 6, std::make_shared<LayerNorm>(512)): N clones of `layer` (its
// weights copied, as torch's deep copies), then `norm` when given.
class TransformerEncoder : public Cloneable<TransformerEncoder> {
 public:
  TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr);
  // src:[B,T,E] (batch_first); mask [T,T]; src_key_padding_mask [B,T] (true = ignore);
  // is_causal: a causal mask (when mask is undefined).
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  Tensor forward(const Tensor& src) override { return forward(src, {}, {}); }
  using Module::operator();
  std::string name() const override { return "TransformerEncoder"; }

  int64_t num_layers;
  std::shared_ptr<ModuleListOf<TransformerEncoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;  // null when not given
};

// torch.nn.TransformerDecoderLayer's keyword arguments (the encoder layer's; batch_first
// defaults to true here, False in PyTorch).
using TransformerDecoderLayerOptions = TransformerEncoderLayerOptions;

// Self-attention over tgt, cross-attention to memory, feed-forward; post-norm (norm1..3 after
// each residual add) or pre-norm (norm_first). Submodules: self_attn, multihead_attn, linear1,
// dropout, linear2, norm1, norm2, norm3, dropout1, dropout2, dropout3.
class TransformerDecoderLayer : public Cloneable<TransformerDecoderLayer> {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead,
                          TransformerDecoderLayerOptions options = {}, Generator* gen = nullptr);
  // tgt:[B,T,E], memory:[B,S,E] (batch_first). tgt_mask [T,T], memory_mask [T,S];
  // *_key_padding_mask [B,T] / [B,S] (true = ignore); tgt_is_causal: causal self-attention.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                 bool memory_is_causal = false);
  using Module::operator();
  std::string name() const override { return "TransformerDecoderLayer"; }

  std::string activation;  // "relu" | "gelu" | "gelu_tanh"
  bool norm_first;
  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  std::shared_ptr<Dropout> dropout1, dropout2, dropout3;

 private:
  Tensor sa_block(const Tensor& x, const Tensor& mask, const Tensor& kpm, bool is_causal);
  Tensor mha_block(const Tensor& x, const Tensor& mem, const Tensor& mask, const Tensor& kpm,
                   bool is_causal);
  Tensor ff_block(const Tensor& x);
};

// N clones of a decoder layer, then `norm` when given (torch.nn.TransformerDecoder).
class TransformerDecoder : public Cloneable<TransformerDecoder> {
 public:
  TransformerDecoder(const TransformerDecoderLayer& decoder_layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                 bool memory_is_causal = false);
  using Module::operator();
  std::string name() const override { return "TransformerDecoder"; }

  int64_t num_layers;
  std::shared_ptr<ModuleListOf<TransformerDecoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;  // null when not given
};

}  // namespace minidl::nn
