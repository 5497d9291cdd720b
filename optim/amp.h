// Apex-style AMP opt levels on top of autocast and GradScaler: amp::initialize(model, optimizer,
// "O0".."O3", dtype) sets up casting, loss scaling and (O2) fp32 master weights; one object
// then scales the loss, steps, and saves/restores its state in checkpoints.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "autograd/autocast.h"

namespace minidl::amp {

// O0: fp32, no scaling (the accuracy baseline). O1: autocast + dynamic loss scaling (fp16).
// O2: the model in half except normalisation layers, fp32 master weights stepped by the
// optimizer and copied back, dynamic loss scaling (fp16). O3: everything half, scale 1 (a speed
// baseline that may diverge). bf16 never scales (its range is fp32's).
enum class OptLevel { O0, O1, O2, O3 };
OptLevel parse_opt_level(std::string_view s);  // "O0".."O3"; error otherwise
std::string_view opt_level_name(OptLevel level);

struct AmpOptions {
  OptLevel opt_level = OptLevel::O1;
  DType dtype = kFloat16;  // kFloat16 | kBFloat16
  // O2: keep BatchNorm/LayerNorm/GroupNorm/RMSNorm parameters in fp32 (Apex's default).
  bool keep_norm_fp32 = true;
  GradScalerOptions scaler;  // used for fp16 at O1/O2 (init_scale, growth_interval, ...)
};

// Names of the normalisation layers O2 keeps in fp32.
bool is_norm_layer(const nn::Module& m);

// What amp::initialize returns. The training loop with it:
//   auto amp = amp::initialize(*model, *opt, {.opt_level = OptLevel::O1, .dtype = kFloat16});
//   opt->zero_grad();
//   { auto ac = amp->autocast(); loss = loss_fn(amp->forward(*model, x), y); }
//   amp->backward(loss);               // scaled backward
//   amp->clip_grad_norm_(1.0);         // optional: unscales first, exactly once
//   bool applied = amp->step();        // skip on inf/NaN, O2 master copy, scaler update
//   if (applied) scheduler->step();
class Amp {
 public:
  Amp(nn::Module& model, optim::Optimizer& opt, AmpOptions options);
  Amp(const Amp&) = delete;
  Amp& operator=(const Amp&) = delete;

  OptLevel opt_level() const { return opt_.opt_level; }
  DType dtype() const { return opt_.dtype; }
  Device device() const { return device_; }
  // The dtype the model's (non-norm) parameters and activations have: f32 at O0/O1.
  DType model_dtype() const;
  bool scaling() const { return scaler_.is_enabled(); }

  // An autocast region for the forward pass: enabled at O1, a no-op guard otherwise.
  autocast autocast_region() const;
  // O2/O3: floating inputs are cast to half and the output back to f32 (Apex casts model
  // outputs to float so the loss is computed in fp32); O0/O1: model(x) as is.
  Tensor forward(nn::Module& model, const Tensor& x) const;
  Tensor forward(nn::Module& model, const std::vector<Tensor>& inputs) const;  // model(x, mask)
  Tensor cast_input(const Tensor& x) const;
  Tensor cast_output(const Tensor& y) const;

  Tensor scale_loss(const Tensor& loss) { return scaler_.scale(loss); }
  void backward(const Tensor& loss);  // scale_loss(loss).backward()
  // Unscales (once per step) and clips the optimizer's (master) gradients; the total norm
  // (0-d tensor on the device).
  Tensor clip_grad_norm_(double max_norm, double norm_type = 2.0);
  // Applies the optimizer step unless a gradient is inf/NaN; O2 copies master weights into the
  // model; updates the scale. Returns whether the update was applied.
  bool step();

  GradScaler& scaler() { return scaler_; }
  const GradScaler& scaler() const { return scaler_; }
  // The fp32 master copies (O2; empty otherwise), in the model's parameter order.
  const std::vector<Tensor>& master_params() const { return master_; }
  // O2: sets the masters to the model's current (half) weights, e.g. after loading model
  // weights from a checkpoint that has no AMP state.
  void reset_masters_from_model();

  // "opt_level" / "dtype" (0-d int64), "scaler.<key>", "master.<i>" (O2).
  std::map<std::string, Tensor> state_dict() const;
  // Validates everything (level, dtype, master shapes) before changing anything.
  void load_state_dict(const std::map<std::string, Tensor>& sd);

 private:
  void master_grads_from_model();  // O2: model half grads -> master fp32 grads
  nn::Module& model_;
  optim::Optimizer& optimizer_;
  AmpOptions opt_;
  Device device_;
  GradScaler scaler_;
  std::vector<Tensor> model_params_;  // O2: the half parameters mastered by master_
  std::vector<Tensor> master_;
};

// Casts the model / re-points the optimizer for the level (see Amp). The optimizer must have
// been built on the model's parameters (its state empty: build it, then initialize, then
// load a checkpoint). O3 prints nothing; apps say that it may diverge.
std::unique_ptr<Amp> initialize(nn::Module& model, optim::Optimizer& opt, AmpOptions options);
std::unique_ptr<Amp> initialize(nn::Module& model, optim::Optimizer& opt,
                                std::string_view opt_level, DType dtype);

}  // namespace minidl::amp
