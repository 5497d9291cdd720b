// torch.optim.swa_utils.AveragedModel (PyTorch 1.13): a deep copy of a model whose parameters
// (and, with use_buffers, buffers) are running averages of the model's: SWA by default, or an
// exponential moving average with ema_avg(decay).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "nn/module.h"

namespace minidl::optim {

// (averaged, current, num_averaged) -> the new average (torch's avg_fn).
using AvgFn =
    std::function<Tensor(const Tensor& averaged, const Tensor& current, int64_t num_averaged)>;

// averaged + (current - averaged) / (num_averaged + 1): the equal-weight (SWA) average.
AvgFn swa_avg();
// decay * averaged + (1 - decay) * current (torch 2.x's get_ema_avg_fn(decay)).
AvgFn ema_avg(double decay = 0.999);

// `module` is model.clone() (copy.deepcopy), moved to `device` when given; the buffer
// `n_averaged` (0-d int64) counts updates. state_dict keys: "n_averaged", "module.<key>".
// update_parameters(model): the first update copies the model's values, later ones apply
// avg_fn, then n_averaged += 1. Without use_buffers (the default) only parameters are averaged
// and the copy's buffers stay those of the model at construction (as in 1.13: run update_bn or
// copy BatchNorm statistics yourself); with use_buffers, buffers are averaged too (integer
// buffers through the floating formula, truncated back, as torch's copy_).
class AveragedModel : public nn::Cloneable<AveragedModel> {
 public:
  explicit AveragedModel(const nn::Module& model, AvgFn avg_fn = {}, bool use_buffers = false,
                         std::optional<Device> device = std::nullopt);
  Tensor forward(const Tensor& x) override { return module->forward(x); }
  void update_parameters(const nn::Module& model);
  std::string name() const override { return "AveragedModel"; }

  std::shared_ptr<nn::Module> module;
  Tensor n_averaged;
  AvgFn avg_fn;
  bool use_buffers;
};

}  // namespace minidl::optim
