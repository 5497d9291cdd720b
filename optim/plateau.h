// torch.optim.lr_scheduler.ReduceLROnPlateau (PyTorch 1.13): multiplies each group's lr by
// `factor` once a metric has not improved for more than `patience` steps.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace minidl::optim {

struct PlateauOptions {
  std::string mode = "min";  // "min": lower is better; "max": higher is better
  double factor = 0.1;       // new_lr = lr * factor (< 1)
  int64_t patience = 10;     // bad steps tolerated before reducing
  double threshold = 1e-4;
  std::string threshold_mode = "rel";  // rel: best*(1 -+ threshold); abs: best -+ threshold
  int64_t cooldown = 0;                // steps after a reduction during which bad steps are ignored
  std::vector<double> min_lr = {0};    // one value for every group, or one per group
  double eps = 1e-8;                   // a reduction smaller than eps is skipped
};

// Not an LRScheduler (as in PyTorch 1.13): step(metric) after each validation.
// state_dict keys (0-d f64 tensors): "factor", "patience", "threshold", "cooldown",
// "cooldown_counter", "best", "num_bad_epochs", "mode_worse", "eps", "last_epoch",
// "mode" (0 min, 1 max), "threshold_mode" (0 rel, 1 abs), "min_lrs.<g>", "last_lr.<g>".
class ReduceLROnPlateau {
 public:
  explicit ReduceLROnPlateau(Optimizer& opt, PlateauOptions options = {});
  ReduceLROnPlateau(const ReduceLROnPlateau&) = delete;
  ReduceLROnPlateau& operator=(const ReduceLROnPlateau&) = delete;

  // One epoch's metric (e.g. a validation loss): updates best / num_bad_epochs / cooldown and
  // reduces the lrs when num_bad_epochs > patience.
  void step(double metric);
  bool is_better(double a, double best) const;
  bool in_cooldown() const { return cooldown_counter_ > 0; }

  const std::vector<double>& get_last_lr() const { return last_lr_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t cooldown_counter() const { return cooldown_counter_; }
  int64_t last_epoch() const { return last_epoch_; }
  const PlateauOptions& options() const { return opt_; }
  Optimizer& optimizer() { return optimizer_; }

  std::map<std::string, Tensor> state_dict() const;
  // Validates every key first (errors name the key), then replaces the whole state.
  void load_state_dict(const std::map<std::string, Tensor>& sd);

 private:
  void reduce_lr();
  Optimizer& optimizer_;
  PlateauOptions opt_;
  std::vector<double> min_lrs_, last_lr_;
  double best_ = 0, mode_worse_ = 0;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

}  // namespace minidl::optim
