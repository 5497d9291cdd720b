// TransformerEncoder / TransformerDecoderLayer / TransformerDecoder, following torch.nn's
// forward paths (post-norm or pre-norm; dropout1/2/3 after the three blocks).
#include "nn/transformer_stack.h"

#include "autograd/ops.h"

namespace minidl::nn {
namespace {
template <class Layer>
std::shared_ptr<ModuleListOf<Layer>> clones(const Layer& layer, int64_t n, const char* who) {
  MINIDL_CHECK(n >= 1, who, ": num_layers must be at least 1, got ", n);
  auto list = std::make_shared<ModuleListOf<Layer>>();
  for (int64_t i = 0; i < n; ++i) list->push_back(std::static_pointer_cast<Layer>(layer.clone()));
  return list;
}
}  // namespace

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t n,
                                       std::shared_ptr<LayerNorm> final_norm)
    : num_layers(n),
      layers(clones(encoder_layer, n, "TransformerEncoder")),
      norm(std::move(final_norm)) {
  register_module("layers", &layers);
  if (norm) register_module("norm", &norm);
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask,
                                   const Tensor& src_key_padding_mask, bool is_causal) {
  Tensor x = src;
  for (const auto& layer : *layers) x = layer->forward(x, mask, src_key_padding_mask, is_causal);
  return norm ? (*norm)(x) : x;
}

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead,
                                                 TransformerDecoderLayerOptions o, Generator* gen)
    : activation(std::move(o.activation)), norm_first(o.norm_first) {
  const double p = o.dropout, eps = o.layer_norm_eps;
  MINIDL_CHECK(activation == "relu" || activation == "gelu" || activation == "gelu_tanh",
               "TransformerDecoderLayer: activation should be relu/gelu/gelu_tanh, not ",
               activation);
  const MultiheadAttentionOptions mha{.dropout = p, .batch_first = o.batch_first};
  self_attn = std::make_shared<MultiheadAttention>(d_model, nhead, mha, gen);
  multihead_attn = std::make_shared<MultiheadAttention>(d_model, nhead, mha, gen);
  linear1 = std::make_shared<Linear>(d_model, o.dim_feedforward, true, gen);
  dropout = std::make_shared<Dropout>(p, gen);
  linear2 = std::make_shared<Linear>(o.dim_feedforward, d_model, true, gen);
  norm1 = std::make_shared<LayerNorm>(Shape{d_model}, LayerNormOptions{.eps = eps});
  norm2 = std::make_shared<LayerNorm>(Shape{d_model}, LayerNormOptions{.eps = eps});
  norm3 = std::make_shared<LayerNorm>(Shape{d_model}, LayerNormOptions{.eps = eps});
  dropout1 = std::make_shared<Dropout>(p, gen);
  dropout2 = std::make_shared<Dropout>(p, gen);
  dropout3 = std::make_shared<Dropout>(p, gen);
  register_module("self_attn", &self_attn);
  register_module("multihead_attn", &multihead_attn);
  register_module("linear1", &linear1);
  register_module("dropout", &dropout);
  register_module("linear2", &linear2);
  register_module("norm1", &norm1);
  register_module("norm2", &norm2);
  register_module("norm3", &norm3);
  register_module("dropout1", &dropout1);
  register_module("dropout2", &dropout2);
  register_module("dropout3", &dropout3);
}

Tensor TransformerDecoderLayer::sa_block(const Tensor& x, const Tensor& mask, const Tensor& kpm,
                                         bool is_causal) {
  return (*dropout1)(self_attn->forward(x, x, x, kpm, false, mask, true, is_causal).output);
}

Tensor TransformerDecoderLayer::mha_block(const Tensor& x, const Tensor& mem, const Tensor& mask,
                                          const Tensor& kpm, bool is_causal) {
  return (*dropout2)(
      multihead_attn->forward(x, mem, mem, kpm, false, mask, true, is_causal).output);
}

Tensor TransformerDecoderLayer::ff_block(const Tensor& x) {
  Tensor h = (*linear1)(x);
  h = activation == "relu" ? relu(h) : gelu(h, activation == "gelu_tanh" ? "tanh" : "none");
  return (*dropout3)((*linear2)((*dropout)(h)));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory,
                                        const Tensor& tgt_mask, const Tensor& memory_mask,
                                        const Tensor& tgt_key_padding_mask,
                                        const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                        bool memory_is_causal) {
  Tensor x = tgt;
  if (norm_first) {
    x = x + sa_block((*norm1)(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal);
    x = x + mha_block((*norm2)(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal);
    x = x + ff_block((*norm3)(x));
  } else {
    x = (*norm1)(x + sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal));
    x = (*norm2)(x + mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal));
    x = (*norm3)(x + ff_block(x));
  }
  return x;
}

TransformerDecoder::TransformerDecoder(const TransformerDecoderLayer& decoder_layer, int64_t n,
                                       std::shared_ptr<LayerNorm> final_norm)
    : num_layers(n),
      layers(clones(decoder_layer, n, "TransformerDecoder")),
      norm(std::move(final_norm)) {
  register_module("layers", &layers);
  if (norm) register_module("norm", &norm);
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                   const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                   bool memory_is_causal) {
  Tensor x = tgt;
  for (const auto& layer : *layers)
    x = layer->forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                       memory_key_padding_mask, tgt_is_causal, memory_is_causal);
  return norm ? (*norm)(x) : x;
}

}  // namespace minidl::nn
