// The gpt app's options beyond parsing (trainer.h): the preset, their validation, the learning
// rate schedule, the data choice and the model config they make.
#include <cmath>
#include <memory>
#include <numbers>

#include "apps/gpt/bpe_data.h"
#include "apps/gpt/trainer.h"
#include "tensor/error.h"

namespace gpt {

double lr_at(const Options& o, int64_t it) {
  const double min_lr = o.min_lr < 0 ? o.lr / 10 : o.min_lr;
  const int64_t decay = o.lr_decay_iters < 0 ? o.max_iters : o.lr_decay_iters;
  if (it < o.warmup_iters) return o.lr * double(it + 1) / double(o.warmup_iters + 1);
  if (it > decay) return min_lr;
  const double ratio =
      decay > o.warmup_iters ? double(it - o.warmup_iters) / double(decay - o.warmup_iters) : 1.0;
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return min_lr + coeff * (o.lr - min_lr);
}

void Options::apply_preset(const std::set<std::string>& given) {
  if (preset.empty()) return;
  MINIDL_CHECK(preset == "gpt2-124m", "--preset must be gpt2-124m, got '", preset, "'");
  const GPTConfig c = gpt2_124m_config();  // explicit flags keep their values
  if (!given.count("--block-size")) block_size = c.block_size;
  if (!given.count("--n-layer")) n_layer = c.n_layer;
  if (!given.count("--n-head")) n_head = c.n_head;
  if (!given.count("--n-embd")) n_embd = c.n_embd;
  if (!given.count("--vocab-size") && synthetic()) vocab_size = c.vocab_size;
  padded_vocab_size = c.padded_vocab_size;
}

std::unique_ptr<TokenData> open_data(const Options& o) {
  if (o.synthetic())
    return std::make_unique<SyntheticTokens>(o.vocab_size > 0 ? o.vocab_size : 256,
                                             o.sequence_length());
  if (!o.tokenizer.empty())
    return std::make_unique<BPETextDataset>(o.data, o.tokenizer, o.sequence_length());
  return std::make_unique<TextDataset>(o.data, o.sequence_length());
}

GPTConfig model_config(const Options& o, int64_t vocab_size) {
  GPTConfig cfg;
  cfg.block_size = o.block_size;
  cfg.vocab_size = vocab_size;
  cfg.padded_vocab_size = o.padded_vocab_size;
  MINIDL_CHECK(cfg.padded_vocab() >= vocab_size, "a vocabulary of ", vocab_size,
               " tokens does not fit the ", o.padded_vocab_size, " embedding rows of --preset ",
               o.preset);
  cfg.n_layer = o.n_layer, cfg.n_head = o.n_head, cfg.n_embd = o.n_embd;
  cfg.dropout = o.dropout;
  return cfg;
}

void Options::validate() const {
  MINIDL_CHECK(block_size >= 1 && batch_size >= 1, "--block-size and --batch-size must be >= 1");
  MINIDL_CHECK(seq_len >= 0 && seq_len <= block_size, "--seq-len ", seq_len,
               " must be in [1, --block-size ", block_size, "]");
  MINIDL_CHECK(n_layer >= 1 && n_head >= 1 && n_embd >= 1, "--n-layer/--n-head/--n-embd >= 1");
  MINIDL_CHECK(n_embd % n_head == 0, "--n-embd ", n_embd, " must be a multiple of --n-head ",
               n_head);
  MINIDL_CHECK(lr > 0, "--lr must be > 0, got ", lr);
  MINIDL_CHECK(max_iters >= 0 && eval_interval >= 1 && eval_iters >= 1,
               "--max-iters >= 0, --eval-interval >= 1 and --eval-iters >= 1");
  MINIDL_CHECK(dropout >= 0 && dropout < 1, "--dropout must be in [0, 1), got ", dropout);
  MINIDL_CHECK(vocab_size >= 0, "--vocab-size must be >= 1, got ", vocab_size);
  MINIDL_CHECK(!synthetic() || tokenizer.empty(),
               "--tokenizer encodes a text file (or reads its .bin shard); --data synthetic has "
               "no text");
  MINIDL_CHECK(synthetic() || vocab_size == 0,
               "--vocab-size sets the vocabulary of --data synthetic; the vocabulary of the text '",
               data, "' is its bytes");
  MINIDL_CHECK(residual_dtype == "f32" || residual_dtype == "bf16",
               "--residual-dtype must be f32 or bf16, got '", residual_dtype, "'");
  MINIDL_CHECK(residual_dtype == "f32" || amp == "bf16",
               "--residual-dtype bf16 keeps the residual stream in autocast's bf16: it needs "
               "--amp bf16 (got --amp ",
               amp, ")");
  if (cuda_graph) {
    MINIDL_CHECK(device.rfind("cuda", 0) == 0,
                 "--cuda-graph needs --device cuda (a CUDA graph replays GPU work; got --device ",
                 device, ")");
    MINIDL_CHECK(amp == "off" || amp == "bf16",
                 "--cuda-graph runs with --amp off or bf16 (fp16's GradScaler reads the "
                 "inf/NaN check on the host every step); got --amp ",
                 amp);
    MINIDL_CHECK(dropout == 0,
                 "--cuda-graph replays one captured step: dropout's random stream is not "
                 "captured (got --dropout ",
                 dropout, ")");
    MINIDL_CHECK(nproc <= 1 && mode != "dp" && fsdp == "off" && !zero1,
                 "--cuda-graph captures one process's step on one device: it does not run with "
                 "-n > 1, --mode dp, --fsdp or --zero1");
  }
}

}  // namespace gpt
