// Guide example 5 (docs/guide.md): one training loop for one process, DataParallel or DDP, with
// AMP, gradient accumulation and a resumable checkpoint: the Accelerator (HF Accelerate's API)
// on the two-input model of ddp_multi_input.cpp.
// Usage: accelerator_loop DATA_DIR [MODE] [AMP] [MAX_STEPS]   MODE: auto|single|dp|ddp,
//        AMP: off|bf16|fp16; ddp: minidl-run -n 2 accelerator_loop DATA_DIR ddp
#include <cstdio>
#include <string>

#include "masked_net.h"
#include "minidl.h"
using namespace minidl;

using examples::MaskedNet;  // masked_net.h: forward(x, keep)

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : "data/mnist";
  const std::string mode = argc > 2 ? argv[2] : "auto";
  const std::string amp = argc > 3 ? argv[3] : "off";
  const int64_t max_steps = argc > 4 ? std::stoll(argv[4]) : 200;
  // [snippet:loop]
  Accelerator acc({.mode = mode, .amp = amp, .grad_accum_steps = 2, .seed = 0});
  manual_seed(0);
  auto model = std::make_shared<MaskedNet>();
  optim::AdamW opt(model->parameters(), 1e-3);
  acc.prepare(model, opt);  // device, AMP, the DDP or DataParallel wrapper

  auto train_set = std::make_shared<data::MnistDataset>(dir, data::MnistSplit::train);
  const int64_t batch = 64 / acc.num_processes();  // a global batch of 64 in every mode
  auto loader = acc.prepare_data_loader(train_set, {.batch_size = batch}, /*shuffle=*/true);

  int64_t micro = 0;
  double last_loss = 0;
  for (data::Example& b : *loader) {  // one epoch of this process's share, on acc.device()
    Tensor keep = gt(rand(b.data.shape()), 0.25).to(b.data.dtype()).to(b.data.device());
    acc.zero_grad();
    Tensor loss;
    {
      auto region = acc.autocast();  // the AMP level's autocast (a no-op with amp off)
      loss = cross_entropy(acc.forward(b.data, keep), b.target);
    }
    acc.backward(loss);  // scaled for fp16; DDP syncs once per accumulation window
    acc.clip_grad_norm_(1.0);
    acc.step();  // applied, skipped (fp16 overflow) or accumulating
    last_loss = loss.item<double>();
    if (++micro == max_steps) break;
  }
  acc.save_state("accelerator.ckpt", {{"micro_batches", std::to_string(micro)}});
  // [/snippet]
  // [snippet:resume]
  auto meta = acc.load_state("accelerator.ckpt");  // model, optimizer, AMP, RNG, loader epoch
  // [/snippet]
  const double mean_loss = acc.reduce(last_loss, "mean");
  acc.printf("accelerator_loop: %s, amp %s, %s micro-batches, %lld optimizer steps, loss %.4f\n",
             acc.describe().c_str(), amp.c_str(), meta.at("micro_batches").c_str(),
             (long long)acc.optimizer_steps(), mean_loss);
  return mean_loss < 1.5 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "accelerator_loop: error: %s\n", e.what());
  return 2;
}
