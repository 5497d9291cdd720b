// torchvision's ResNets (torchvision.models.resnet, v1.5: stride on the 3x3 conv of a
// Bottleneck): BasicBlock, Bottleneck, ResNet and resnet18/34/50, with torchvision's module
// names, structure and init, so state_dict() keys and shapes equal torchvision's and a
// torchvision checkpoint (converted to safetensors) loads with load_state_dict.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/activation.h"
#include "nn/container.h"
#include "nn/linear_conv.h"
#include "nn/module.h"
#include "nn/pooling.h"
#include "tensor/random.h"

namespace minidl::models {

// conv3x3(inplanes, planes, stride)-BN-ReLU-conv3x3(planes, planes)-BN, plus the shortcut
// (identity, or `downsample` = Sequential(conv1x1, BatchNorm2d)), then ReLU. expansion 1.
// The BatchNorm slots are typed nn::Module so that nn::convert_sync_batchnorm can swap them.
class BasicBlock : public nn::Cloneable<BasicBlock> {
 public:
  static constexpr int64_t expansion = 1;
  BasicBlock(int64_t inplanes, int64_t planes, int64_t stride = 1,
             std::shared_ptr<nn::Sequential> downsample = nullptr, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;  // x:[B,inplanes,H,W] -> [B,planes,H/stride,W/stride]
  std::string name() const override { return "BasicBlock"; }

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Module> bn1, bn2;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Sequential> downsample;  // null: identity shortcut (not registered)
  int64_t stride;
};

// conv1x1(inplanes, planes)-BN-ReLU-conv3x3(planes, planes, stride)-BN-ReLU-
// conv1x1(planes, 4*planes)-BN, plus the shortcut, then ReLU. expansion 4.
class Bottleneck : public nn::Cloneable<Bottleneck> {
 public:
  static constexpr int64_t expansion = 4;
  Bottleneck(int64_t inplanes, int64_t planes, int64_t stride = 1,
             std::shared_ptr<nn::Sequential> downsample = nullptr, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;  // x:[B,inplanes,H,W] -> [B,4*planes,H/s,W/s]
  std::string name() const override { return "Bottleneck"; }

  std::shared_ptr<nn::Conv2d> conv1, conv2, conv3;
  std::shared_ptr<nn::Module> bn1, bn2, bn3;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Sequential> downsample;  // null: identity shortcut (not registered)
  int64_t stride;
};

enum class ResNetBlock { basic, bottleneck };

struct ResNetOptions {
  int64_t num_classes = 1000;
  // The last BatchNorm of each residual branch (BasicBlock's bn2, Bottleneck's bn3) starts with
  // weight 0, so each block starts as the identity (torchvision's zero_init_residual).
  bool zero_init_residual = false;
};

// x:[B,3,H,W] -> logits [B,num_classes] (no softmax):
//   conv1 7x7/2 3->64, bn1, relu, maxpool 3x3/2      [B,64,H/4,W/4]
//   layer1..layer4: Sequentials of blocks, planes 64/128/256/512, stride 1/2/2/2
//                                                     [B,512*expansion,H/32,W/32]
//   avgpool (AdaptiveAvgPool2d(1)), flatten, fc       [B,num_classes]
// Init as torchvision: convs kaiming_normal_(mode="fan_out", nonlinearity="relu"), BatchNorm
// weight 1 and bias 0, fc Linear's default.
class ResNet : public nn::Cloneable<ResNet> {
 public:
  // layers: the number of blocks in layer1..layer4 (4 entries).
  ResNet(ResNetBlock block, const std::vector<int64_t>& layers, ResNetOptions options = {},
         Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ResNet"; }

  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::Module> bn1;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::MaxPool2d> maxpool;
  std::shared_ptr<nn::Sequential> layer1, layer2, layer3, layer4;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<nn::Linear> fc;
  ResNetBlock block;
  int64_t num_classes;

 private:
  std::shared_ptr<nn::Sequential> make_layer(int64_t planes, int64_t blocks, int64_t stride,
                                             Generator* gen);
  int64_t inplanes_ = 64;
};

// torchvision.models.resnet18/34/50 (randomly initialised; weights come through
// load_state_dict): BasicBlock [2,2,2,2], BasicBlock [3,4,6,3], Bottleneck [3,4,6,3].
std::shared_ptr<ResNet> resnet18(int64_t num_classes = 1000, bool zero_init_residual = false,
                                 Generator* gen = nullptr);
std::shared_ptr<ResNet> resnet34(int64_t num_classes = 1000, bool zero_init_residual = false,
                                 Generator* gen = nullptr);
std::shared_ptr<ResNet> resnet50(int64_t num_classes = 1000, bool zero_init_residual = false,
                                 Generator* gen = nullptr);

}  // namespace minidl::models
