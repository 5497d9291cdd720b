// SGD step: d = g + wd*p; buf = momentum*buf + (1-dampening)*d (buf = d on the first step);
// d = nesterov ? d + momentum*buf : buf; p -= lr*d.
#include "optim/sgd.h"

#include "autograd/grad_mode.h"
#include "optim/fused.h"
#include "tensor/update_rules.h"
#include "tensor/error.h"
#include "autograd/ops.h"

namespace minidl::optim {

static Options sgd_defaults(double lr, double momentum, double dampening, double wd,
                            bool nesterov) {
  return {{"lr", lr},
          {"momentum", momentum},
          {"dampening", dampening},
          {"weight_decay", wd},
          {"nesterov", nesterov ? 1.0 : 0.0},
          {"fused", 1.0}};
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

bool SGD::fused_step(size_t gi, size_t idx0, const FusedAmpArgs* amp, bool allow_cpu) {
  ParamGroup& g = groups_[gi];
  FusedSgdArgs a;
  std::vector<size_t> ids;
  params_with_grad(gi, idx0, a.params, ids);
  if (!fused::usable(a.params, allow_cpu)) return false;
  const bool momentum = g.get("momentum") != 0;
  // Under AMP a skipped first step must leave no half-made buffer: with zero dampening a zero
  // buffer and the regular update give exactly d; otherwise the host path takes the first step.
  const bool zero_first = amp && amp->found_inf.defined();
  for (size_t k = 0; k < a.params.size(); ++k) {
    const Tensor& p = a.params[k];
    a.grads.push_back(p.grad());
    if (!momentum) continue;
    auto& st = state_[ids[k]];
    auto it = st.find("momentum_buffer");
    const bool first = it == st.end();
    if (first && zero_first && g.get("dampening") != 0) return false;
    if (first)
      it = st.emplace("momentum_buffer", zero_first ? zeros(p.shape(), p.dtype(), p.device())
                                                    : empty(p.shape(), p.dtype(), p.device()))
               .first;
    else
      fused::place_state(it->second, p.device(), p.dtype());
    a.first.push_back(first && !zero_first);
    a.bufs.push_back(it->second);
  }
  a.hyper = fused_hyper(gi, [this, gi] {
    const ParamGroup& pg = groups_[gi];
    return fused::HyperValues{pg.get("lr"), pg.get("momentum"), pg.get("dampening"),
                              pg.get("weight_decay")};
  });
  a.nesterov = g.get("nesterov") != 0;
  if (amp) a.amp = *amp;
  fused::sgd_step(a);
  return true;
}

void SGD::plain_step(size_t gi, size_t idx0) {
  ParamGroup& g = groups_[gi];
  const double lr = g.get("lr"), momentum = g.get("momentum"), dampening = g.get("dampening"),
               wd = g.get("weight_decay");
  const bool nesterov = g.get("nesterov") != 0;
  for (size_t j = 0; j < g.params.size(); ++j) {
    Tensor& p = g.params[j];
    auto& st = state_[idx0 + j];
    const Tensor& grad = p.grad();
    if (!grad.defined()) continue;
    Tensor buf;
    bool first = false;
    if (momentum != 0) {
      auto it = st.find("momentum_buffer");
      first = it == st.end();
      if (first) it = st.emplace("momentum_buffer", empty_like(p.detach())).first;
      buf = it->second;
    }
    update_rules::sgd(p, grad, buf, first, {lr, momentum, dampening, wd, nesterov});
  }
}

void SGD::step() {
  NoGradGuard guard;
  check_registration_on_first_step();
  size_t idx = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const size_t idx0 = idx;
    idx += groups_[gi].params.size();
    if (groups_[gi].get("fused") != 0 && fused_step(gi, idx0, nullptr, true)) continue;
    plain_step(gi, idx0);
  }
}

bool SGD::supports_amp_scaling() const {
  size_t idx = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    std::vector<Tensor> params;
    std::vector<size_t> ids;
    params_with_grad(gi, idx, params, ids);
    idx += g.params.size();
    if (params.empty()) continue;
    if (g.get("fused") == 0 || !fused::usable(params)) return false;
    if (g.get("momentum") != 0 && g.get("dampening") != 0)  // first step: host path
      for (size_t id : ids)
        if (!state_[id].count("momentum_buffer")) return false;
  }
  return true;
}

void SGD::step_with_scaling(const Tensor& grad_scale, const Tensor& found_inf) {
  step_groups_with_scaling(
      grad_scale, found_inf,
      [this](size_t g, size_t idx0, const FusedAmpArgs* amp) {
        return fused_step(g, idx0, amp, true);
      },
      [this](size_t g, size_t idx0) { plain_step(g, idx0); });
}

}  // namespace minidl::optim
