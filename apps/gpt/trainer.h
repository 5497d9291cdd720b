// The gpt app's training run: options (the small CPU recipe by default, --preset gpt2-124m for
// GPUs), text or synthetic data, model, AdamW with weight-decay groups, warm-up + cosine
// schedule, clipping, periodic evaluation, atomic checkpoints and bitwise resume, in any layout.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "apps/common/run_options.h"
#include "apps/gpt/model.h"
#include "apps/gpt/text_data.h"

namespace gpt {

struct Options : minidl::apps::RunOptions {
  std::string data = "data/moby-dick/data.txt";  // a text file, or "synthetic"
  std::string tokenizer;   // --tokenizer DIR: BPE tokens (data: a text file or a .bin shard)
  std::string init_from;   // --init-from FILE: Hugging Face GPT-2 weights (model.safetensors)
  std::string preset;      // "" (the flags below) | gpt2-124m
  int64_t vocab_size = 0;  // the vocabulary of --data synthetic (0: the preset's 50257, or 256)
  int64_t block_size = 64, batch_size = 12;  // the model's context; batch per process
  int64_t seq_len = 0;  // tokens per training sequence (0: block_size), like llm.c's -t
  int64_t n_layer = 4, n_head = 4, n_embd = 128;
  double dropout = 0.0;
  double lr = 1e-3, min_lr = -1;  // min_lr < 0: lr / 10
  double beta1 = 0.9, beta2 = 0.99, weight_decay = 0.1, grad_clip = 1.0;
  int64_t max_iters = 2000, warmup_iters = 100, lr_decay_iters = -1;  // -1: max_iters
  int64_t eval_interval = 250, eval_iters = 20;
  int64_t padded_vocab_size = 0;  // rows of wte/lm_head (0: the vocabulary; the preset: 50304)
  // --cuda-graph: after 3 eager steps, the whole step (forward and loss under autocast,
  // backward, clip_grad_norm_, AdamW) captured once in a CUDA graph and replayed.
  bool cuda_graph = false;
  // --residual-dtype bf16 (with --amp bf16): the residual stream in bf16 (GPT::residual_dtype).
  std::string residual_dtype = "f32";
  Options() { log_interval = 10; }
  bool synthetic() const { return data == "synthetic"; }
  int64_t sequence_length() const { return seq_len > 0 ? seq_len : block_size; }
  // --preset gpt2-124m: GPT-2 124M's shapes (gpt2_124m_config()) for the flags not in `given`
  // ("--block-size", "--n-layer", "--n-head", "--n-embd", "--vocab-size": set explicitly), and
  // its 50304-row embedding. Does nothing without a preset.
  void apply_preset(const std::set<std::string>& given);
  // Checks every value; throws minidl::Error with a one-line message.
  void validate() const;
};

// The run's data: --data synthetic (uniform tokens over vocab_size, by default 50257 with the
// preset and 256 without) or the text file --data names.
std::unique_ptr<TokenData> open_data(const Options& o);

// The model run_training builds for these options over data with `vocab_size` real tokens.
GPTConfig model_config(const Options& o, int64_t vocab_size);

struct Result {
  int64_t iters_run = 0, iter = 0;  // iterations run by this process / the final iteration
  double train_loss = 0, val_loss = 0;
  double tokens_per_s = 0;  // training tokens/s over all ranks, evaluation excluded
  double step_ms = 0;       // mean training step time
  double mfu = -1;          // model-FLOPs utilisation on CUDA (-1: not measured)
  // MINIDL_PROFILE=1: ops dispatched by the last training step (zero_grad to the optimizer
  // step; the op graph, the same on every device), and by the first (with lazy state set-up).
  int64_t dispatches_per_step = -1, dispatches_first_step = -1;
  int64_t host_reads_per_step = -1;  // item()/tolist() calls in the last step (MINIDL_PROFILE)
  std::string layout, peak_memory, amp;
  std::string ddp_features;  // "" or apps::ddp_features_summary (--sync-bn, --zero1, --comm-hook)
  bool interrupted = false, main_rank = true;
  int64_t skipped_steps = 0;
};

// The learning rate at iteration `it` (0-based): linear warm-up to lr over warmup_iters, then
// cosine decay to min_lr at lr_decay_iters, min_lr after (nanoGPT's get_lr).
double lr_at(const Options& o, int64_t it);

Result run_training(const Options& o);

}  // namespace gpt
