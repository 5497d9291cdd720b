// Parameter groups built from a module: weight decay on matrices only (nanoGPT's
// configure_optimizers: every parameter with dim >= 2 decays; biases and norm weights do not).
#pragma once
#include <vector>

#include "nn/module.h"
#include "optim/optimizer.h"

namespace minidl::optim {

// Two groups for an optimizer's constructor: {params with dim >= 2, {"weight_decay", wd}} and
// {the others, {"weight_decay", 0}}, each in named_parameters order. Only parameters that
// require grad are included; a tied parameter appears once (named_parameters deduplicates).
// Embeddings (2-D) decay, as in nanoGPT.
std::vector<ParamGroup> weight_decay_groups(const nn::Module& module, double weight_decay);

}  // namespace minidl::optim
