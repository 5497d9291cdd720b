// Learning-rate schedulers (torch.optim.lr_scheduler): chainable recursive updates of each param
// group's "lr", computed exactly like PyTorch 1.13 so values match to rounding.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace minidl::optim {

// Construction (last_epoch = -1 only) sets each group's "initial_lr" (if absent) and applies the
// epoch-0 lr. step() advances last_epoch and writes the new lrs into the groups.
// state_dict keys: "last_epoch", "step_count", "base_lrs.<g>", "last_lr.<g>" (0-d f64), the
// constructor's hyper-parameters under PyTorch's names ("step_size", "gamma", "milestones",
// "T_max", "eta_min", "start_factor", "end_factor", "total_iters", "total_steps", ...), and
// SequentialLR/ChainedScheduler's children as "schedulers.<k>.<key>". load_state_dict restores
// the hyper-parameters too (as torch does), warning when a loaded value replaces a different
// constructed one; a state dict saved before they were recorded keeps the constructed values.
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& opt);
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  virtual void step();
  // PyTorch's step(epoch): sets last_epoch and uses the closed form where one exists.
  void step_to(int64_t epoch);
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  Optimizer& optimizer() { return opt_; }

  virtual std::map<std::string, Tensor> state_dict() const;
  virtual void load_state_dict(const std::map<std::string, Tensor>& sd);
  virtual std::string name() const = 0;  // "CosineAnnealingLR"

 protected:
  // One constructor argument kept in state_dict (exactly one pointer set).
  struct HyperParam {
    std::string key;  // PyTorch's attribute name
    double* f64 = nullptr;
    int64_t* i64 = nullptr;
    bool* flag = nullptr;
  };
  virtual std::vector<HyperParam> hyper_params() { return {}; }
  virtual std::vector<double> get_lr() = 0;  // recursive form at last_epoch_
  virtual bool has_closed_form() const { return false; }
  virtual std::vector<double> closed_form_lr() { return get_lr(); }
  void initial_step();  // PyTorch's _initial_step; call at the end of each constructor
  void apply(const std::vector<double>& lrs);
  std::vector<double> group_lrs() const;

  friend class SequentialLR;
  friend class ChainedScheduler;
  Optimizer& opt_;
  std::vector<double> base_lrs_, last_lr_;
  int64_t last_epoch_ = -1, step_count_ = 0;
};

// lr *= gamma every step_size epochs.
class StepLR : public LRScheduler {
 public:
  std::string name() const override { return "StepLR"; }
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<HyperParam> hyper_params() override;
  std::vector<double> get_lr() override;
  bool has_closed_form() const override { return true; }
  std::vector<double> closed_form_lr() override;
  int64_t step_size_;
  double gamma_;
};

// lr *= gamma^(count) at each milestone epoch (repeated milestones count several times).
class MultiStepLR : public LRScheduler {
 public:
  std::string name() const override { return "MultiStepLR"; }
  MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1);
  std::map<std::string, Tensor> state_dict() const override;  // + "milestones" (int64 [n])
  void load_state_dict(const std::map<std::string, Tensor>& sd) override;

 protected:
  std::vector<HyperParam> hyper_params() override;
  std::vector<double> get_lr() override;
  bool has_closed_form() const override { return true; }
  std::vector<double> closed_form_lr() override;
  std::map<int64_t, int> milestones_;
  double gamma_;
};

// lr *= gamma every epoch.
class ExponentialLR : public LRScheduler {
 public:
  std::string name() const override { return "ExponentialLR"; }
  ExponentialLR(Optimizer& opt, double gamma);

 protected:
  std::vector<HyperParam> hyper_params() override;
  std::vector<double> get_lr() override;
  bool has_closed_form() const override { return true; }
  std::vector<double> closed_form_lr() override;
  double gamma_;
};

// Cosine annealing from the base lr to eta_min over T_max epochs (then back up, periodically).
class CosineAnnealingLR : public LRScheduler {
 public:
  std::string name() const override { return "CosineAnnealingLR"; }
  CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min = 0);

 protected:
  std::vector<HyperParam> hyper_params() override;
  std::vector<double> get_lr() override;
  bool has_closed_form() const override { return true; }
  std::vector<double> closed_form_lr() override;
  int64_t T_max_;
  double eta_min_;
};

// Linear ramp of the lr factor from start_factor to end_factor over total_iters epochs.
class LinearLR : public LRScheduler {
 public:
  std::string name() const override { return "LinearLR"; }
  LinearLR(Optimizer& opt, double start_factor = 1.0 / 3, double end_factor = 1.0,
           int64_t total_iters = 5);

 protected:
  std::vector<HyperParam> hyper_params() override;
  std::vector<double> get_lr() override;
  bool has_closed_form() const override { return true; }
  std::vector<double> closed_form_lr() override;
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// One-cycle policy (cos annealing, two phases): lr from max_lr/div_factor up to max_lr over
// pct_start of total_steps, then down to initial_lr/final_div_factor. With cycle_momentum, the
// groups' "momentum" (SGD) or "beta1" (Adam) goes from max_momentum down to base_momentum and
// back. Sets the groups' "initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum".
class OneCycleLR : public LRScheduler {
 public:
  std::string name() const override { return "OneCycleLR"; }
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start = 0.3,
             double div_factor = 25, double final_div_factor = 1e4, bool cycle_momentum = true,
             double base_momentum = 0.85, double max_momentum = 0.95);

 protected:
  std::vector<HyperParam> hyper_params() override;
  std::vector<double> get_lr() override;  // errors past total_steps
  int64_t total_steps_;
  double phase1_end_;
  bool cycle_momentum_;
  std::string momentum_key_;  // "momentum" or "beta1"
};

// Runs schedulers[k] between milestones[k-1] and milestones[k] (restarting it at epoch 0).
class SequentialLR : public LRScheduler {
 public:
  std::string name() const override { return "SequentialLR"; }
  SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  void step() override;
  std::map<std::string, Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, Tensor>& sd) override;

 protected:
  std::vector<double> get_lr() override { return last_lr_; }
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// Steps every scheduler (all on the same optimizer) each step.
class ChainedScheduler : public LRScheduler {
 public:
  std::string name() const override { return "ChainedScheduler"; }
  explicit ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers);
  void step() override;
  std::map<std::string, Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, Tensor>& sd) override;

 protected:
  std::vector<double> get_lr() override { return last_lr_; }
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
};

}  // namespace minidl::optim
