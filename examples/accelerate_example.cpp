// The README's Accelerator example, compiled so that it stays true: one training loop that runs
// on one process, as DataParallel, or as a DDP rank under minidl-run, chosen by the first
// argument (single | dp | ddp | auto), with gradient accumulation and an atomic checkpoint.
// Usage: accelerate_example [MODE] [CHECKPOINT]   e.g. minidl-run -n 2 accelerate_example
#include <cstdio>
#include <string>

#include "minidl.h"
using namespace minidl;

struct Net : nn::Cloneable<Net> {
  std::shared_ptr<nn::Linear> fc1, fc2;
  Net() {
    fc1 = std::make_shared<nn::Linear>(32, 64);
    fc2 = std::make_shared<nn::Linear>(64, 4);
    register_module("fc1", &fc1);
    register_module("fc2", &fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
};

int main(int argc, char** argv) try {
  const std::string mode = argc > 1 ? argv[1] : "auto";
  Accelerator acc({.mode = mode, .grad_accum_steps = 2, .seed = 1});

  // A learnable toy task: the label is the argmax of the first 4 features. x:[512,32] y:[512]
  manual_seed(0);
  Tensor x = randn({512, 32});
  Tensor y = argmax(x.narrow(1, 0, 4), 1);
  auto train_set = std::make_shared<data::TensorDataset>(x, y);

  manual_seed(1);  // the same initial weights on every rank
  auto model = std::make_shared<Net>();
  optim::AdamW opt(model->parameters(), 1e-2);
  acc.prepare(model, opt);  // device, AMP, DDP / DataParallel wrapper
  // A global batch of 64 in every mode: DDP ranks take 64 / ranks each.
  const int64_t batch = 64 / acc.num_processes();
  auto loader = acc.prepare_data_loader(train_set, {.batch_size = batch}, /*shuffle=*/true);

  double last = 0;
  for (int epoch = 1; epoch <= 10; ++epoch) {
    double sum = 0;
    int64_t n = 0;
    for (data::Example& b : *loader) {  // this process's share, on acc.device()
      acc.zero_grad();
      Tensor loss;
      {
        auto region = acc.autocast();
        loss = cross_entropy(acc.forward(b.data), b.target);
      }
      acc.backward(loss);  // / grad_accum_steps; DDP syncs once per window
      acc.clip_grad_norm_(1.0);
      acc.step();  // applied, skipped (AMP) or accumulating
      sum += loss.item<double>(), ++n;
    }
    last = acc.reduce(sum / double(n), "mean");  // over ranks
    acc.printf("epoch %d: loss %.4f\n", epoch, last);
  }
  if (argc > 2) acc.save_state(argv[2], {{"epoch", "10"}});
  acc.wait_for_everyone();
  acc.printf("accelerate_example: %s, %lld optimizer steps, final loss %.4f\n",
             acc.describe().c_str(), (long long)acc.optimizer_steps(), last);
  return last < 0.5 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "accelerate_example: error: %s\n", e.what());
  return 2;
}
