// Optimizer base: parameter groups, zero_grad, and the flat state_dict save/load with validation.
#include "optim/optimizer.h"

#include <mutex>
#include <set>
#include <unordered_set>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "nn/registration_check.h"
#include "tensor/warning.h"
#include "optim/fused.h"
#include "tensor/error.h"
#include "autograd/ops.h"

namespace minidl::optim {

double ParamGroup::get(const std::string& name) const {
  auto it = options.find(name);
  MINIDL_CHECK(it != options.end(), "optimizer: param group has no option `", name, "`");
  return it->second;
}

// ---- the live optimizers, for the first-step registration check
namespace {
std::mutex g_live_mutex;
std::unordered_set<const Optimizer*>& live_optimizers() {
  static std::unordered_set<const Optimizer*> live;
  return live;
}
}  // namespace

Optimizer::Optimizer(Options defaults) : defaults_(std::move(defaults)) {
  autograd::arm_leaf_census();
  std::lock_guard<std::mutex> lock(g_live_mutex);
  live_optimizers().insert(this);
}

Optimizer::~Optimizer() {
  if (!first_step_checked_) autograd::disarm_leaf_census();
  std::lock_guard<std::mutex> lock(g_live_mutex);
  live_optimizers().erase(this);
}

void Optimizer::check_registration_on_first_step() {
  if (first_step_checked_) return;
  first_step_checked_ = true;
  std::unordered_set<const TensorImpl*> optimized;
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    for (const Optimizer* o : live_optimizers())
      for (const ParamGroup& g : o->groups_)
        for (const Tensor& p : g.params) optimized.insert(p.impl());
  }
  std::string module_name;
  const std::vector<nn::UnregisteredTensor> found =
      nn::unregistered_after_backward(optimized, &module_name);
  autograd::disarm_leaf_census();
  if (!found.empty())
    warn(nn::unregistered_message("optimizer.step() (checked on the first step)", module_name,
                                  found) +
         "\nUntil then their gradients are computed and never applied.");
}

void Optimizer::check_options(const Options& o) const {
  auto it = o.find("lr");
  MINIDL_CHECK(it != o.end(), "optimizer: missing option `lr`");
  MINIDL_CHECK(it->second >= 0, "optimizer: Invalid learning rate: ", it->second);
}

void Optimizer::add_param_group(ParamGroup group) {
  for (const auto& [k, v] : defaults_) group.options.emplace(k, v);
  check_options(group.options);
  for (const Tensor& p : group.params) {
    MINIDL_CHECK(p.defined(), "optimizer: undefined parameter tensor in param group");
    for (const ParamGroup& g : groups_)
      for (const Tensor& q : g.params)
        MINIDL_CHECK(!p.is_same(q),
                     "optimizer: some parameters appear in more than one parameter group");
  }
  state_.resize(state_.size() + group.params.size());
  groups_.push_back(std::move(group));
}

void Optimizer::replace_parameters(std::vector<std::vector<Tensor>> params) {
  MINIDL_CHECK(params.size() == groups_.size(), "optimizer: replace_parameters got ", params.size(),
               " parameter list(s) for ", groups_.size(), " param group(s)");
  for (size_t i = 0; i < state_.size(); ++i)
    MINIDL_CHECK(state_[i].empty(),
                 "optimizer: replace_parameters after the optimizer stepped "
                 "(parameter ",
                 i, " has state); replace them before the first step");
  size_t n = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const Tensor& p : params[g])
      MINIDL_CHECK(p.defined() && p.requires_grad(), "optimizer: replace_parameters: group ", g,
                   " gets an undefined tensor or one that does not require grad");
    groups_[g].params = std::move(params[g]);
    n += groups_[g].params.size();
  }
  state_.assign(n, {});
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard guard;
  for (ParamGroup& g : groups_)
    for (Tensor& p : g.params) {
      if (!p.grad().defined()) continue;
      if (set_to_none)
        p.set_grad(Tensor());
      else
        p.mutable_grad().zero_();
    }
}

void Optimizer::params_with_grad(size_t g, size_t idx0, std::vector<Tensor>& params,
                                 std::vector<size_t>& ids) const {
  const std::vector<Tensor>& all = groups_.at(g).params;
  for (size_t j = 0; j < all.size(); ++j)
    if (all[j].grad().defined()) {
      params.push_back(all[j]);
      ids.push_back(idx0 + j);
    }
}

const std::shared_ptr<FusedHyper>& Optimizer::fused_hyper(
    size_t g, std::function<std::array<double, 8>()> read) {
  if (fused_hyper_.size() < groups_.size()) fused_hyper_.resize(groups_.size());
  if (!fused_hyper_[g]) fused_hyper_[g] = fused::make_hyper(std::move(read));
  return fused_hyper_[g];
}

bool Optimizer::unscale_group_for_step(size_t g, const Tensor& grad_scale, const Tensor& found_inf,
                                       int& skip) {
  if (skip < 0) {
    MINIDL_CHECK(found_inf.defined() && found_inf.numel() == 1,
                 "step_with_scaling: found_inf must be a one-element tensor");
    skip = found_inf.item<double>() != 0 ? 1 : 0;
  }
  if (skip) return false;
  if (grad_scale.defined()) {
    const double s = grad_scale.item<double>();
    for (Tensor& p : groups_.at(g).params) {
      Tensor gr = p.grad();
      if (gr.defined()) gr.copy_(div(gr, s));
    }
  }
  return true;
}

void Optimizer::step_with_scaling(const Tensor& grad_scale, const Tensor& found_inf) {
  check_registration_on_first_step();
  NoGradGuard guard;
  int skip = -1;
  bool go = true;
  for (size_t g = 0; g < groups_.size() && go; ++g)
    go = unscale_group_for_step(g, grad_scale, found_inf, skip);
  if (go) step();
}

void Optimizer::step_groups_with_scaling(
    const Tensor& grad_scale, const Tensor& found_inf,
    const std::function<bool(size_t, size_t, const FusedAmpArgs*)>& fused,
    const std::function<void(size_t, size_t)>& plain) {
  check_registration_on_first_step();
  NoGradGuard guard;
  const FusedAmpArgs amp{grad_scale, found_inf};
  int skip = -1;
  size_t idx = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const size_t idx0 = idx;
    idx += groups_[g].params.size();
    if (groups_[g].get("fused") != 0 && fused(g, idx0, &amp)) continue;
    if (unscale_group_for_step(g, grad_scale, found_inf, skip)) plain(g, idx0);
  }
}

double increment_step(std::map<std::string, Tensor>& st) {
  auto it = st.find("step");
  if (it == st.end()) it = st.emplace("step", scalar_tensor(0.0, kFloat64)).first;
  double s = it->second.item<double>() + 1;
  it->second.fill_(s);
  return s;
}

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> sd;
  int64_t idx = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string pre = "param_groups." + std::to_string(g) + ".";
    std::vector<int64_t> ids;
    for (size_t j = 0; j < groups_[g].params.size(); ++j) ids.push_back(idx++);
    Tensor t = empty({int64_t(ids.size())}, kInt64);
    std::copy(ids.begin(), ids.end(), t.data_ptr<int64_t>());
    sd[pre + "params"] = t;
    for (const auto& [k, v] : groups_[g].options) sd[pre + k] = scalar_tensor(v, kFloat64);
  }
  for (size_t i = 0; i < state_.size(); ++i)
    for (const auto& [k, v] : state_[i])  // step counts of fused steps live on the device
      sd["state." + std::to_string(i) + "." + k] =
          k == "step" ? v.detach().to(kCPU, kFloat64).reshape({}).clone() : v.detach().clone();
  return sd;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& sd) {
  const std::string op = "optimizer load_state_dict: ";
  std::vector<const Tensor*> params;
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params) params.push_back(&p);
  std::vector<Options> options(groups_.size());
  std::vector<std::map<std::string, Tensor>> state(params.size());
  std::set<size_t> groups_seen;
  for (const auto& [key, t] : sd) {
    MINIDL_CHECK(t.defined(), op, "key `", key, "` holds an undefined tensor");
    size_t dot1 = key.find('.'), dot2 = key.find('.', dot1 == std::string::npos ? 0 : dot1 + 1);
    MINIDL_CHECK(dot1 != std::string::npos && dot2 != std::string::npos, op, "unexpected key `",
                 key, "`");
    std::string kind = key.substr(0, dot1), name = key.substr(dot2 + 1);
    size_t index = 0;
    try {
      index = std::stoul(key.substr(dot1 + 1, dot2 - dot1 - 1));
    } catch (const std::exception&) {
      MINIDL_CHECK(false, op, "unexpected key `", key, "`");
    }
    if (kind == "param_groups") {
      MINIDL_CHECK(index < groups_.size(), op, "key `", key, "` refers to param group ", index,
                   " but the optimizer has ", groups_.size(), " group(s)");
      if (name == "params") {
        MINIDL_CHECK(t.numel() == int64_t(groups_[index].params.size()), op, "key `", key,
                     "` lists ", t.numel(), " parameter(s) (shape ", t.shape_str(),
                     ") but param group ", index, " has ", groups_[index].params.size());
        groups_seen.insert(index);
      } else {
        MINIDL_CHECK(t.numel() == 1, op, "key `", key, "` must be a scalar, got shape ",
                     t.shape_str());
        options[index][name] = t.item<double>();
      }
    } else if (kind == "state") {
      MINIDL_CHECK(index < params.size(), op, "key `", key, "` refers to parameter ", index,
                   " but the optimizer has ", params.size(), " parameter(s)");
      const Tensor& p = *params[index];
      if (name == "step") {
        MINIDL_CHECK(t.numel() == 1, op, "key `", key, "` must be a scalar, got shape ",
                     t.shape_str());
        state[index][name] = scalar_tensor(t.item<double>(), kFloat64);
      } else {
        MINIDL_CHECK(t.shape() == p.shape(), op, "key `", key, "` has shape ", t.shape_str(),
                     " but parameter ", index, " has shape ", p.shape_str());
        Tensor c = empty(p.shape(), p.dtype(), p.device());
        c.copy_(t.detach());
        state[index][name] = c;
      }
    } else {
      MINIDL_CHECK(false, op, "unexpected key `", key, "`");
    }
  }
  MINIDL_CHECK(groups_seen.size() == groups_.size(), op, "the state dict has ", groups_seen.size(),
               " param group(s) but the optimizer has ", groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    Options merged = groups_[g].options;
    for (const auto& [k, v] : options[g]) merged[k] = v;
    check_options(merged);
    options[g] = std::move(merged);
  }
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].options = std::move(options[g]);
  state_ = std::move(state);
}

}  // namespace minidl::optim
