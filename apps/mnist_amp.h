// mnist_ddp --amp: builds the Apex-style AMP state (optim/amp.h) from the flags, runs one mixed
// precision training step, and reports the loss scale and skipped steps.
#pragma once
#include <memory>
#include <string>

#include "apps/mnist_trainer.h"
#include "minidl.h"

namespace mnist {

using namespace minidl;

// Checks --amp / --opt-level / --init-scale; returns "" when they are consistent, else the
// one-line error (mnist_ddp exits 2 on it).
std::string amp_flags_error(const Options& o);

class AmpRun {
 public:
  // nullptr for --amp off. Call after the optimizer is built and before DDP/DataParallel wrap
  // the model and before a checkpoint is loaded (O2 re-points the optimizer at fp32 masters).
  static std::unique_ptr<AmpRun> create(const Options& o, nn::Module& model, optim::Optimizer& opt,
                                        int rank, bool verbose);

  // zero_grad, forward + NLL loss under the level's casting, scaled backward, and the step
  // (skipped on inf/NaN gradients). Returns the unscaled loss; `applied` says if it stepped.
  Tensor train_step(nn::Module& train_module, optim::Optimizer& opt, const Tensor& x,
                    const Tensor& y, bool& applied);
  // Forward for evaluation under the same casting (log-probabilities in fp32).
  Tensor eval_forward(nn::Module& model, const Tensor& x) const;

  amp::Amp& amp() { return *amp_; }
  const amp::Amp& amp() const { return *amp_; }
  double scale() const { return amp_->scaler().get_scale(); }
  int64_t skipped_steps() const { return amp_->scaler().skipped_steps(); }
  // "amp fp16 O1"; describe() adds the loss scale for the start line ("amp fp16 O1 (loss scale
  // 65536)"); epoch_suffix() is ", scale 32768, 2 skipped" for the epoch and summary lines.
  std::string name() const;
  std::string describe() const;
  std::string epoch_suffix() const;

  // Applies a checkpoint's "amp." section; an empty one (a checkpoint written without AMP)
  // keeps the fresh state and warns once on the main rank.
  void restore(const std::map<std::string, Tensor>& amp_state, const std::string& path,
               bool main_rank);

 private:
  std::unique_ptr<amp::Amp> amp_;
  std::string dtype_name_;
};

}  // namespace mnist
