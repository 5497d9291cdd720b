// Adam/AdamW step (per parameter): m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
// denom = sqrt(v)/sqrt(1-b2^t) + eps; p -= lr/(1-b1^t) * m/denom.
#include "optim/adam.h"

#include <cmath>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "optim/fused.h"
#include "tensor/update_rules.h"
#include "tensor/error.h"
#include "autograd/ops.h"

namespace minidl::optim {

static Options adam_defaults(double lr, std::pair<double, double> betas, double eps, double wd,
                             bool amsgrad) {
  return {{"lr", lr},    {"beta1", betas.first}, {"beta2", betas.second},
          {"eps", eps},  {"weight_decay", wd},   {"amsgrad", amsgrad ? 1.0 : 0.0},
          {"fused", 1.0}};
}

static std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  return {ParamGroup(std::move(params))};
}

Adam::Adam(std::vector<ParamGroup> groups, Options defaults, bool decoupled)
    : Optimizer(std::move(defaults)), decoupled_(decoupled) {
  check_options(defaults_);
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

Adam::Adam(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps,
           double weight_decay, bool amsgrad)
    : Adam(one_group(std::move(params)), adam_defaults(lr, betas, eps, weight_decay, amsgrad),
           false) {}
Adam::Adam(std::vector<ParamGroup> groups, double lr, std::pair<double, double> betas, double eps,
           double weight_decay, bool amsgrad)
    : Adam(std::move(groups), adam_defaults(lr, betas, eps, weight_decay, amsgrad), false) {}
AdamW::AdamW(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps,
             double weight_decay, bool amsgrad)
    : Adam(one_group(std::move(params)), adam_defaults(lr, betas, eps, weight_decay, amsgrad),
           true) {}
AdamW::AdamW(std::vector<ParamGroup> groups, double lr, std::pair<double, double> betas, double eps,
             double weight_decay, bool amsgrad)
    : Adam(std::move(groups), adam_defaults(lr, betas, eps, weight_decay, amsgrad), true) {}

void Adam::check_options(const Options& o) const {
  Optimizer::check_options(o);
  const char* name = decoupled_ ? "AdamW" : "Adam";
  double b1 = o.at("beta1"), b2 = o.at("beta2");
  MINIDL_CHECK(o.at("eps") >= 0, name, ": Invalid epsilon value: ", o.at("eps"));
  MINIDL_CHECK(b1 >= 0 && b1 < 1, name, ": Invalid beta parameter at index 0: ", b1);
  MINIDL_CHECK(b2 >= 0 && b2 < 1, name, ": Invalid beta parameter at index 1: ", b2);
  MINIDL_CHECK(o.at("weight_decay") >= 0, name,
               ": Invalid weight_decay value: ", o.at("weight_decay"));
}

bool Adam::fused_step(size_t gi, size_t idx0, const FusedAmpArgs* amp, bool allow_cpu) {
  ParamGroup& g = groups_[gi];
  FusedAdamArgs a;
  std::vector<Tensor>& params = a.params;
  std::vector<size_t> ids;
  params_with_grad(gi, idx0, params, ids);
  if (!fused::usable(params, allow_cpu)) return false;
  const bool amsgrad = g.get("amsgrad") != 0;
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor& p = params[k];
    auto& st = state_[ids[k]];
    if (!st.count("exp_avg")) {
      st["step"] = zeros({}, kFloat64, p.device());
      st["exp_avg"] = zeros(p.shape(), p.dtype(), p.device());
      st["exp_avg_sq"] = zeros(p.shape(), p.dtype(), p.device());
    }
    if (amsgrad && !st.count("max_exp_avg_sq"))
      st["max_exp_avg_sq"] = zeros(p.shape(), p.dtype(), p.device());
    if (!st.count("step")) st["step"] = zeros({}, kFloat64, p.device());
    for (const char* name : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"})
      if (st.count(name)) fused::place_state(st[name], p.device(), p.dtype());
    fused::place_state(st["step"], p.device(), kFloat64);
    a.grads.push_back(p.grad());
    a.exp_avg.push_back(st["exp_avg"]);
    a.exp_avg_sq.push_back(st["exp_avg_sq"]);
    if (amsgrad) a.max_exp_avg_sq.push_back(st["max_exp_avg_sq"]);
    a.steps.push_back(st["step"]);
  }
  a.hyper = fused_hyper(gi, [this, gi] {
    const ParamGroup& pg = groups_[gi];
    return fused::HyperValues{pg.get("lr"), pg.get("beta1"), pg.get("beta2"), pg.get("eps"),
                              pg.get("weight_decay")};
  });
  a.decoupled = decoupled_;
  if (amp) a.amp = *amp;
  // autocast's 16-bit copies of these weights for the next forward, written in the same pass
  a.param_copies = amp::weight_copies_wanted(params);
  fused::adam_step(a);
  amp::provide_weight_copies(params, a.param_copies);
  return true;
}

void Adam::step() {
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

bool Adam::supports_amp_scaling() const {
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    std::vector<Tensor> params;
    std::vector<size_t> ids;
    params_with_grad(gi, 0, params, ids);
    if (!params.empty() && (groups_[gi].get("fused") == 0 || !fused::usable(params))) return false;
  }
  return true;
}

void Adam::step_with_scaling(const Tensor& grad_scale, const Tensor& found_inf) {
  step_groups_with_scaling(
      grad_scale, found_inf,
      [this](size_t g, size_t idx0, const FusedAmpArgs* amp) {
        return fused_step(g, idx0, amp, true);
      },
      [this](size_t g, size_t idx0) { plain_step(g, idx0); });
}

void Adam::plain_step(size_t gi, size_t idx0) {
  ParamGroup& g = groups_[gi];
  const double lr = g.get("lr"), b1 = g.get("beta1"), b2 = g.get("beta2"), eps = g.get("eps"),
               wd = g.get("weight_decay");
  const bool amsgrad = g.get("amsgrad") != 0;
  for (size_t j = 0; j < g.params.size(); ++j) {
    Tensor& p = g.params[j];
    auto& st = state_[idx0 + j];
    const Tensor& grad0 = p.grad();
    if (!grad0.defined()) continue;
    if (!st.count("exp_avg")) {
      st["step"] = scalar_tensor(0.0, kFloat64);
      st["exp_avg"] = zeros_like(p.detach());
      st["exp_avg_sq"] = zeros_like(p.detach());
      if (amsgrad) st["max_exp_avg_sq"] = zeros_like(p.detach());
    }
    const double t = increment_step(st);
    Tensor max_v;
    if (amsgrad) {
      auto it = st.find("max_exp_avg_sq");
      if (it == st.end()) it = st.emplace("max_exp_avg_sq", zeros_like(p.detach())).first;
      max_v = it->second;
    }
    update_rules::adam(p, grad0, st["exp_avg"], st["exp_avg_sq"], max_v, t,
                       {lr, b1, b2, eps, wd, decoupled_});
  }
}

}  // namespace minidl::optim
