// Stochastic gradient descent with momentum, dampening, L2 weight decay and Nesterov momentum
// (torch.optim.SGD semantics).
#pragma once
#include "optim/optimizer.h"

namespace minidl::optim {

// Options: "lr", "momentum", "dampening", "weight_decay", "nesterov" (0/1).
// State: "state.<i>.momentum_buffer" (only when momentum != 0).
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, double momentum = 0, double dampening = 0,
      double weight_decay = 0, bool nesterov = false);
  SGD(std::vector<ParamGroup> groups, double lr, double momentum = 0, double dampening = 0,
      double weight_decay = 0, bool nesterov = false);
  void step() override;

 protected:
  void check_options(const Options& o) const override;
};

}  // namespace minidl::optim
