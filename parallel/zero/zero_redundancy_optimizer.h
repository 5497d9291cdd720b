// ZeRO stage 1 (torch.distributed.optim.ZeroRedundancyOptimizer): the optimizer state is sharded
// across the ranks of a group (each rank steps only the parameters it owns), then every parameter
// is broadcast from its owner so all ranks hold bitwise equal parameters.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "optim/optimizer.h"
#include "parallel/process_group/process_group.h"

namespace minidl::dist {

// Builds the local optimizer over the given parameter groups (this rank's shard). It must keep
// the groups as given (same number, same parameters in the same order); a group may be empty.
using OptimizerFactory =
    std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;

// Factories for the optimizers the apps use (defaults as in optim/sgd.h, optim/adam.h).
OptimizerFactory sgd_factory(double lr, double momentum = 0, double dampening = 0,
                             double weight_decay = 0, bool nesterov = false);
OptimizerFactory adam_factory(double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
                              double eps = 1e-8, double weight_decay = 0, bool amsgrad = false);
OptimizerFactory adamw_factory(double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
                               double eps = 1e-8, double weight_decay = 1e-2, bool amsgrad = false);
// By name ("sgd" | "adam" | "adamw") from option values ("lr", "momentum", "dampening",
// "weight_decay", "nesterov", "beta1", "beta2", "eps", "amsgrad"; missing ones take the
// optimizer's defaults; "lr" is required for SGD).
OptimizerFactory optimizer_factory(const std::string& kind, const optim::Options& options);

// This rank's share (stats()). Byte counts are sums of Tensor::nbytes().
struct ZeroStats {
  int rank = 0, world_size = 1;
  int64_t state_bytes = 0;        // this rank's optimizer state (its local optimizer's tensors)
  int64_t params_owned = 0;       // parameters this rank steps
  int64_t param_bytes_owned = 0;  // their bytes
  int64_t params_total = 0;
  int64_t param_bytes_total = 0;
  int64_t broadcast_bytes_per_step = 0;  // payload of step()'s broadcasts (every parameter once)
  int64_t broadcasts_per_step = 0;       // step()'s collectives: one per owner rank and dtype
};

// Bytes of an optimizer's per-parameter state (sum of nbytes over state(i), step counts included).
int64_t optimizer_state_bytes(optim::Optimizer& opt);

// Usage (every rank, after DDP averaged the gradients):
//   dist::DistributedDataParallel ddp(model, pg);
//   dist::ZeroRedundancyOptimizer opt(model->parameters(), dist::adamw_factory(1e-3), pg);
//   loss.backward(); opt.step(); opt.zero_grad();       // or scaler.step(opt); scaler.update();
// Partition (PyTorch's): within each group, parameters sorted by numel (descending, stable) go
// to the rank with the smallest total numel so far (totals carried across groups); the same on
// every rank. Each rank's local optimizer holds only its parameters' state; param_groups() shows
// every parameter (LR schedulers, clip_grad_norm_ and zero_grad act on the wrapper), and step()
// copies the groups' options (and parameter tensors, e.g. AMP O2's masters) to the local groups.
// state(i) of the wrapper is empty: the state lives in local_optimizer().
// AMP: supports_amp_scaling() is true so that GradScaler calls step_with_scaling(), which
// allreduces found_inf (max) before deciding: every rank skips when any rank saw inf/NaN, and
// the scale backs off identically. With amp::initialize at O2 the fp32 masters stay replicated
// (only the optimizer state is sharded); the masters are broadcast from their owners.
// Groups added to the wrapper after construction (add_param_group) are not supported.
class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  ZeroRedundancyOptimizer(std::vector<Tensor> params, OptimizerFactory make_local,
                          std::shared_ptr<ProcessGroup> group = nullptr /* default group */);
  ZeroRedundancyOptimizer(std::vector<optim::ParamGroup> groups, OptimizerFactory make_local,
                          std::shared_ptr<ProcessGroup> group = nullptr /* default group */);

  // Local step on this rank's shard, then every parameter from its owner (collective).
  void step() override;
  bool supports_amp_scaling() const override { return true; }
  // found_inf is allreduced (max) in place, so GradScaler's decision and update() agree on every
  // rank; then the local optimizer steps (its device-side AMP step when it supports one, else on
  // grads unscaled here like GradScaler::unscale_) and the parameters are broadcast.
  void step_with_scaling(const Tensor& grad_scale, const Tensor& found_inf) override;

  // Collective: gathers every rank's shard of the state onto rank `to`.
  void consolidate_state_dict(int to = 0);
  // The consolidated dict (the plain optimizer's keys over all parameters): only on the rank
  // given to the last consolidate_state_dict (throws elsewhere, and after a later step); at
  // world size 1 always available.
  std::map<std::string, Tensor> state_dict() const override;
  // A consolidated (or plain optimizer's) dict saved at any world size; not collective: every
  // rank validates it (parameter count, shapes) and keeps the state of its own parameters.
  void load_state_dict(const std::map<std::string, Tensor>& sd) override;
  // This rank's shard: the plain key scheme with GLOBAL parameter indices ("state.<i>.*" for
  // owned parameters only, every "param_groups.*" entry). The union of all ranks' shards is the
  // consolidated dict.
  std::map<std::string, Tensor> local_state_dict() const;
  // Shards saved at any world size (all of them): merged, then load_state_dict.
  void load_sharded_state_dicts(const std::vector<std::map<std::string, Tensor>>& shards);

  // load_checkpoint's rollback (optim/optimizer.h): the local optimizer's own state_dict.
  std::map<std::string, Tensor> rollback_state() const override { return local_->state_dict(); }
  void restore_rollback_state(const std::map<std::string, Tensor>& sd) override {
    local_->load_state_dict(sd);
  }

  ZeroStats stats() const;
  int owner(size_t param_index) const { return owner_.at(param_index); }
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  ProcessGroup& process_group() const { return *group_; }
  optim::Optimizer& local_optimizer() const { return *local_; }

 private:
  void check_same_parameters();  // collective
  void partition();
  void sync_local_groups();  // options and parameter tensors -> the local groups
  void broadcast_params();   // collective
  Device comm_device() const;
  std::string where() const;  // " (rank r of n)"

  std::shared_ptr<ProcessGroup> group_;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<optim::Optimizer> local_;
  std::vector<int> owner_;                        // by global parameter index
  std::vector<std::vector<size_t>> local_index_;  // per group: global indices of local params
  std::map<std::string, Tensor> consolidated_;
  bool has_consolidated_ = false;
};

}  // namespace minidl::dist
