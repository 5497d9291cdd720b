// resnet-mini's layers and forward, the MNIST model factory and the BatchNorm count (see
// resnet_mini.h).
#include "apps/mnist/resnet_mini.h"

#include "apps/mnist/model.h"

namespace mnist {

namespace {

std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
  // No bias: the BatchNorm after it has its own (torchvision's ResNet).
  return std::make_shared<nn::Conv2d>(
      in, out, k, nn::Conv2dOptions{.stride = stride, .padding = k / 2, .bias = false});
}

}  // namespace

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride) {
  conv1 = conv(in_channels, out_channels, 3, stride);
  bn1 = std::make_shared<nn::BatchNorm2d>(out_channels);
  conv2 = conv(out_channels, out_channels, 3, 1);
  bn2 = std::make_shared<nn::BatchNorm2d>(out_channels);
  register_module("conv1", &conv1);
  register_module("bn1", &bn1);
  register_module("conv2", &conv2);
  register_module("bn2", &bn2);
  if (stride != 1 || in_channels != out_channels) {
    shortcut_conv = conv(in_channels, out_channels, 1, stride);
    shortcut_bn = std::make_shared<nn::BatchNorm2d>(out_channels);
    register_module("shortcut_conv", &shortcut_conv);
    register_module("shortcut_bn", &shortcut_bn);
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor h = relu((*bn1)((*conv1)(x)));
  h = (*bn2)((*conv2)(h));
  const Tensor identity = shortcut_conv ? (*shortcut_bn)((*shortcut_conv)(x)) : x;
  return relu(h + identity);
}

ResNetMini::ResNetMini() {
  stem = conv(1, 16, 3, 1);
  stem_bn = std::make_shared<nn::BatchNorm2d>(16);
  block1 = std::make_shared<BasicBlock>(16, 16, 1);
  block2 = std::make_shared<BasicBlock>(16, 32, 2);
  fc = std::make_shared<nn::Linear>(32, 10);
  register_module("stem", &stem);
  register_module("stem_bn", &stem_bn);
  register_module("block1", &block1);
  register_module("block2", &block2);
  register_module("fc", &fc);
}

Tensor ResNetMini::forward(const Tensor& x) {
  Tensor h = relu((*stem_bn)((*stem)(x)));  // [B,16,28,28]
  h = (*block1)(h);                         // [B,16,28,28]
  h = (*block2)(h);                         // [B,32,14,14]
  h = mean(h, {2, 3});                      // [B,32]
  return log_softmax((*fc)(h), 1);          // [B,10]
}

std::shared_ptr<nn::Module> make_model(const std::string& name) {
  if (name == "cnn" || name == "mnist-cnn") return std::make_shared<Net>();
  if (name == "resnet-mini") return std::make_shared<ResNetMini>();
  MINIDL_FAIL("unknown MNIST model '", name, "' (cnn | resnet-mini)");
}

int count_batchnorm(const std::shared_ptr<nn::Module>& m) {
  int n = 0;
  for (const auto& [name, child] : m->named_modules()) {
    const std::string kind = child->name();
    if (kind == "BatchNorm1d" || kind == "BatchNorm2d" || kind == "SyncBatchNorm") ++n;
  }
  return n;
}

}  // namespace mnist
