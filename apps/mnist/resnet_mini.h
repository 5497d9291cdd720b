// "resnet-mini": a small ResNet with BatchNorm for 28x28 MNIST digits, the kind of model a
// newcomer writes (stem, two residual blocks, global average pool, linear), so that DDP buffer
// broadcasts and SyncBatchNorm have BatchNorm layers to work on. Shared by mnist_ddp and compare.
#pragma once
#include <memory>
#include <string>

#include "minidl.h"

namespace mnist {

using namespace minidl;

// conv3x3-BN-ReLU-conv3x3-BN plus the shortcut (identity, or conv1x1-BN when the stride or the
// channel count changes), then ReLU. The BatchNorm slots are typed nn::Module so that
// nn::convert_sync_batchnorm can swap in a SyncBatchNorm.
class BasicBlock : public nn::Cloneable<BasicBlock> {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "BasicBlock"; }

  std::shared_ptr<nn::Conv2d> conv1, conv2, shortcut_conv;  // shortcut_conv: null for identity
  std::shared_ptr<nn::Module> bn1, bn2, shortcut_bn;
};

// x:[B,1,28,28] -> log-probabilities [B,10]:
//   stem conv3x3 1->16 + BN + ReLU        [B,16,28,28]
//   block1 16->16, stride 1 (identity)    [B,16,28,28]
//   block2 16->32, stride 2 (conv1x1-BN)  [B,32,14,14]
//   mean over H,W -> linear 32->10 -> log_softmax
// Six BatchNorm2d layers: 12 parameters and 18 buffers (running_mean, running_var,
// num_batches_tracked each).
class ResNetMini : public nn::Cloneable<ResNetMini> {
 public:
  ResNetMini();
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ResNetMini"; }

  std::shared_ptr<nn::Conv2d> stem;
  std::shared_ptr<nn::Module> stem_bn;
  std::shared_ptr<BasicBlock> block1, block2;
  std::shared_ptr<nn::Linear> fc;
};

// The MNIST models by name: "cnn" (apps/mnist/model.h's Net; "mnist-cnn" too) or "resnet-mini".
// Throws naming the model and the known names.
std::shared_ptr<nn::Module> make_model(const std::string& name);

// The number of BatchNorm layers (BatchNorm1d/2d, or SyncBatchNorm) in `m`, by Module::name().
int count_batchnorm(const std::shared_ptr<nn::Module>& m);

}  // namespace mnist
