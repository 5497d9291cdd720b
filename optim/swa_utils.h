// torch.optim.swa_utils (PyTorch 1.13): AveragedModel, a deep copy of a model whose parameters
// (and, with use_buffers, buffers) are running averages of the model's (SWA by default, or an
// exponential moving average with ema_avg(decay)), and update_bn, which recomputes BatchNorm
// statistics for such a model from a pass over the data.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "nn/module.h"
#include "nn/normalization.h"

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

namespace detail {
// What update_bn changes and restores: each BatchNorm layer (BatchNorm1d/2d, SyncBatchNorm) with
// its momentum, and the model's train/eval mode. The constructor resets every layer's running
// statistics (mean 0, var 1, num_batches_tracked 0), sets momentum to nullopt (a cumulative
// average over the batches) and puts the model in train mode; the destructor restores momenta
// and mode, also when a forward throws.
class UpdateBnScope {
 public:
  explicit UpdateBnScope(nn::Module& model);
  ~UpdateBnScope();
  UpdateBnScope(const UpdateBnScope&) = delete;
  UpdateBnScope& operator=(const UpdateBnScope&) = delete;
  bool empty() const { return layers_.empty(); }

 private:
  nn::Module& model_;
  bool was_training_;
  std::vector<std::pair<nn::BatchNormState*, std::optional<double>>> layers_;
};

// The model input of one batch: the tensor itself, an Example's `.data`, or the first element
// of a pair/tuple (torch: `input[0]` when the loader yields a list or tuple).
template <class B>
const Tensor& batch_input(const B& batch) {
  if constexpr (std::is_convertible_v<const B&, const Tensor&>)
    return batch;
  else if constexpr (requires { batch.data; })
    return batch.data;
  else
    return std::get<0>(batch);
}
}  // namespace detail

// torch.optim.swa_utils.update_bn(loader, model, device): recomputes the running statistics of
// every BatchNorm layer in `model` from one pass over `batches` (any range of batches: a
// DataLoader's epoch(e), a vector of Examples, tensors or (input, target) pairs). Statistics are
// reset, then averaged with equal weight per batch (momentum None), the model runs in train
// mode, and the layers' momenta and the model's mode are restored afterwards. A model without
// BatchNorm is left alone and `batches` is not read. Inputs move to `device` when given.
template <class Batches>
void update_bn(Batches&& batches, nn::Module& model, std::optional<Device> device = std::nullopt) {
  detail::UpdateBnScope scope(model);
  if (scope.empty()) return;
  NoGradGuard no_grad;  // only the statistics are wanted (torch builds a graph and drops it)
  for (auto&& batch : batches) {
    const Tensor& input = detail::batch_input(batch);
    model(device ? input.to(*device) : input);
  }
}

}  // namespace minidl::optim
