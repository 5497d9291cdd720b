// weight_decay_groups: splits a module's trainable parameters by rank into a decayed and a
// non-decayed ParamGroup.
#include "optim/param_groups.h"

namespace minidl::optim {

std::vector<ParamGroup> weight_decay_groups(const nn::Module& module, double weight_decay) {
  MINIDL_CHECK(weight_decay >= 0, "weight_decay_groups: weight_decay must be non-negative, got ",
               weight_decay);
  std::vector<Tensor> decay, no_decay;
  for (auto& [name, p] : module.named_parameters()) {
    if (!p.requires_grad()) continue;
    (p.dim() >= 2 ? decay : no_decay).push_back(p);
  }
  std::vector<ParamGroup> groups;
  groups.emplace_back(std::move(decay), Options{{"weight_decay", weight_decay}});
  groups.emplace_back(std::move(no_decay), Options{{"weight_decay", 0.0}});
  return groups;
}

}  // namespace minidl::optim
