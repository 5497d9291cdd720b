// AveragedModel.update_parameters (under NoGradGuard) and update_bn's save/reset/restore of the
// BatchNorm layers (torch.optim.swa_utils).
#include "optim/swa_utils.h"

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace minidl::optim {

AvgFn swa_avg() {
  return [](const Tensor& avg, const Tensor& cur, int64_t n) {
    return add(avg, div(sub(cur, avg), Scalar(double(n + 1))));
  };
}

AvgFn ema_avg(double decay) {
  MINIDL_CHECK(decay >= 0 && decay <= 1, "ema_avg: decay must be in [0, 1], got ", decay);
  return [decay](const Tensor& avg, const Tensor& cur, int64_t) {
    return add(mul(avg, Scalar(decay)), mul(cur, Scalar(1 - decay)));
  };
}

AveragedModel::AveragedModel(const nn::Module& model, AvgFn fn, bool buffers,
                             std::optional<Device> device)
    : avg_fn(fn ? std::move(fn) : swa_avg()), use_buffers(buffers) {
  module = model.clone();
  if (device) module->to(*device);
  register_module("module", &module);
  n_averaged = zeros({}, kInt64, device.value_or(kCPU));
  register_buffer("n_averaged", &n_averaged);
}

void AveragedModel::update_parameters(const nn::Module& model) {
  std::vector<Tensor> mine = module->parameters(), theirs = model.parameters();
  if (use_buffers) {
    for (const Tensor& b : module->buffers()) mine.push_back(b);
    for (const Tensor& b : model.buffers()) theirs.push_back(b);
  }
  MINIDL_CHECK(mine.size() == theirs.size(), "AveragedModel.update_parameters: the averaged ",
               "model has ", mine.size(), " parameters", use_buffers ? " and buffers" : "",
               ", the given model ", theirs.size());
  for (size_t i = 0; i < mine.size(); ++i)
    MINIDL_CHECK(mine[i].shape() == theirs[i].shape(),
                 "AveragedModel.update_parameters: ", "tensor ", i, " has shape ",
                 mine[i].shape_str(), " in the averaged model and ", theirs[i].shape_str(),
                 " in the given model");
  NoGradGuard no_grad;
  const int64_t n = n_averaged.item<int64_t>();
  for (size_t i = 0; i < mine.size(); ++i) {
    Tensor swa = mine[i].detach();
    Tensor cur = theirs[i].detach().to(swa.device());
    if (n == 0)
      swa.copy_(cur);
    else
      swa.copy_(avg_fn(swa, cur, n));
  }
  add_(n_averaged, Scalar(1));
}

namespace detail {

UpdateBnScope::UpdateBnScope(nn::Module& model)
    : model_(model), was_training_(model.is_training()) {
  model.apply([&](nn::Module& m) {
    auto* bn = dynamic_cast<nn::BatchNormState*>(&m);
    if (bn == nullptr) return;
    for (const auto& [seen, momentum] : layers_)
      if (seen == bn) return;  // a layer shared by two parents
    layers_.emplace_back(bn, bn->opt.momentum);
  });
  NoGradGuard no_grad;
  for (auto& [bn, momentum] : layers_) {
    // torch's reset_running_stats (a layer without running stats is left as it is)
    if (bn->running_mean.defined()) bn->running_mean.zero_();
    if (bn->running_var.defined()) bn->running_var.fill_(Scalar(1.0));
    if (bn->num_batches_tracked.defined()) bn->num_batches_tracked.zero_();
    bn->opt.momentum = std::nullopt;
  }
  if (!layers_.empty()) model.train(true);
}

UpdateBnScope::~UpdateBnScope() {
  for (auto& [bn, momentum] : layers_) bn->opt.momentum = momentum;
  if (!layers_.empty()) model_.train(was_training_);
}

}  // namespace detail

}  // namespace minidl::optim
