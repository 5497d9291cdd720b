// The MNIST model factory and the BatchNorm count (see resnet_mini.h; the resnet-mini model
// itself is models::ResNetMini, nn/models/resnet_mini.h).
#include "apps/mnist/resnet_mini.h"

#include "apps/mnist/model.h"

namespace mnist {

std::shared_ptr<nn::Module> make_model(const std::string& name) {
  if (name == "cnn" || name == "mnist-cnn") return std::make_shared<Net>();
  if (name == "resnet-mini") return models::resnet_mini();
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
