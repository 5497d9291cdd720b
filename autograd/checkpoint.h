// Activation checkpointing (torch.utils.checkpoint): run a function without keeping its
// intermediate activations, and recompute them in backward (RNG and autocast state replayed).
#pragma once
#include <functional>
#include <vector>

#include "tensor/tensor.h"

namespace minidl::autograd {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// outputs = fn(inputs), computed under no-grad: only `inputs` are saved (version-checked, as a
// saved tensor), plus fn itself. One node (CheckpointBackward) connects the floating outputs to
// `inputs` and `params`. Its backward restores the default generator's (seed, offset) and the
// autocast state of the forward, recomputes fn with grad enabled on detached copies of the
// inputs, and backpropagates the output gradients through the recomputed graph: the gradients
// of `inputs` and `params` flow on through the outer backward (so autograd::grad, hooks and
// DDP see them); any other leaf fn uses (a parameter not listed) is accumulated into its .grad
// during that inner backward, as torch's reentrant checkpoint does. The generator is put back
// afterwards (torch's fork_rng), so the caller's stream is unchanged by the recomputation.
// Pass a module's parameters as `params` (nn::checkpoint(module, x) does) so that they get
// gradients even when no input requires grad. The backward cannot build a higher-order graph.
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& params = {},
                               bool preserve_rng_state = true);

}  // namespace minidl::autograd
