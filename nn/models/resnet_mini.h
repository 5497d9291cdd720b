// "resnet-mini": a small ResNet with BatchNorm for 28x28 digits (stem, two residual blocks,
// global average pool, linear), the kind of model a newcomer writes, so that DDP buffer
// broadcasts and SyncBatchNorm have BatchNorm layers to work on. Used by mnist_ddp
// (--model resnet-mini) and minidl-compare; its state_dict keys are those of the checkpoints
// written when it lived in apps/mnist/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nn/linear_conv.h"
#include "nn/module.h"

namespace minidl::models {

// conv3x3-BN-ReLU-conv3x3-BN plus the shortcut (identity, or conv1x1-BN when the stride or the
// channel count changes), then ReLU. Keys conv1/bn1/conv2/bn2[/shortcut_conv/shortcut_bn] (not
// torchvision's BasicBlock: see nn/models/resnet.h for that). The BatchNorm slots are typed
// nn::Module so that nn::convert_sync_batchnorm can swap in a SyncBatchNorm.
class MiniBasicBlock : public nn::Cloneable<MiniBasicBlock> {
 public:
  MiniBasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride);
  Tensor forward(const Tensor& x) override;  // x:[B,in,H,W] -> [B,out,H/stride,W/stride]
  std::string name() const override { return "MiniBasicBlock"; }

  std::shared_ptr<nn::Conv2d> conv1, conv2, shortcut_conv;  // shortcut_conv: null for identity
  std::shared_ptr<nn::Module> bn1, bn2, shortcut_bn;
};

// x:[B,in_channels,H,W] (28x28 digits) -> log-probabilities [B,num_classes] (log_softmax=true,
// what mnist_ddp's nll_loss expects) or logits (log_softmax=false):
//   stem conv3x3 in->16 + BN + ReLU       [B,16,H,W]
//   block1 16->16, stride 1 (identity)    [B,16,H,W]
//   block2 16->32, stride 2 (conv1x1-BN)  [B,32,H/2,W/2]
//   mean over H,W -> linear 32->num_classes [-> log_softmax]
// Six BatchNorm2d layers: 12 parameters and 18 buffers (running_mean, running_var,
// num_batches_tracked each).
class ResNetMini : public nn::Cloneable<ResNetMini> {
 public:
  explicit ResNetMini(int64_t in_channels = 1, int64_t num_classes = 10, bool log_softmax = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ResNetMini"; }

  std::shared_ptr<nn::Conv2d> stem;
  std::shared_ptr<nn::Module> stem_bn;
  std::shared_ptr<MiniBasicBlock> block1, block2;
  std::shared_ptr<nn::Linear> fc;
  bool log_softmax;
};

// resnet_mini() is mnist_ddp's `--model resnet-mini` (1 channel, 10 classes, log-probabilities).
std::shared_ptr<ResNetMini> resnet_mini(int64_t in_channels = 1, int64_t num_classes = 10,
                                        bool log_softmax = true);

}  // namespace minidl::models
