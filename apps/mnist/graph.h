// mnist_ddp --cuda-graph: the training step (forward, NLL loss, backward, optimizer step) of the
// static-shape batch captured once in a CUDA graph and replayed; other batch sizes run eagerly.
#pragma once
#include <cstdint>
#include <string>

#include "minidl.h"

namespace mnist {

using namespace minidl;

// Why --cuda-graph cannot run with these options ("" when it can): it needs a CUDA build and a
// CUDA device, one process and one replica. `launched_world` is the world size a launcher
// announced in the environment (1 when none).
std::string cuda_graph_refusal(const std::string& device, const std::string& mode, int nproc,
                               int launched_world);
// The world size a launcher announced (torchrun, mpirun, srun; parallel/rendezvous/launch_env.h),
// or 1.
int launcher_world_size();

// Runs training steps of `model` with `opt` on `device`. The first `warmup` full batches run
// eagerly (optimizer state, cuDNN/cuBLAS plans); the next one is captured after
// zero_grad(set_to_none), so its gradients live in the graph's pool; later full batches are
// copied into the static inputs and replayed. Batches of another size (the last, partial one)
// run eagerly. The per-step loss is summed on the device; reading it is the only sync.
class CudaGraphStep {
 public:
  CudaGraphStep(nn::Module& model, optim::Optimizer& opt, Device device, int64_t batch_size,
                int64_t warmup = 3);
  // x:[b,1,28,28] f32, y:[b] i64, on any device.
  void step(const Tensor& x, const Tensor& y);
  double loss_sum();  // sum of the step losses since the last reset (synchronises)
  void reset_loss_sum();
  int64_t replays() const { return replays_; }
  int64_t eager_steps() const { return eager_steps_; }

 private:
  Tensor eager(const Tensor& x, const Tensor& y);
  void capture(const Tensor& x, const Tensor& y);
  nn::Module& model_;
  optim::Optimizer& opt_;
  Device device_;
  int64_t batch_size_, warmup_left_;
  Tensor static_x_, static_y_;  // the graph's inputs: [B,1,28,28], [B]
  Tensor loss_sum_;             // 0-d f64 on the device
  cuda::CUDAGraph graph_;
  int64_t replays_ = 0, eager_steps_ = 0;
};

}  // namespace mnist
