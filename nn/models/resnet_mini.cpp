// resnet-mini's layers and forward (see resnet_mini.h).
#include "nn/models/resnet_mini.h"

#include "autograd/ops.h"
#include "nn/normalization.h"

namespace minidl::models {

namespace {

std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
  // No bias: the BatchNorm after it has its own (torchvision's ResNet).
  return std::make_shared<nn::Conv2d>(
      in, out, k, nn::Conv2dOptions{.stride = stride, .padding = k / 2, .bias = false});
}

}  // namespace

MiniBasicBlock::MiniBasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride) {
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

Tensor MiniBasicBlock::forward(const Tensor& x) {
  Tensor h = relu((*bn1)((*conv1)(x)));
  h = (*bn2)((*conv2)(h));
  const Tensor identity = shortcut_conv ? (*shortcut_bn)((*shortcut_conv)(x)) : x;
  return relu(h + identity);
}

ResNetMini::ResNetMini(int64_t in_channels, int64_t num_classes, bool log_softmax_)
    : log_softmax(log_softmax_) {
  MINIDL_CHECK(in_channels >= 1 && num_classes >= 1,
               "ResNetMini: in_channels and num_classes must be >= 1, got ", in_channels, " and ",
               num_classes);
  stem = conv(in_channels, 16, 3, 1);
  stem_bn = std::make_shared<nn::BatchNorm2d>(16);
  block1 = std::make_shared<MiniBasicBlock>(16, 16, 1);
  block2 = std::make_shared<MiniBasicBlock>(16, 32, 2);
  fc = std::make_shared<nn::Linear>(32, num_classes);
  register_module("stem", &stem);
  register_module("stem_bn", &stem_bn);
  register_module("block1", &block1);
  register_module("block2", &block2);
  register_module("fc", &fc);
}

Tensor ResNetMini::forward(const Tensor& x) {
  Tensor h = relu((*stem_bn)((*stem)(x)));  // [B,16,H,W]
  h = (*block1)(h);                         // [B,16,H,W]
  h = (*block2)(h);                         // [B,32,H/2,W/2]
  h = mean(h, {2, 3});                      // [B,32]
  h = (*fc)(h);                             // [B,num_classes]
  return log_softmax ? minidl::log_softmax(h, 1) : h;
}

std::shared_ptr<ResNetMini> resnet_mini(int64_t in_channels, int64_t num_classes,
                                        bool log_softmax) {
  return std::make_shared<ResNetMini>(in_channels, num_classes, log_softmax);
}

}  // namespace minidl::models
