// A GPT-2 style language model written the way a user writes one with minidl's nn: token and
// learned position embeddings, N pre-norm TransformerBlocks, a final LayerNorm and an output
// head tied to the token embedding. Parameter names follow nanoGPT (wte, wpe, h.N.attn.c_attn...).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "minidl.h"
#include "nn/transformer.h"

namespace gpt {

using namespace minidl;

struct GPTConfig {
  int64_t block_size = 64;  // the longest context (positions)
  int64_t vocab_size = 85;
  int64_t n_layer = 4, n_head = 4, n_embd = 128;
  double dropout = 0.0;
  bool bias = true;  // biases in the Linears and LayerNorms, like GPT-2
  // The FLOPs of one training token (6N + 6·L·C·T, llm.c's estimate with N the non-embedding
  // plus token-embedding parameters), for the model-FLOPs utilisation on CUDA.
  double flops_per_token(int64_t num_params, int64_t seq_len) const;
  std::string describe() const;
};

class GPT : public nn::Cloneable<GPT> {
 public:
  explicit GPT(const GPTConfig& config);
  // idx:[B,T] int64 token ids (T <= block_size) -> logits [B,T,vocab_size].
  Tensor forward(const Tensor& idx) override;
  // Incremental decoding: idx:[B,T_new] continues the sequence held in `caches` (one per block,
  // empty at the start); positions count on from the cached length. Logits [B,T_new,vocab].
  Tensor forward(const Tensor& idx, std::vector<nn::KVCache>& caches);
  std::string name() const override { return "GPT"; }

  // GPT-2 init: every Linear and Embedding weight N(0, 0.02), biases 0, LayerNorms 1/0, and the
  // residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02/sqrt(2·n_layer)).
  void init_weights(Generator* gen = nullptr);

  GPTConfig config;
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::ModuleListOf<nn::TransformerBlock>> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> lm_head;  // weight tied to wte->weight

 private:
  Tensor run(const Tensor& idx, int64_t pos0, std::vector<nn::KVCache>* caches);
};

// Generates `new_tokens` tokens after `prompt` ([1,T0] int64) with a KV cache: one forward of
// the prompt, then one token per step (cost O(T) each). temperature > 0 scales the logits,
// top_k > 0 keeps the k most likely tokens; draws from `gen` (the same seed gives the same
// text). When the context would exceed block_size, the cache is rebuilt from the last
// block_size - 1 tokens. Returns [1, T0 + new_tokens].
Tensor generate(GPT& model, const Tensor& prompt, int64_t new_tokens, double temperature,
                int64_t top_k, Generator& gen);

}  // namespace gpt
