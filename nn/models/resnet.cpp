// torchvision's ResNet blocks, layers, forward and init (see resnet.h).
#include "nn/models/resnet.h"

#include <utility>

#include "autograd/ops.h"
#include "nn/init.h"
#include "nn/normalization.h"

namespace minidl::models {

namespace {

// torchvision's conv3x3 / conv1x1: no bias (the BatchNorm after it has one).
std::shared_ptr<nn::Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride, Generator* gen) {
  return std::make_shared<nn::Conv2d>(
      in, out, 3, nn::Conv2dOptions{.stride = stride, .padding = 1, .bias = false}, gen);
}
std::shared_ptr<nn::Conv2d> conv1x1(int64_t in, int64_t out, int64_t stride, Generator* gen) {
  return std::make_shared<nn::Conv2d>(in, out, 1,
                                      nn::Conv2dOptions{.stride = stride, .bias = false}, gen);
}

std::shared_ptr<nn::Module> batchnorm(int64_t channels) {
  return std::make_shared<nn::BatchNorm2d>(channels);
}

// The BatchNorm tensors of a BN slot (BatchNorm2d, or a SyncBatchNorm after conversion).
nn::BatchNormState& bn_state(const std::shared_ptr<nn::Module>& m) {
  auto* s = dynamic_cast<nn::BatchNormState*>(m.get());
  MINIDL_CHECK(s != nullptr, "ResNet: expected a BatchNorm layer, got ", m->name());
  return *s;
}

}  // namespace

BasicBlock::BasicBlock(int64_t inplanes, int64_t planes, int64_t stride_,
                       std::shared_ptr<nn::Sequential> downsample_, Generator* gen)
    : downsample(std::move(downsample_)), stride(stride_) {
  conv1 = conv3x3(inplanes, planes, stride, gen);
  bn1 = batchnorm(planes);
  relu = std::make_shared<nn::ReLU>();
  conv2 = conv3x3(planes, planes, 1, gen);
  bn2 = batchnorm(planes);
  register_module("conv1", &conv1);
  register_module("bn1", &bn1);
  register_module("relu", &relu);
  register_module("conv2", &conv2);
  register_module("bn2", &bn2);
  if (downsample) register_module("downsample", &downsample);
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = (*relu)((*bn1)((*conv1)(x)));  // [B,planes,H/s,W/s]
  out = (*bn2)((*conv2)(out));
  const Tensor identity = downsample ? (*downsample)(x) : x;
  return (*relu)(out + identity);
}

Bottleneck::Bottleneck(int64_t inplanes, int64_t planes, int64_t stride_,
                       std::shared_ptr<nn::Sequential> downsample_, Generator* gen)
    : downsample(std::move(downsample_)), stride(stride_) {
  conv1 = conv1x1(inplanes, planes, 1, gen);
  bn1 = batchnorm(planes);
  conv2 = conv3x3(planes, planes, stride, gen);  // v1.5: the stride is here, not on conv1
  bn2 = batchnorm(planes);
  conv3 = conv1x1(planes, planes * expansion, 1, gen);
  bn3 = batchnorm(planes * expansion);
  relu = std::make_shared<nn::ReLU>();
  register_module("conv1", &conv1);
  register_module("bn1", &bn1);
  register_module("conv2", &conv2);
  register_module("bn2", &bn2);
  register_module("conv3", &conv3);
  register_module("bn3", &bn3);
  register_module("relu", &relu);
  if (downsample) register_module("downsample", &downsample);
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = (*relu)((*bn1)((*conv1)(x)));  // [B,planes,H,W]
  out = (*relu)((*bn2)((*conv2)(out)));       // [B,planes,H/s,W/s]
  out = (*bn3)((*conv3)(out));                // [B,4*planes,H/s,W/s]
  const Tensor identity = downsample ? (*downsample)(x) : x;
  return (*relu)(out + identity);
}

ResNet::ResNet(ResNetBlock block_, const std::vector<int64_t>& layers, ResNetOptions options,
               Generator* gen)
    : block(block_), num_classes(options.num_classes) {
  MINIDL_CHECK(layers.size() == 4, "ResNet: expected the block counts of 4 layers, got ",
               layers.size());
  for (int64_t n : layers) MINIDL_CHECK(n >= 1, "ResNet: each layer needs >= 1 block, got ", n);
  MINIDL_CHECK(num_classes >= 1, "ResNet: num_classes must be >= 1, got ", num_classes);
  const int64_t expansion =
      block == ResNetBlock::basic ? BasicBlock::expansion : Bottleneck::expansion;
  conv1 = std::make_shared<nn::Conv2d>(
      3, 64, 7, nn::Conv2dOptions{.stride = 2, .padding = 3, .bias = false}, gen);
  bn1 = batchnorm(64);
  relu = std::make_shared<nn::ReLU>();
  maxpool = std::make_shared<nn::MaxPool2d>(3, nn::MaxPool2dOptions{.stride = 2, .padding = 1});
  layer1 = make_layer(64, layers[0], 1, gen);
  layer2 = make_layer(128, layers[1], 2, gen);
  layer3 = make_layer(256, layers[2], 2, gen);
  layer4 = make_layer(512, layers[3], 2, gen);
  avgpool = std::make_shared<nn::AdaptiveAvgPool2d>(1);
  fc = std::make_shared<nn::Linear>(512 * expansion, num_classes, true, gen);
  register_module("conv1", &conv1);
  register_module("bn1", &bn1);
  register_module("relu", &relu);
  register_module("maxpool", &maxpool);
  register_module("layer1", &layer1);
  register_module("layer2", &layer2);
  register_module("layer3", &layer3);
  register_module("layer4", &layer4);
  register_module("avgpool", &avgpool);
  register_module("fc", &fc);

  // torchvision's `for m in self.modules()` (apply: this object is not yet held by a shared_ptr,
  // which named_modules() needs).
  apply([&](nn::Module& m) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(&m)) {
      nn::init::kaiming_normal_(conv->weight, 0, "fan_out", "relu", gen);
    } else if (auto* bn = dynamic_cast<nn::BatchNormState*>(&m)) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
    if (!options.zero_init_residual) return;
    if (auto* b = dynamic_cast<Bottleneck*>(&m)) nn::init::zeros_(bn_state(b->bn3).weight);
    if (auto* b = dynamic_cast<BasicBlock*>(&m)) nn::init::zeros_(bn_state(b->bn2).weight);
  });
}

std::shared_ptr<nn::Sequential> ResNet::make_layer(int64_t planes, int64_t blocks, int64_t stride,
                                                   Generator* gen) {
  const bool basic = block == ResNetBlock::basic;
  const int64_t out = planes * (basic ? BasicBlock::expansion : Bottleneck::expansion);
  std::shared_ptr<nn::Sequential> downsample;
  if (stride != 1 || inplanes_ != out) {
    downsample =
        std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
            conv1x1(inplanes_, out, stride, gen), batchnorm(out)});
  }
  auto layer = std::make_shared<nn::Sequential>();
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t s = i == 0 ? stride : 1;
    auto ds = i == 0 ? downsample : nullptr;
    if (basic) {
      layer->push_back(std::make_shared<BasicBlock>(inplanes_, planes, s, ds, gen));
    } else {
      layer->push_back(std::make_shared<Bottleneck>(inplanes_, planes, s, ds, gen));
    }
    inplanes_ = out;
  }
  return layer;
}

Tensor ResNet::forward(const Tensor& x) {
  MINIDL_CHECK(x.dim() == 4 && x.size(1) == 3, "ResNet: expected an input x:[B,3,H,W], got ",
               x.shape_str());
  Tensor h = (*maxpool)((*relu)((*bn1)((*conv1)(x))));  // [B,64,H/4,W/4]
  h = (*layer1)(h);                                     // [B,64e,H/4,W/4]
  h = (*layer2)(h);                                     // [B,128e,H/8,W/8]
  h = (*layer3)(h);                                     // [B,256e,H/16,W/16]
  h = (*layer4)(h);                                     // [B,512e,H/32,W/32]
  h = (*avgpool)(h).flatten(1);                         // [B,512e]
  return (*fc)(h);                                      // [B,num_classes]
}

std::shared_ptr<ResNet> resnet18(int64_t num_classes, bool zero_init_residual, Generator* gen) {
  return std::make_shared<ResNet>(ResNetBlock::basic, std::vector<int64_t>{2, 2, 2, 2},
                                  ResNetOptions{num_classes, zero_init_residual}, gen);
}

std::shared_ptr<ResNet> resnet34(int64_t num_classes, bool zero_init_residual, Generator* gen) {
  return std::make_shared<ResNet>(ResNetBlock::basic, std::vector<int64_t>{3, 4, 6, 3},
                                  ResNetOptions{num_classes, zero_init_residual}, gen);
}

std::shared_ptr<ResNet> resnet50(int64_t num_classes, bool zero_init_residual, Generator* gen) {
  return std::make_shared<ResNet>(ResNetBlock::bottleneck, std::vector<int64_t>{3, 4, 6, 3},
                                  ResNetOptions{num_classes, zero_init_residual}, gen);
}

}  // namespace minidl::models
