// The MNIST models by name for mnist_ddp and minidl-compare: the classic CNN (apps/mnist/model.h)
// or resnet-mini (models::ResNetMini, now in nn/models/resnet_mini.h), and the BatchNorm count
// the apps report.
#pragma once
#include <memory>
#include <string>

#include "minidl.h"
#include "nn/models/resnet_mini.h"

namespace mnist {

using namespace minidl;

// "cnn" (apps/mnist/model.h's Net; "mnist-cnn" too) or "resnet-mini" (models::resnet_mini():
// 1 channel, 10 classes, log-probabilities like the CNN). Throws naming the model and the known
// names.
std::shared_ptr<nn::Module> make_model(const std::string& name);

// The number of BatchNorm layers (BatchNorm1d/2d, or SyncBatchNorm) in `m`, by Module::name().
int count_batchnorm(const std::shared_ptr<nn::Module>& m);

}  // namespace mnist
