// The GPT model (model.h): embeddings, pre-norm blocks, tied head, GPT-2 init, and
// KV-cached generation.
#include "apps/gpt/model.h"

#include <cmath>
#include <limits>

#include "tensor/variants.h"

namespace gpt {

int64_t GPTConfig::num_parameters() const {
  const int64_t C = n_embd, b = bias ? 1 : 0;
  // Per block: ln_1 and ln_2 (weight, bias if any), attn.c_attn C x 3C, attn.c_proj C x C,
  // mlp.c_fc C x 4C, mlp.c_proj 4C x C (plus their biases): 12·C² + 13·C with biases.
  const int64_t block = 2 * (C + b * C) + 12 * C * C + b * (3 * C + C + 4 * C + C);
  // wte (padded rows; lm_head is the same tensor), wpe, the blocks, ln_f (always with bias).
  return padded_vocab() * C + block_size * C + n_layer * block + 2 * C;
}

double GPTConfig::flops_per_token(int64_t seq_len) const {
  // 6 FLOPs per parameter and token (forward 2, backward 4) plus attention's 6·L·C·T.
  return 6.0 * double(num_parameters()) + 6.0 * double(n_layer) * double(n_embd) * double(seq_len);
}

std::string GPTConfig::describe() const {
  std::string s = std::to_string(n_layer) + " layers x " + std::to_string(n_embd) + ", " +
                  std::to_string(n_head) + " heads, block " + std::to_string(block_size) +
                  ", vocab " + std::to_string(vocab_size);
  if (padded_vocab() != vocab_size) s += " (padded to " + std::to_string(padded_vocab()) + ")";
  return s;
}

GPTConfig gpt2_124m_config() {
  GPTConfig c;
  c.block_size = 1024, c.vocab_size = 50257, c.padded_vocab_size = 50304;
  c.n_layer = 12, c.n_head = 12, c.n_embd = 768;
  return c;
}

GPT::GPT(const GPTConfig& c) : config(c) {
  MINIDL_CHECK(c.n_embd % c.n_head == 0, "GPT: n_embd ", c.n_embd, " is not a multiple of n_head ",
               c.n_head);
  MINIDL_CHECK(c.block_size > 0 && c.vocab_size > 0 && c.n_layer > 0,
               "GPT: block_size, vocab_size and n_layer must be positive");
  MINIDL_CHECK(c.padded_vocab() >= c.vocab_size, "GPT: padded_vocab_size ", c.padded_vocab_size,
               " is smaller than vocab_size ", c.vocab_size);
  wte = std::make_shared<nn::Embedding>(c.padded_vocab(), c.n_embd);
  wpe = std::make_shared<nn::Embedding>(c.block_size, c.n_embd);
  drop = std::make_shared<nn::Dropout>(c.dropout);
  h = std::make_shared<nn::ModuleListOf<nn::TransformerBlock>>();
  for (int64_t i = 0; i < c.n_layer; ++i)
    h->push_back(std::make_shared<nn::TransformerBlock>(c.n_embd, c.n_head, c.dropout, c.bias));
  ln_f = std::make_shared<nn::LayerNorm>(c.n_embd);
  lm_head = std::make_shared<nn::Linear>(c.n_embd, c.padded_vocab(), /*bias=*/false);
  register_module("wte", &wte);
  register_module("wpe", &wpe);
  register_module("drop", &drop);
  register_module("h", &h);
  register_module("ln_f", &ln_f);
  register_module("lm_head", &lm_head);
  init_weights();
  lm_head->weight = wte->weight;  // weight tying: one tensor, two uses
}

void GPT::init_weights(Generator* gen) {
  NoGradGuard no_grad;
  const double proj_std = 0.02 / std::sqrt(2.0 * double(config.n_layer));
  for (const auto& [name, p] : named_parameters()) {
    Tensor t = p;
    const bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
    const bool is_norm = name.find("ln_") != std::string::npos;
    if (is_norm)
      is_bias ? nn::init::zeros_(t) : nn::init::ones_(t);
    else if (is_bias)
      nn::init::zeros_(t);
    else if (name.size() >= 13 && name.compare(name.size() - 13, 13, "c_proj.weight") == 0)
      nn::init::normal_(t, 0.0, proj_std, gen);
    else
      nn::init::normal_(t, 0.0, 0.02, gen);
  }
}

Tensor GPT::run(const Tensor& idx, int64_t pos0, std::vector<nn::KVCache>* caches, bool padded) {
  MINIDL_CHECK(idx.dim() == 2 && idx.dtype() == kInt64, "GPT: expected token ids [B,T] int64, got ",
               idx.shape_str(), " ", dtype_name(idx.dtype()));
  const int64_t T = idx.size(1);
  MINIDL_CHECK(pos0 + T <= config.block_size, "GPT: a sequence of ", pos0 + T,
               " tokens is longer than block_size ", config.block_size);
  Tensor pos = arange(pos0, pos0 + T, 1, kInt64, idx.device());  // [T]
  Tensor x = (*drop)((*wte)(idx) + (*wpe)(pos));                 // [B,T,C]
  const DeviceType dev = idx.device().type;
  if (residual_dtype != x.dtype() && amp::is_autocast_enabled(dev) &&
      amp::get_autocast_dtype(dev) == residual_dtype)
    x = x.to(residual_dtype);  // the 16-bit residual stream (llm.c's)
  const auto options = [&](int64_t i) {
    return caches ? nn::AttentionOptions{.cache = &(*caches)[size_t(i)]} : nn::AttentionOptions{};
  };
  bool hooked = false;  // FSDP gathers a block's parameters in its call's hooks
  for (int64_t i = 0; i < h->size(); ++i) hooked = hooked || (*h)[i]->has_forward_hooks();
  Tensor normed;  // ln_f(x) [B,T,C], its rows in the autocast dtype under autocast
  if (hooked || !variants::fused("residual_layer_norm")) {
    for (int64_t i = 0; i < h->size(); ++i) {
      auto& block = *(*h)[i];
      x = caches ? block.forward(x, options(i)) : block(x);  // through the call: hooks run
    }
    normed = nn::residual_layer_norm(x, Tensor(), *ln_f, true).out;
  } else {
    // Each block's last residual add and the next LayerNorm (ln_1, then ln_f) as one node.
    nn::ResidualNorm r =
        nn::residual_layer_norm(x, Tensor(), h->size() > 0 ? *(*h)[0]->ln_1 : *ln_f, true);
    for (int64_t i = 0; i < h->size(); ++i) {
      const nn::TransformerBlock::Parts p = (*h)[i]->forward_parts(r.sum, r.out, options(i));
      r = nn::residual_layer_norm(p.h, p.m, i + 1 < h->size() ? *(*h)[i + 1]->ln_1 : *ln_f, true);
    }
    normed = r.out;
  }
  Tensor logits = (*lm_head)(normed);  // [B,T,Vp]
  if (padded) return logits;
  // The padded columns (tokens that never occur) stay out of the loss and sampling: a view of
  // the real ones, no copy here (cross_entropy's reshape copies the [B·T,V] rows once).
  const int64_t V = config.vocab_size;
  return logits.size(-1) == V ? logits : logits.slice(-1, 0, V);  // [B,T,V]
}

Tensor GPT::forward(const Tensor& idx) {
  return run(idx, 0, nullptr);
}

Tensor GPT::forward(const Tensor& idx, const Tensor& targets) {
  MINIDL_CHECK(targets.defined() && targets.dtype() == kInt64 && targets.shape() == idx.shape(),
               "GPT: expected targets of the token ids' shape ", idx.shape_str(), " int64, got ",
               targets.defined() ? targets.shape_str() : "undefined",
               targets.defined() ? " " + std::string(dtype_name(targets.dtype())) : "");
  // The loss over the real vocab_size columns of the padded [B,T,Vp] logits, in one pass.
  return nn::functional::fused_cross_entropy_(run(idx, 0, nullptr, /*padded=*/true), targets,
                                              config.vocab_size);
}

Tensor GPT::forward(const Tensor& idx, std::vector<nn::KVCache>& caches) {
  if (caches.empty()) caches.resize(size_t(h->size()));
  MINIDL_CHECK(int64_t(caches.size()) == h->size(), "GPT: ", caches.size(), " KV caches for ",
               h->size(), " blocks");
  const int64_t pos0 = caches[0].k.defined() ? caches[0].k.size(2) : 0;
  return run(idx, pos0, &caches);
}

Tensor generate(GPT& model, const Tensor& prompt, int64_t new_tokens, double temperature,
                int64_t top_k, Generator& gen) {
  MINIDL_CHECK(prompt.dim() == 2 && prompt.size(0) == 1 && prompt.size(1) >= 1,
               "generate: the prompt must be [1,T] with T >= 1, got ", prompt.shape_str());
  MINIDL_CHECK(temperature > 0, "generate: temperature must be > 0, got ", temperature);
  NoGradGuard no_grad;
  model.eval();
  const int64_t block = model.config.block_size;
  Tensor seq = prompt;  // [1,T]
  std::vector<nn::KVCache> caches;
  // The prompt's last block - 1 tokens fill the cache; each new token then costs O(T).
  Tensor context =
      seq.size(1) > block - 1 ? seq.slice(1, seq.size(1) - (block - 1), seq.size(1)) : seq;
  Tensor logits = model.forward(context, caches);  // [1,T,V]
  for (int64_t n = 0; n < new_tokens; ++n) {
    Tensor last = logits.select(1, logits.size(1) - 1).to(kFloat32);  // [1,V]
    last = div(last, temperature);
    if (top_k > 0 && top_k < last.size(1)) {
      Tensor kth = topk(last, top_k, -1).first.slice(1, top_k - 1, top_k);  // [1,1]
      last = masked_fill(last, lt(last, kth), -std::numeric_limits<double>::infinity());
    }
    Tensor next = multinomial(softmax(last, -1), 1, false, &gen);  // [1,1]
    seq = cat({seq, next}, 1);
    if (caches[0].k.size(2) >= block) {  // the context is full: restart from the last tokens
      caches.clear();
      logits = model.forward(seq.slice(1, seq.size(1) - (block - 1), seq.size(1)), caches);
    } else {
      logits = model.forward(next, caches);
    }
  }
  return seq;
}

}  // namespace gpt
