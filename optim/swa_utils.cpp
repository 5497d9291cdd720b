// AveragedModel: torch.optim.swa_utils.AveragedModel.update_parameters, under NoGradGuard.
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

}  // namespace minidl::optim
