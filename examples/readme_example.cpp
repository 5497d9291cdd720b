// The README's first example, compiled so that it stays true: a two-layer net trained with
// SGD for 10 steps, weights saved as safetensors.
#include <cstdio>

#include "minidl.h"
using namespace minidl;

struct Net : nn::Cloneable<Net> {
  std::shared_ptr<nn::Linear> fc1, fc2;
  Net() {
    fc1 = std::make_shared<nn::Linear>(784, 128);
    fc2 = std::make_shared<nn::Linear>(128, 10);
    register_module("fc1", &fc1);
    register_module("fc2", &fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
};

int main() {
  std::printf("readme_example: training 10 steps\n");
  manual_seed(0);
  auto net = std::make_shared<Net>();
  optim::SGD opt(net->parameters(), /*lr=*/0.1, /*momentum=*/0.9);
  Tensor x = randn({64, 784}), y = randint(0, 10, {64});
  for (int step = 0; step < 10; ++step) {
    Tensor loss = cross_entropy(net->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  save_safetensors(net->state_dict(), "net.safetensors");  // readable by PyTorch / HF
}
