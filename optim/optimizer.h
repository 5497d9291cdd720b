// Optimizer base (torch.optim.Optimizer): parameter groups with per-group options, per-parameter
// state tensors, zero_grad and a flat, safetensors-friendly state_dict.
#pragma once
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace minidl {
struct FusedHyper;    // tensor/dispatch.h
struct FusedAmpArgs;  // tensor/dispatch.h
}  // namespace minidl

namespace minidl::optim {

// Hyper-parameters by name ("lr", "momentum", "beta1", "beta2", "eps", "weight_decay", ...);
// booleans are stored as 0/1. Schedulers add "initial_lr" (and OneCycleLR "max_lr", ...).
using Options = std::map<std::string, double>;

// A set of parameters (leaf tensors with requires_grad) sharing options. Options left out take
// the optimizer's defaults when the group is added.
struct ParamGroup {
  std::vector<Tensor> params;
  Options options;
  ParamGroup(std::vector<Tensor> p, Options o = {}) : params(std::move(p)), options(std::move(o)) {}
  double& lr() { return options.at("lr"); }
  double lr() const { return options.at("lr"); }
  double get(const std::string& name) const;  // throws naming the option when missing
};

// State dict key scheme (every value a Tensor so it can go through save_safetensors):
//   "state.<i>.<name>"        per-parameter state of the i-th parameter, counted across groups
//                             in order (e.g. "state.0.momentum_buffer", "state.3.exp_avg",
//                             "state.3.exp_avg_sq", "state.3.max_exp_avg_sq"); "state.<i>.step"
//                             is a 0-d f64 CPU tensor (fused CUDA steps keep it on the device
//                             and state_dict copies it back). Other state tensors stay on the
//                             parameter's device; load_state_dict puts them there.
//   "param_groups.<g>.params" 1-d int64 tensor: the global indices of group g's parameters.
//   "param_groups.<g>.<opt>"  0-d f64 tensor per option (e.g. "param_groups.0.lr").
class Optimizer {
 public:
  explicit Optimizer(Options defaults);
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  const Options& defaults() const { return defaults_; }
  // Fills missing options from the defaults, validates them; a parameter may be in one group only.
  void add_param_group(ParamGroup group);

  // For wrappers that own the parameters the optimizer must step instead of the ones it was
  // built on (FSDP's shards): group g's parameters become params[g], its options kept. Only
  // before any state exists (the optimizer has not stepped); throws otherwise, or when the
  // number of lists is not the number of groups.
  void replace_parameters(std::vector<std::vector<Tensor>> params);

  virtual void step() = 0;
  // AMP (optim/grad_scaler.h). Whether step_with_scaling() runs on the device without a host
  // sync for every group (PyTorch's _step_supports_amp_scaling: the fused CUDA path).
  virtual bool supports_amp_scaling() const { return false; }
  // One step on gradients divided by grad_scale (undefined: already unscaled), skipped when
  // found_inf (0-d f32) != 0: parameters and state, step counts included, stay bitwise
  // unchanged. SGD/Adam(W) do it in the fused ops (on the device, capturable); groups the fused
  // kernels cannot take, and this default, read found_inf on the host, then unscale and step().
  virtual void step_with_scaling(const Tensor& grad_scale, const Tensor& found_inf);
  // Drops (set_to_none) or zeroes every parameter's .grad.
  void zero_grad(bool set_to_none = true);

  // Virtual for wrappers that keep the state elsewhere (dist::ZeroRedundancyOptimizer).
  virtual std::map<std::string, Tensor> state_dict() const;
  // Validates group/parameter counts and state shapes (minidl::Error naming the key and shapes)
  // before changing anything; state tensors are copied (cast to the parameter's dtype).
  virtual void load_state_dict(const std::map<std::string, Tensor>& sd);

  // What load_checkpoint keeps to roll back a failed load, and how it puts it back: the
  // state_dict by default. A sharded optimizer (dist::ZeroRedundancyOptimizer) keeps only its
  // own shard, so no rank needs the consolidated dict to load a checkpoint.
  virtual std::map<std::string, Tensor> rollback_state() const { return state_dict(); }
  virtual void restore_rollback_state(const std::map<std::string, Tensor>& sd) {
    load_state_dict(sd);
  }

  // Per-parameter state of the i-th parameter (global index).
  std::map<std::string, Tensor>& state(size_t i) { return state_.at(i); }
  size_t num_params() const { return state_.size(); }

 protected:
  virtual void check_options(const Options& o) const;  // "lr" >= 0 by default
  // For fused steps (optim/fused.h): group g's parameters that have a grad and their global
  // indices (idx0: the group's first); the group's device hyper-parameter handle, made once
  // from `read` (which reads groups_[g] when called).
  void params_with_grad(size_t g, size_t idx0, std::vector<Tensor>& params,
                        std::vector<size_t>& ids) const;
  const std::shared_ptr<FusedHyper>& fused_hyper(size_t g,
                                                 std::function<std::array<double, 8>()> read);
  // The host fallback of step_with_scaling for group g's parameters: false (nothing done) when
  // found_inf is set (read once per step through *skip: -1 unknown, 0/1 known); else divides
  // their grads by grad_scale (when defined) and returns true: the caller then steps the group.
  bool unscale_group_for_step(size_t g, const Tensor& grad_scale, const Tensor& found_inf,
                              int& skip);
  // step_with_scaling of an optimizer with a fused path (SGD, Adam): a group whose "fused"
  // option is on goes to `fused(g, idx0, amp)` (true when the fused ops took it, skipping on the
  // device); any other group takes the host fallback above, then `plain(g, idx0)`.
  void step_groups_with_scaling(
      const Tensor& grad_scale, const Tensor& found_inf,
      const std::function<bool(size_t, size_t, const FusedAmpArgs*)>& fused,
      const std::function<void(size_t, size_t)>& plain);
  // Once, at the start of the first step (every step path calls it): warns, with
  // check_registration's message, about leaves the last backward reached that the forward's
  // module does not register and no optimizer holds (nn::unregistered_after_backward).
  void check_registration_on_first_step();
  Options defaults_;
  std::vector<ParamGroup> groups_;
  std::vector<std::map<std::string, Tensor>> state_;  // by global parameter index

 private:
  std::vector<std::shared_ptr<FusedHyper>> fused_hyper_;  // by group
  bool first_step_checked_ = false;
};

// Incremented step count stored in state["step"] (a 0-d f64 tensor); returns the new value.
double increment_step(std::map<std::string, Tensor>& st);

}  // namespace minidl::optim
