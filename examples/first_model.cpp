// Guide example 1 (docs/guide.md): a first model on the offline digits, one process: a module
// with registered layers, the DataLoader loop, AdamW with a cosine schedule, evaluation under
// NoGradGuard, weights saved as safetensors and loaded back.
// Usage: first_model DATA_DIR [MAX_STEPS]   (DATA_DIR: MNIST IDX files, e.g. data/mnist)
#include <cstdio>
#include <string>

#include "minidl.h"
using namespace minidl;

// [snippet:model]
// x:[B,1,28,28] -> conv 1->16 (3x3, padding 1) -> relu -> max-pool 2 -> [B,16,14,14]
//   -> flatten -> linear 3136->10 (logits)
struct DigitNet : nn::Cloneable<DigitNet> {
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::Linear> fc;
  DigitNet() {
    conv = std::make_shared<nn::Conv2d>(1, 16, 3, nn::Conv2dOptions{.padding = 1});
    fc = std::make_shared<nn::Linear>(16 * 14 * 14, 10);
    register_module("conv", &conv);  // the & matters: minidl keeps a pointer to the member
    register_module("fc", &fc);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = max_pool2d(relu((*conv)(x)), pool2d_params(2));
    return (*fc)(h.flatten(1));
  }
};
// [/snippet]

// [snippet:evaluate]
double accuracy(nn::Module& model, data::DataLoader& loader) {
  NoGradGuard no_grad;  // torch.no_grad(): no graph is recorded
  model.eval();         // dropout off, BatchNorm uses its running statistics
  int64_t correct = 0, total = 0;
  for (data::Example& b : loader.epoch(0)) {
    Tensor pred = model(b.data).argmax(1);
    correct += pred.eq(b.target).sum().item<int64_t>();
    total += b.target.size(0);
  }
  model.train();
  return double(correct) / double(total);
}
// [/snippet]

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : "data/mnist";
  const int64_t max_steps = argc > 2 ? std::stoll(argv[2]) : -1;  // -1: whole epochs
  // [snippet:loop]
  manual_seed(0);
  auto train_set = std::make_shared<data::MnistDataset>(dir, data::MnistSplit::train);
  auto test_set = std::make_shared<data::MnistDataset>(dir, data::MnistSplit::test);
  data::DataLoader train_loader(train_set, {.batch_size = 64, .shuffle = true, .seed = 0});
  data::DataLoader test_loader(test_set, {.batch_size = 500});

  auto model = std::make_shared<DigitNet>();
  optim::AdamW opt(model->parameters(), /*lr=*/1e-3);
  const int epochs = 2;
  optim::CosineAnnealingLR sched(opt, /*T_max=*/epochs);

  int64_t step = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    for (data::Example& b : train_loader.epoch(epoch)) {  // epoch(e) reshuffles (set_epoch)
      Tensor loss = cross_entropy((*model)(b.data), b.target);
      opt.zero_grad();
      loss.backward();
      opt.step();
      if (++step % 100 == 0)
        std::printf("step %lld: loss %.4f\n", (long long)step, loss.item<double>());
      if (step == max_steps) break;
    }
    sched.step();  // once per epoch, as in PyTorch
    std::printf("epoch %d: test accuracy %.4f, lr %.2e\n", epoch, accuracy(*model, test_loader),
                sched.get_last_lr()[0]);
    if (step == max_steps) break;
  }
  nn::save_weights("digits.safetensors", *model);  // PyTorch: safetensors.torch.load_file
  // [/snippet]
  // [snippet:reload]
  auto again = std::make_shared<DigitNet>();
  nn::load_weights("digits.safetensors", *again);  // names every missing or mismatched key
  // [/snippet]
  const double a = accuracy(*model, test_loader), b = accuracy(*again, test_loader);
  std::printf("first_model: %lld steps, test accuracy %.4f (reloaded: %.4f)\n", (long long)step, a,
              b);
  return a == b && a > 0.5 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "first_model: error: %s\n", e.what());
  return 2;
}
