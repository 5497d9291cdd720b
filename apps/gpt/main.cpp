// gpt: trains a byte-level GPT on Moby-Dick (or any text file, or synthetic tokens: GPT-2 124M
// with --preset gpt2-124m --data synthetic) and samples from its checkpoints.
//   gpt [flags]                    train (see --help); -n 2 runs two DDP ranks; --tokenizer DIR
//                                  trains on BPE tokens instead of bytes
//   gpt sample --checkpoint DIR    continue a prompt with the trained model (KV cache)
//   gpt train-tokenizer --data FILE --vocab-size N --out DIR   learn GPT-2-style BPE merges
//   gpt encode --tokenizer DIR --input FILE --output FILE.bin  a nanoGPT token shard
//   gpt export --hf --checkpoint DIR --out model.safetensors  Hugging Face GPT-2 weights
// Errors are one line on stderr with exit code 1 (bad flags: 2); Ctrl-C stops after the current
// step with exit code 130, keeping the last complete checkpoint.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <set>

#include "apps/common/checkpoints.h"
#include "apps/common/ddp_features.h"
#include "apps/gpt/checkpoint.h"
#include "apps/gpt/hf_weights.h"
#include "apps/gpt/tokenizer_cmds.h"
#include "apps/gpt/trainer.h"
#include "tensor/profiler.h"

namespace {

struct SampleOptions {
  std::string checkpoint = "runs/gpt";
  std::string prompt = "Call me Ishmael.";
  int64_t tokens = 200, top_k = 0;
  double temperature = 0.8;
  uint64_t seed = 1;
  std::string device = "cpu";
};

int run_sample(const SampleOptions& s) {
  using namespace minidl;
  gpt::LoadedModel m = gpt::load_model(s.checkpoint, Device(s.device));
  std::vector<int64_t> ids = m.encode(s.prompt);
  MINIDL_CHECK(!ids.empty(), "--prompt must not be empty");
  Tensor prompt = tensor(ids).reshape({1, int64_t(ids.size())}).to(Device(s.device));
  Generator gen(s.seed);
  const auto t0 = std::chrono::steady_clock::now();
  Tensor out = gpt::generate(*m.model, prompt, s.tokens, s.temperature, s.top_k, gen);
  Tensor cpu = out.cpu().contiguous();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<int64_t> all(cpu.data_ptr<int64_t>(), cpu.data_ptr<int64_t>() + cpu.numel());
  std::string text = m.decode(all);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
  // The summary on stderr: stdout is the text alone.
  std::fprintf(stderr,
               "gpt sample: %lld tokens after a %zu-token prompt in %.3f s (%.1f tokens/s, KV "
               "cache, %d thread(s)), %s\n",
               (long long)s.tokens, ids.size(), secs, double(s.tokens) / std::max(secs, 1e-9),
               get_num_threads(), m.model->config.describe().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gpt::Options o;
  SampleOptions s;
  CLI::App app{
      "gpt: train a GPT with minidl (byte-level on a text, or on synthetic tokens), or "
      "sample from one",
      "gpt"};
  app.get_formatter()->column_width(34);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--data", o.data,
                 "training text file (tools/fetch-moby-dick.sh), or `synthetic`: uniform random "
                 "tokens from --seed (no tokenizer or corpus)")
      ->capture_default_str();
  app.add_option("--init-from", o.init_from,
                 "start from Hugging Face GPT-2 weights (model.safetensors of GPT2LMHeadModel; the "
                 "flags or --preset must give its shapes)");
  app.add_option("--tokenizer", o.tokenizer,
                 "train on BPE tokens: a directory with vocab.json + merges.txt (gpt "
                 "train-tokenizer, or GPT-2's own); --data may then be a .bin shard of gpt encode");
  auto* vocab = app.add_option("--vocab-size", o.vocab_size,
                               "vocabulary of --data synthetic (default 50257 with the preset, "
                               "else 256)")
                    ->check(CLI::PositiveNumber);
  app.add_option("--preset", o.preset,
                 "gpt2-124m: GPT-2 124M, 12 layers x 768, 12 heads, block 1024, a 50304-row "
                 "tied embedding (50257 tokens padded; a text uses only its bytes' rows), "
                 "124475904 parameters (explicit flags override)")
      ->check(CLI::IsMember({"gpt2-124m"}));
  auto* block = app.add_option("--block-size", o.block_size, "context length (position embeddings)")
                    ->capture_default_str();
  app.add_option("--seq-len", o.seq_len,
                 "tokens per training sequence, <= block size (default: the block size)")
      ->check(CLI::PositiveNumber);
  app.add_option("--batch-size", o.batch_size, "sequences per step and process")
      ->capture_default_str();
  auto* layers =
      app.add_option("--n-layer", o.n_layer, "transformer blocks")->capture_default_str();
  auto* heads = app.add_option("--n-head", o.n_head, "attention heads")->capture_default_str();
  auto* embd = app.add_option("--n-embd", o.n_embd, "embedding width")->capture_default_str();
  app.add_option("--dropout", o.dropout, "dropout probability")->capture_default_str();
  app.add_option("--lr", o.lr, "peak learning rate (AdamW)")->capture_default_str();
  app.add_option("--min-lr", o.min_lr, "final learning rate (default lr/10)");
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay of 2-D weights")
      ->capture_default_str();
  app.add_option("--beta2", o.beta2, "AdamW beta2")->capture_default_str();
  app.add_option("--grad-clip", o.grad_clip, "clip the gradient norm (0: off)")
      ->capture_default_str();
  app.add_option("--max-iters", o.max_iters, "training iterations")->capture_default_str();
  app.add_option("--warmup-iters", o.warmup_iters, "linear warm-up iterations")
      ->capture_default_str();
  app.add_option("--lr-decay-iters", o.lr_decay_iters, "cosine decay length (default max-iters)");
  app.add_option("--eval-interval", o.eval_interval, "iterations between evaluations/checkpoints")
      ->capture_default_str();
  app.add_option("--eval-iters", o.eval_iters, "batches per evaluation")->capture_default_str();
  app.add_flag("--cuda-graph", o.cuda_graph,
               "capture the training step in one CUDA graph after 3 eager steps and replay it "
               "(one process on a CUDA device; --amp off or bf16)");
  app.add_option("--residual-dtype", o.residual_dtype,
                 "f32 | bf16: the residual stream under --amp bf16 (f32: autocast's, as PyTorch; "
                 "bf16: llm.c's, half the stream's memory traffic)")
      ->capture_default_str();
  minidl::apps::add_run_flags(app, o);

  CLI::App* sample = app.add_subcommand("sample", "continue a prompt with a trained model");
  sample->add_option("--checkpoint", s.checkpoint, "checkpoint file or directory (its newest)")
      ->capture_default_str();
  sample->add_option("--prompt", s.prompt, "text to continue")->capture_default_str();
  sample->add_option("--tokens", s.tokens, "bytes to generate")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sample->add_option("--temperature", s.temperature, "softmax temperature (> 0)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sample->add_option("--top-k", s.top_k, "sample among the k likeliest bytes (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sample->add_option("--seed", s.seed, "sampling seed (same seed, same text)")
      ->capture_default_str();
  sample->add_option("--device", s.device, "cpu | cuda | cuda:N")->capture_default_str();

  gpt::TrainTokenizerOptions tt;
  CLI::App* train_tok = app.add_subcommand(
      "train-tokenizer",
      "learn GPT-2-style byte-level BPE on a text file (vocab.json + merges.txt)");
  train_tok->add_option("--data", tt.data, "text file to learn from")->required();
  train_tok
      ->add_option("--vocab-size", tt.vocab_size,
                   "tokens: 256 bytes + merges + <|endoftext|> (GPT-2: 50257)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(257), int64_t(1) << 31));
  train_tok->add_option("--out", tt.out, "directory for vocab.json and merges.txt")->required();
  train_tok->add_option("--max-bytes", tt.max_bytes, "learn on the first N bytes only (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  std::string export_checkpoint = "runs/gpt", export_out;
  CLI::App* export_cmd = app.add_subcommand(
      "export", "write a checkpoint's weights as Hugging Face GPT-2 (model.safetensors)");
  bool export_hf = false;
  export_cmd->add_flag("--hf", export_hf,
                       "Hugging Face GPT2LMHeadModel names and layouts (the only format)");
  export_cmd->add_option("--checkpoint", export_checkpoint, "checkpoint file or directory (newest)")
      ->capture_default_str();
  export_cmd->add_option("--out", export_out, "the model.safetensors to write")->required();
  gpt::EncodeOptions en;
  CLI::App* encode =
      app.add_subcommand("encode", "write a text file's token ids as a nanoGPT shard (.bin)");
  encode->add_option("--tokenizer", en.tokenizer, "directory with vocab.json and merges.txt")
      ->required();
  encode->add_option("--input", en.input, "text file")->required();
  encode
      ->add_option("--output", en.output,
                   "shard: little-endian uint16 ids (uint32 above 65,536 tokens)")
      ->required();
  encode->add_option("--format", en.format, "nanogpt (the ids alone) | llmc (llm.c's header first)")
      ->capture_default_str()
      ->check(CLI::IsMember({"nanogpt", "llmc"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "gpt: error: %s (see --help)\n", e.what());
    return 2;
  }
  for (auto [cmd, name] : {std::pair{train_tok, "train-tokenizer"}, std::pair{encode, "encode"}})
    if (cmd->parsed()) {
      try {
        return cmd == train_tok ? gpt::run_train_tokenizer(tt) : gpt::run_encode(en);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gpt %s: error: %s\n", name, e.what());
        return 1;
      }
    }
  if (export_cmd->parsed()) {
    try {
      gpt::LoadedModel m = gpt::load_model(export_checkpoint, minidl::Device("cpu"));
      gpt::save_hf_weights(*m.model, export_out);
      std::printf("gpt export: %s (iteration %lld, %s) -> %s (Hugging Face GPT-2 layout)\n",
                  export_checkpoint.c_str(), (long long)m.iter, m.model->config.describe().c_str(),
                  export_out.c_str());
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpt export: error: %s\n", e.what());
      return 1;
    }
  }
  if (sample->parsed()) {
    try {
      return run_sample(s);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpt sample: error: %s\n", e.what());
      return 1;
    }
  }
  std::set<std::string> given;  // flags given explicitly keep their values under --preset
  for (auto* opt : {block, layers, heads, embd, vocab})
    if (opt->count()) given.insert(opt->get_name());
  o.apply_preset(given);
  if (std::string why = minidl::apps::amp_flags_error(o); !why.empty()) {
    std::fprintf(stderr, "gpt: error: %s\n", why.c_str());
    return 2;
  }
  if (std::string why = minidl::apps::ddp_flags_error(o); !why.empty()) {
    std::fprintf(stderr, "gpt: error: %s\n", why.c_str());
    return 2;
  }
  if (int rc = 0; minidl::apps::self_launch_if_requested(o, "gpt", argc, argv, rc)) return rc;
  try {
    minidl::apps::install_stop_handlers();
    gpt::Result r = gpt::run_training(o);
    if (!r.main_rank) return r.interrupted ? 130 : 0;
    if (r.interrupted) {
      std::fprintf(stderr, "gpt: interrupted at iteration %lld; %s\n", (long long)r.iter,
                   o.checkpoint_dir.empty()
                       ? "no checkpoint directory was given"
                       : ("the last complete checkpoint is in " + o.checkpoint_dir).c_str());
      return 130;
    }
    if (minidl::profiler::enabled()) {  // MINIDL_PROFILE=1: the op table before the summary
      std::printf("op profile, rank 0 (all iterations):\n%s", minidl::profiler::table().c_str());
      if (r.dispatches_per_step >= 0)
        std::printf(
            "kernel dispatches per training step: %lld (the last step, zero_grad to "
            "optimizer step; the first step: %lld)\n",
            (long long)r.dispatches_per_step, (long long)r.dispatches_first_step);
      if (r.host_reads_per_step >= 0)
        std::printf(
            "host reads per training step: %lld (item() and tolist() calls: each waits for "
            "the device)\n",
            (long long)r.host_reads_per_step);
    }
    char mfu[48] = "";
    if (r.mfu >= 0) std::snprintf(mfu, sizeof mfu, ", MFU %.1f%%", 100.0 * r.mfu);
    std::printf(
        "gpt: val loss %.4f, train loss %.4f after %lld iterations; %.0f tokens/s, step %.1f ms"
        "%s (%s), peak memory %s%s%s%s%s\n",
        r.val_loss, r.train_loss, (long long)r.iter, r.tokens_per_s, r.step_ms, mfu,
        r.layout.c_str(), r.peak_memory.c_str(), r.amp.empty() ? "" : "; ", r.amp.c_str(),
        r.ddp_features.empty() ? "" : "; ", r.ddp_features.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt: error: %s\n", e.what());
    return 1;
  }
}
