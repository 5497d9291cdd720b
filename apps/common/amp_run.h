// The apps' --amp: builds the Apex-style AMP state (optim/amp.h) from the flags, runs one mixed
// precision training step (autocast forward + loss, scaled backward, unscaled clipping, step),
// and reports the loss scale and skipped steps.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "apps/common/run_options.h"
#include "minidl.h"

namespace minidl::apps {

class AmpRun {
 public:
  // nullptr for --amp off. Call after the optimizer is built and before DDP/DataParallel wrap
  // the model and before a checkpoint is loaded (O2 re-points the optimizer at fp32 masters).
  static std::unique_ptr<AmpRun> create(const RunOptions& o, nn::Module& model,
                                        optim::Optimizer& opt, int rank, bool verbose);

  // zero_grad, `loss_fn` (forward + loss, called inside the level's autocast region; use
  // forward() below for the model call), scaled backward, clipping of the unscaled gradients to
  // `clip_norm` (0: none; the total norm goes to *grad_norm) and the step (skipped on inf/NaN
  // gradients). Returns the unscaled loss; `applied` says if it stepped.
  Tensor train_step(optim::Optimizer& opt, const std::function<Tensor()>& loss_fn, bool& applied,
                    double clip_norm = 0, double* grad_norm = nullptr);
  // model(x) under the level's casting: O2/O3 cast floating inputs to half and the output to f32.
  Tensor forward(nn::Module& model, const Tensor& x) const { return amp_->forward(model, x); }
  // Forward for evaluation inside the autocast region (output in fp32).
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

}  // namespace minidl::apps
