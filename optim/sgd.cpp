// SGD step: d = g + wd*p; buf = momentum*buf + (1-dampening)*d (buf = d on the first step);
// d = nesterov ? d + momentum*buf : buf; p -= lr*d.
#include "optim/sgd.h"

#include "autograd/grad_mode.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace minidl::optim {

static Options sgd_defaults(double lr, double momentum, double dampening, double wd,
                            bool nesterov) {
  return {{"lr", lr},
          {"momentum", momentum},
          {"dampening", dampening},
          {"weight_decay", wd},
          {"nesterov", nesterov ? 1.0 : 0.0}};
}

SGD::SGD(std::vector<Tensor> params, double lr, double momentum, double dampening,
         double weight_decay, bool nesterov)
    : SGD(std::vector<ParamGroup>{ParamGroup(std::move(params))}, lr, momentum, dampening,
          weight_decay, nesterov) {}

SGD::SGD(std::vector<ParamGroup> groups, double lr, double momentum, double dampening,
         double weight_decay, bool nesterov)
    : Optimizer(sgd_defaults(lr, momentum, dampening, weight_decay, nesterov)) {
  check_options(defaults_);
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

void SGD::check_options(const Options& o) const {
  Optimizer::check_options(o);
  double momentum = o.at("momentum"), dampening = o.at("dampening");
  MINIDL_CHECK(momentum >= 0, "SGD: Invalid momentum value: ", momentum);
  MINIDL_CHECK(o.at("weight_decay") >= 0,
               "SGD: Invalid weight_decay value: ", o.at("weight_decay"));
  MINIDL_CHECK(o.at("nesterov") == 0 || (momentum > 0 && dampening == 0),
               "SGD: Nesterov momentum requires a momentum and zero dampening (got momentum ",
               momentum, ", dampening ", dampening, ")");
}

void SGD::step() {
  NoGradGuard guard;
  size_t idx = 0;
  for (ParamGroup& g : groups_) {
    const double lr = g.get("lr"), momentum = g.get("momentum"), dampening = g.get("dampening"),
                 wd = g.get("weight_decay");
    const bool nesterov = g.get("nesterov") != 0;
    for (Tensor& p : g.params) {
      auto& st = state_[idx++];
      const Tensor& grad = p.grad();
      if (!grad.defined()) continue;
      Tensor d = wd != 0 ? add(grad, p, wd) : grad;
      if (momentum != 0) {
        auto it = st.find("momentum_buffer");
        if (it == st.end()) {
          it = st.emplace("momentum_buffer", d.detach().clone()).first;
        } else {
          mul_(it->second, momentum);
          add_(it->second, d, 1 - dampening);
        }
        d = nesterov ? add(d, it->second, momentum) : it->second;
      }
      add_(p, d, -lr);
    }
  }
}

}  // namespace minidl::optim
