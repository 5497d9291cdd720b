// A GPT-2 style language model written the way a user writes one with minidl's nn: token and
// learned position embeddings, N pre-norm TransformerBlocks, a final LayerNorm and an output
// head tied to the token embedding (padded rows as in llm.c). Names follow nanoGPT (wte, h.N...).
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
  int64_t vocab_size = 85;  // the real vocabulary: the logits the loss and sampling see
  // Rows of wte / lm_head (0: vocab_size). GPT-2 124M pads 50257 to 50304 (llm.c's Vp) for
  // matmul-friendly shapes; forward() returns only the first vocab_size logits.
  int64_t padded_vocab_size = 0;
  int64_t n_layer = 4, n_head = 4, n_embd = 128;
  double dropout = 0.0;
  bool bias = true;  // biases in the Linears and LayerNorms, like GPT-2
  int64_t padded_vocab() const { return padded_vocab_size > 0 ? padded_vocab_size : vocab_size; }
  // The parameter count of the GPT this config builds, from the shapes alone (llm.c's
  // definition: the padded wte, wpe, the blocks and ln_f; the tied head counted once).
  int64_t num_parameters() const;
  // The FLOPs of one training token, llm.c's gpt2_estimate_mfu: 6·N + 6·L·C·T with N all
  // parameters (num_parameters()), for the model-FLOPs utilisation on CUDA.
  double flops_per_token(int64_t seq_len) const;
  std::string describe() const;
};

// GPT-2 124M (llm.c's gpt2_124M): 12 layers x 768, 12 heads, block 1024, the 50257 tokens of
// GPT-2's tokenizer padded to 50304 rows; 124,475,904 parameters.
GPTConfig gpt2_124m_config();

class GPT : public nn::Cloneable<GPT> {
 public:
  explicit GPT(const GPTConfig& config);
  // idx:[B,T] int64 token ids (T <= block_size) -> logits [B,T,vocab_size]: with a padded
  // vocabulary, a view of the first vocab_size columns of the [B,T,padded] head output.
  Tensor forward(const Tensor& idx) override;
  // Incremental decoding: idx:[B,T_new] continues the sequence held in `caches` (one per block,
  // empty at the start); positions count on from the cached length. Logits [B,T_new,vocab].
  Tensor forward(const Tensor& idx, std::vector<nn::KVCache>& caches);
  // nanoGPT's model(idx, targets): targets:[B,T] int64 -> the 0-d mean loss (f32; f64 for an
  // f64 model) through nn::functional::fused_cross_entropy_ on the padded [B,T,Vp] head output
  // (no slice, no f32 copy; in training the logits' gradient is written over them). Reached by
  // module(idx, targets) and acc.forward(idx, targets) (forward_inputs).
  Tensor forward(const Tensor& idx, const Tensor& targets);
  std::string name() const override { return "GPT"; }

  // GPT-2 init: every Linear and Embedding weight N(0, 0.02), biases 0, LayerNorms 1/0, and the
  // residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02/sqrt(2·n_layer)).
  void init_weights(Generator* gen = nullptr);

  GPTConfig config;
  // The residual stream's dtype under autocast: f32 (autocast's, as PyTorch runs it), or the
  // autocast dtype (llm.c's bf16 stream: the embeddings' sum cast once, every residual add and
  // its gradient in 16 bits; half the stream's memory traffic). A run option (gpt
  // --residual-dtype), not part of the checkpointed config. Outside autocast: always x's own.
  DType residual_dtype = kFloat32;
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::ModuleListOf<nn::TransformerBlock>> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> lm_head;  // weight tied to wte->weight

 private:
  // padded: the [B,T,Vp] head output; otherwise the view of its first vocab_size columns.
  Tensor run(const Tensor& idx, int64_t pos0, std::vector<nn::KVCache>* caches,
             bool padded = false);
};

// Generates `new_tokens` tokens after `prompt` ([1,T0] int64) with a KV cache: one forward of
// the prompt, then one token per step (cost O(T) each). temperature > 0 scales the logits,
// top_k > 0 keeps the k most likely tokens; draws from `gen` (the same seed gives the same
// text). When the context would exceed block_size, the cache is rebuilt from the last
// block_size - 1 tokens. Returns [1, T0 + new_tokens].
Tensor generate(GPT& model, const Tensor& prompt, int64_t new_tokens, double temperature,
                int64_t top_k, Generator& gen);

}  // namespace gpt
