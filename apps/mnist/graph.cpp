// mnist_ddp --cuda-graph: the option checks and CudaGraphStep, which captures the static-shape
// training step once (after eager warm-up steps) and replays it for every later full batch.
#include "apps/mnist/graph.h"

#include <cstdlib>

#include "optim/fused.h"
#include "parallel/rendezvous/launch_env.h"

namespace mnist {

int launcher_world_size() {
  return std::max(1, minidl::dist::read_launch_env().world_size);
}

std::string cuda_graph_refusal(const std::string& device, const std::string& mode, int nproc,
                               int launched_world) {
  if (device.rfind("cuda", 0) != 0)
    return "--cuda-graph needs --device cuda (a CUDA graph replays GPU work; got --device " +
           device + ")";
  if (mode == "dp")
    return "--cuda-graph does not work with --mode dp: DataParallel scatters the batch and "
           "replicates the model on the host every step, which one captured graph cannot replay";
  const int world = std::max(nproc, mode == "single" ? 1 : launched_world);
  if (mode != "single" && world > 1)
    return "--cuda-graph does not work with DDP at world size " + std::to_string(world) +
           ": the gradient all-reduce is launched bucket by bucket from autograd hooks on the "
           "host, which a replayed graph does not run";
  if (!cuda::is_built()) return "--cuda-graph: this mnist_ddp was built without CUDA";
  return "";
}

CudaGraphStep::CudaGraphStep(nn::Module& model, optim::Optimizer& opt, Device device,
                             int64_t batch_size, int64_t warmup)
    : model_(model),
      opt_(opt),
      device_(device),
      batch_size_(batch_size),
      warmup_left_(warmup),
      loss_sum_(zeros({}, kFloat64, device)) {
  MINIDL_CHECK(device.is_cuda(), "CudaGraphStep: device ", device.str(), " is not a CUDA device");
  MINIDL_CHECK(batch_size >= 1, "CudaGraphStep: batch size must be >= 1, got ", batch_size);
}

Tensor CudaGraphStep::eager(const Tensor& x, const Tensor& y) {
  opt_.zero_grad();
  Tensor loss = nn::functional::nll_loss(model_(x.to(device_)), y.to(device_));
  loss.backward();
  opt_.step();
  return loss;
}

void CudaGraphStep::capture(const Tensor& x, const Tensor& y) {
  // A captured non-fused optimizer would bake its step count and lr into the graph.
  for (const auto& group : opt_.param_groups()) {
    auto fused = group.options.find("fused");
    std::vector<Tensor> with_grad;
    for (const Tensor& p : group.params)
      if (p.grad().defined()) with_grad.push_back(p);
    MINIDL_CHECK(
        (fused == group.options.end() || fused->second != 0) && optim::fused::usable(with_grad),
        "--cuda-graph: the optimizer step cannot be captured (it needs the fused step: "
        "every parameter a contiguous floating CUDA tensor on ",
        device_.str(), ")");
  }
  static_x_ = empty(x.shape(), x.dtype(), device_);
  static_y_ = empty(y.shape(), y.dtype(), device_);
  static_x_.copy_(x);
  static_y_.copy_(y);
  opt_.zero_grad(/*set_to_none=*/true);  // backward allocates the grads in the graph's pool
  cuda::DeviceGuard guard(device_);
  graph_.capture_begin();
  try {
    // x:[B,1,28,28] -> log-probabilities [B,10] -> loss (0-d), the graph's static output.
    Tensor loss = nn::functional::nll_loss(model_(static_x_), static_y_);
    loss.backward();
    opt_.step();
    loss_sum_ += loss.detach().to(kFloat64);
  } catch (...) {
    try {
      graph_.capture_end();
    } catch (...) {  // the first error is the one to report
    }
    throw;
  }
  graph_.capture_end();
}

void CudaGraphStep::step(const Tensor& x, const Tensor& y) {
  MINIDL_CHECK(x.dim() >= 1 && y.dim() == 1 && x.size(0) == y.size(0),
               "CudaGraphStep: batch x:", x.shape_str(), " and targets y:", y.shape_str(),
               " disagree");
  if (x.size(0) != batch_size_ || warmup_left_ > 0) {
    if (x.size(0) == batch_size_) --warmup_left_;
    loss_sum_ += eager(x, y).detach().to(kFloat64);
    ++eager_steps_;
    return;
  }
  if (!graph_.captured()) {
    capture(x, y);  // records only: the replay below runs this batch
  } else {
    // Stream-ordered after the previous replay, so it cannot overwrite inputs still in use.
    static_x_.copy_(x);
    static_y_.copy_(y);
  }
  graph_.replay();
  ++replays_;
}

double CudaGraphStep::loss_sum() {
  return loss_sum_.item<double>();
}

void CudaGraphStep::reset_loss_sum() {
  loss_sum_.zero_();
}

}  // namespace mnist
