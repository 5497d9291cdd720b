// Guide example 2 (docs/guide.md): a small ResNet (two residual blocks, BatchNorm,
// AdaptiveAvgPool2d) trained on the offline digits with SGD + momentum and a step schedule; a
// training checkpoint (model, optimizer, scheduler, RNG) saved atomically and resumed.
// Usage: resnet_digits DATA_DIR [MAX_STEPS]
#include <cstdio>
#include <numeric>
#include <string>

#include "minidl.h"
using namespace minidl;

// [snippet:block]
// conv3x3-BN-ReLU-conv3x3-BN + shortcut, then ReLU. The shortcut is the identity, or a
// conv1x1-BN when the stride or the channel count changes. x:[B,C,H,W] -> [B,out,H/s,W/s]
struct BasicBlock : nn::Cloneable<BasicBlock> {
  std::shared_ptr<nn::Conv2d> conv1, conv2, down;  // down: null for the identity
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2, down_bn;
  BasicBlock(int64_t in, int64_t out, int64_t stride) {
    conv1 = std::make_shared<nn::Conv2d>(
        in, out, 3, nn::Conv2dOptions{.stride = stride, .padding = 1, .bias = false});
    conv2 =
        std::make_shared<nn::Conv2d>(out, out, 3, nn::Conv2dOptions{.padding = 1, .bias = false});
    bn1 = std::make_shared<nn::BatchNorm2d>(out);
    bn2 = std::make_shared<nn::BatchNorm2d>(out);
    register_module("conv1", &conv1);
    register_module("bn1", &bn1);
    register_module("conv2", &conv2);
    register_module("bn2", &bn2);
    if (stride != 1 || in != out) {
      down = std::make_shared<nn::Conv2d>(in, out, 1,
                                          nn::Conv2dOptions{.stride = stride, .bias = false});
      down_bn = std::make_shared<nn::BatchNorm2d>(out);
      register_module("down", &down);
      register_module("down_bn", &down_bn);
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu((*bn1)((*conv1)(x)));
    h = (*bn2)((*conv2)(h));
    Tensor shortcut = down ? (*down_bn)((*down)(x)) : x;
    return relu(h + shortcut);
  }
};

// x:[B,1,28,28] -> stem [B,16,28,28] -> block 16->16 -> block 16->32 (stride 2) [B,32,14,14]
//   -> AdaptiveAvgPool2d(1) [B,32,1,1] -> linear 32->10
struct ResNet : nn::Cloneable<ResNet> {
  std::shared_ptr<nn::Conv2d> stem;
  std::shared_ptr<nn::BatchNorm2d> stem_bn;
  std::shared_ptr<BasicBlock> block1, block2;
  std::shared_ptr<nn::AdaptiveAvgPool2d> pool;
  std::shared_ptr<nn::Linear> fc;
  ResNet() {
    stem = std::make_shared<nn::Conv2d>(1, 16, 3, nn::Conv2dOptions{.padding = 1, .bias = false});
    stem_bn = std::make_shared<nn::BatchNorm2d>(16);
    block1 = std::make_shared<BasicBlock>(16, 16, 1);
    block2 = std::make_shared<BasicBlock>(16, 32, 2);
    pool = std::make_shared<nn::AdaptiveAvgPool2d>(1);
    fc = std::make_shared<nn::Linear>(32, 10);
    register_module("stem", &stem);
    register_module("stem_bn", &stem_bn);
    register_module("block1", &block1);
    register_module("block2", &block2);
    register_module("pool", &pool);
    register_module("fc", &fc);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu((*stem_bn)((*stem)(x)));
    h = (*block2)((*block1)(h));
    return (*fc)((*pool)(h).flatten(1));
  }
};
// [/snippet]

double accuracy(nn::Module& model, data::DataLoader& loader) {
  NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0, total = 0;
  for (data::Example& b : loader.epoch(0)) {
    correct += model(b.data).argmax(1).eq(b.target).sum().item<int64_t>();
    total += b.target.size(0);
  }
  model.train();
  return double(correct) / double(total);
}

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : "data/mnist";
  const int64_t max_steps = argc > 2 ? std::stoll(argv[2]) : -1;  // -1: 3 epochs
  manual_seed(0);
  // [snippet:data]
  // torchvision-style: transforms on each sample, a held-out Subset, a seeded shuffle.
  auto digits = std::make_shared<data::MnistDataset>(dir, data::MnistSplit::train);
  auto augment =
      std::make_shared<data::Compose>(std::vector<std::shared_ptr<const data::Transform>>{
          std::make_shared<data::RandomCrop>(28, /*padding=*/2),
          std::make_shared<data::Normalize>(std::vector<double>{0.1307},
                                            std::vector<double>{0.3081})});
  auto train_set = std::make_shared<data::TransformDataset>(digits, augment);
  std::vector<int64_t> first_500(500);
  std::iota(first_500.begin(), first_500.end(), 0);
  auto plain = std::make_shared<data::TransformDataset>(
      std::make_shared<data::MnistDataset>(dir, data::MnistSplit::test),
      std::make_shared<data::Normalize>(std::vector<double>{0.1307}, std::vector<double>{0.3081}));
  auto test_set = std::make_shared<data::Subset>(plain, first_500);
  data::DataLoader train_loader(
      train_set,
      {.batch_size = 64, .shuffle = true, .seed = 0, .num_workers = 2});  // 2 threads build batches
  data::DataLoader test_loader(test_set, {.batch_size = 500});
  // [/snippet]
  auto model = std::make_shared<ResNet>();
  std::printf("%s\n", model->repr().c_str());  // PyTorch's print(model)
  std::printf("%lld parameters\n", (long long)model->num_parameters());
  // [snippet:checkpoint]
  optim::SGD opt(model->parameters(), /*lr=*/0.05, /*momentum=*/0.9);
  optim::StepLR sched(opt, /*step_size=*/1, /*gamma=*/0.5);
  int64_t step = 0;
  for (int epoch = 1; epoch <= 3 && step != max_steps; ++epoch) {
    for (data::Example& b : train_loader.epoch(epoch)) {
      Tensor loss = cross_entropy((*model)(b.data), b.target);
      opt.zero_grad();
      loss.backward();
      opt.step();
      if (++step == max_steps) break;
    }
    sched.step();  // lr x0.5 after each epoch
  }
  // One atomic file: model, optimizer state (momentum), scheduler, RNG state, your metadata.
  nn::save_checkpoint("resnet.ckpt", *model, &opt, &sched, {{"step", std::to_string(step)}});

  // Later (or in a new process): the same objects, then load.
  auto resumed = std::make_shared<ResNet>();
  optim::SGD opt2(resumed->parameters(), 0.05, 0.9);
  optim::StepLR sched2(opt2, 1, 0.5);
  auto meta = nn::load_checkpoint("resnet.ckpt", *resumed, &opt2, &sched2);
  const int64_t resumed_step = std::stoll(meta.at("step"));
  // [/snippet]
  const double a = accuracy(*model, test_loader), b = accuracy(*resumed, test_loader);
  std::printf("resnet_digits: %lld steps (resumed at %lld), test accuracy %.4f (resumed: %.4f)\n",
              (long long)step, (long long)resumed_step, a, b);
  return a == b && resumed_step == step && a > 0.8 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "resnet_digits: error: %s\n", e.what());
  return 2;
}
