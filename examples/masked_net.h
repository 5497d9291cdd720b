// The two-input model of the guide's DDP and Accelerator examples (ddp_multi_input.cpp,
// accelerator_loop.cpp): an image and a pixel mask in, digit logits out.
#pragma once
#include "minidl.h"

namespace examples {
using namespace minidl;

// [snippet:model]
// forward(x, keep): x:[B,1,28,28] images, keep:[B,1,28,28] 0/1 pixel mask -> logits [B,10].
struct MaskedNet : nn::Cloneable<MaskedNet> {
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::Linear> fc;
  MaskedNet() {
    conv = std::make_shared<nn::Conv2d>(2, 16, 3, nn::Conv2dOptions{.stride = 2, .padding = 1});
    fc = std::make_shared<nn::Linear>(16 * 14 * 14, 10);
    register_module("conv", &conv);
    register_module("fc", &fc);
  }
  // Two tensor inputs: DDP, DataParallel and the Accelerator call it as model(x, keep).
  Tensor forward(const Tensor& x, const Tensor& keep) {
    Tensor h = relu((*conv)(cat({x * keep, keep}, 1)));  // the mask is a second channel
    return (*fc)(h.flatten(1));
  }
};
// [/snippet]

}  // namespace examples
