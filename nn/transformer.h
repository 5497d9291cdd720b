// GPT building blocks with nanoGPT's submodule names (so a nanoGPT state_dict maps 1:1):
// CausalSelfAttention (c_attn, c_proj, attn_dropout, resid_dropout) with an optional KV cache,
// MLP (c_fc, c_proj, dropout) and the pre-norm TransformerBlock (ln_1, attn, ln_2, mlp).
#pragma once
#include <memory>
#include <string>

#include "nn/linear_conv.h"
#include "nn/module.h"
#include "nn/normalization.h"

namespace minidl::nn {

// Keys and values of the positions seen so far: k, v:[B, n_head, T_cached, head_dim]
// (undefined when empty). Attention appends the new positions' keys/values to it. The tensors
// keep their autograd history (gradients flow into cached positions); generate under
// NoGradGuard. One cache per layer.
struct KVCache {
  Tensor k, v;
  int64_t size() const { return k.defined() ? k.size(2) : 0; }  // T_cached
  void reset() { k = v = Tensor(); }
};

struct AttentionOptions {
  // With a cache, the new positions attend to every cached position plus, causally, to the new
  // ones (query i of the block sees keys j <= T_cached + i); the cache is then extended.
  KVCache* cache = nullptr;
  // Extra mask, combined with the causal one; broadcasts to [B, n_head, T_new, T_cached + T_new]:
  // bool with true = attend (PyTorch's F.scaled_dot_product_attention convention) or floating
  // (added to the scores).
  Tensor attn_mask = {};
};

// Causal multi-head self-attention. x:[B,T,C] -> [B,T,C], C = n_embd = n_head * head_dim.
// c_attn: Linear(C, 3C) producing q, k, v (in that order along the last dim); c_proj:
// Linear(C, C). dropout applies to the attention probabilities (training only) and the output.
class CausalSelfAttention : public Cloneable<CausalSelfAttention> {
 public:
  CausalSelfAttention(int64_t n_embd, int64_t n_head, double dropout = 0.0, bool bias = true,
                      Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& x, const AttentionOptions& opt);
  using Module::operator();
  Tensor operator()(const Tensor& x, const AttentionOptions& opt) { return forward(x, opt); }
  std::string name() const override { return "CausalSelfAttention"; }

  int64_t n_embd, n_head, head_dim;
  double dropout;
  Generator* gen;
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> attn_dropout, resid_dropout;
};

// Feed-forward: c_fc Linear(C, 4C) -> GELU (approximate "tanh" like GPT-2, or "none") ->
// c_proj Linear(4C, C) -> dropout. x:[*, C] -> [*, C].
class MLP : public Cloneable<MLP> {
 public:
  MLP(int64_t n_embd, double dropout = 0.0, bool bias = true, Generator* gen = nullptr,
      std::string gelu_approximate = "tanh");
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "MLP"; }

  std::string gelu_approximate;
  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<Dropout> dropout;
};

// Pre-norm GPT block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)). x:[B,T,C] -> [B,T,C].
// bias=false drops the biases of every Linear and LayerNorm (nanoGPT's bias flag).
class TransformerBlock : public Cloneable<TransformerBlock> {
 public:
  TransformerBlock(int64_t n_embd, int64_t n_head, double dropout = 0.0, bool bias = true,
                   Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& x, const AttentionOptions& opt);
  using Module::operator();
  Tensor operator()(const Tensor& x, const AttentionOptions& opt) { return forward(x, opt); }
  std::string name() const override { return "TransformerBlock"; }
  // The block cut before its last residual add, for a stack that fuses that add with the next
  // block's ln_1 (nn::residual_layer_norm): x the residual stream, n1 = ln_1(x) (the caller's);
  // the block's output is h + m. Runs no hooks of the block itself.
  struct Parts {
    Tensor h, m;
  };
  Parts forward_parts(const Tensor& x, const Tensor& n1, const AttentionOptions& opt = {});

  std::shared_ptr<LayerNorm> ln_1;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<LayerNorm> ln_2;
  std::shared_ptr<MLP> mlp;
};

}  // namespace minidl::nn
