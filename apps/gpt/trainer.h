// The gpt app's training run: options (the small CPU recipe by default, --preset gpt2-124m for
// GPUs), data, model, AdamW with weight-decay groups, warm-up + cosine schedule, clipping,
// periodic evaluation, atomic checkpoints and bitwise resume, in any parallel layout.
#pragma once
#include <cstdint>
#include <string>

#include "apps/common/run_options.h"

namespace gpt {

struct Options : minidl::apps::RunOptions {
  std::string data = "data/moby-dick/data.txt";
  std::string preset;                        // "" (the flags below) | gpt2-124m
  int64_t block_size = 64, batch_size = 12;  // batch per process
  int64_t n_layer = 4, n_head = 4, n_embd = 128;
  double dropout = 0.0;
  double lr = 1e-3, min_lr = -1;  // min_lr < 0: lr / 10
  double beta1 = 0.9, beta2 = 0.99, weight_decay = 0.1, grad_clip = 1.0;
  int64_t max_iters = 2000, warmup_iters = 100, lr_decay_iters = -1;  // -1: max_iters
  int64_t eval_interval = 250, eval_iters = 20;
  bool pad_vocab = false;  // round the vocabulary up to a multiple of 64 (GPU-friendly shapes)
  Options() { log_interval = 10; }
  // Checks every value; throws minidl::Error with a one-line message.
  void validate() const;
};

struct Result {
  int64_t iters_run = 0, iter = 0;  // iterations run by this process / the final iteration
  double train_loss = 0, val_loss = 0;
  double tokens_per_s = 0;  // training tokens/s over all ranks, evaluation excluded
  double step_ms = 0;       // mean training step time
  double mfu = -1;          // model-FLOPs utilisation on CUDA (-1: not measured)
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
