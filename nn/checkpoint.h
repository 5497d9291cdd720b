// nn::checkpoint: activation checkpointing of a function or a module's forward
// (torch.utils.checkpoint.checkpoint); the mechanism is autograd/checkpoint.h.
#pragma once
#include <functional>
#include <vector>

#include "autograd/checkpoint.h"
#include "nn/module.h"

namespace minidl::nn {

// fn(inputs) -> outputs, recomputed in backward (see autograd::checkpoint for the contract).
inline std::vector<Tensor> checkpoint(const autograd::CheckpointFn& fn,
                                      const std::vector<Tensor>& inputs,
                                      const std::vector<Tensor>& params = {},
                                      bool preserve_rng_state = true) {
  return autograd::checkpoint(fn, inputs, params, preserve_rng_state);
}

// One-tensor function: y = fn(x).
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                  const std::vector<Tensor>& params = {}, bool preserve_rng_state = true);

// module.forward(x) checkpointed, with the module's parameters as the node's `params` (they
// get gradients through the outer backward even when x does not require grad). The module must
// stay alive until the backward.
Tensor checkpoint(Module& module, const Tensor& x, bool preserve_rng_state = true);

}  // namespace minidl::nn
