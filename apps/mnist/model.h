// The classic MNIST CNN (PyTorch's examples/mnist Net), written the way a user writes a model in
// minidl: layers as members registered by name, forward() in tensor ops.
#pragma once
#include "minidl.h"

namespace mnist {

using namespace minidl;

// x:[B,1,28,28] -> log-probabilities [B,10]
class Net : public nn::Cloneable<Net> {
 public:
  Net() {
    conv1 = std::make_shared<nn::Conv2d>(1, 32, 3);   // -> [B,32,26,26]
    conv2 = std::make_shared<nn::Conv2d>(32, 64, 3);  // -> [B,64,24,24]
    pool = std::make_shared<nn::MaxPool2d>(2);        // -> [B,64,12,12]
    dropout1 = std::make_shared<nn::Dropout>(0.25);
    dropout2 = std::make_shared<nn::Dropout>(0.5);
    fc1 = std::make_shared<nn::Linear>(9216, 128);
    fc2 = std::make_shared<nn::Linear>(128, 10);
    register_module("conv1", &conv1);
    register_module("conv2", &conv2);
    register_module("pool", &pool);
    register_module("dropout1", &dropout1);
    register_module("dropout2", &dropout2);
    register_module("fc1", &fc1);
    register_module("fc2", &fc2);
  }

  Tensor forward(const Tensor& x) override {
    Tensor h = relu((*conv1)(x));
    h = relu((*conv2)(h));
    h = (*pool)(h);                 // [B,64,12,12]
    h = (*dropout1)(h).flatten(1);  // [B,9216]
    h = relu((*fc1)(h));
    h = (*fc2)((*dropout2)(h));  // [B,10]
    return log_softmax(h, 1);
  }
  std::string name() const override { return "Net"; }

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::MaxPool2d> pool;
  std::shared_ptr<nn::Dropout> dropout1, dropout2;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

}  // namespace mnist
