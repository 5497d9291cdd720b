// GradScaler: PyTorch's dynamic loss scaling (READY -> UNSCALED -> STEPPED per optimizer, reset
// by update()), the scale kept on the device and updated by the amp_update_scale op, plus skip
// counters, warnings, the min_scale check and non-finite-loss reports read at step()'s sync.
#include "optim/grad_scaler.h"

#include <atomic>
#include <cmath>
#include <iostream>
#include <sstream>

#include "autograd/grad_mode.h"
#include "optim/clip_grad.h"
#include "optim/fused.h"
#include "tensor/cuda_api.h"
#include "tensor/error.h"
#include "autograd/ops.h"

namespace minidl::amp {

GradScaler::GradScaler(GradScalerOptions o) : opt_(o) {
  MINIDL_CHECK(opt_.growth_factor > 1.0, "GradScaler: The growth factor must be > 1.0 (got ",
               opt_.growth_factor, ")");
  MINIDL_CHECK(opt_.backoff_factor < 1.0 && opt_.backoff_factor > 0.0,
               "GradScaler: The backoff factor must be < 1.0 and > 0 (got ", opt_.backoff_factor,
               ")");
  MINIDL_CHECK(opt_.growth_interval > 0, "GradScaler: growth_interval must be positive (got ",
               opt_.growth_interval, ")");
  MINIDL_CHECK(opt_.init_scale > 0 && std::isfinite(opt_.init_scale),
               "GradScaler: init_scale must be positive and finite (got ", opt_.init_scale, ")");
  host_scale_ = float(opt_.init_scale);
}

GradScaler GradScaler::for_dtype(DType dt, GradScalerOptions o) {
  o.enabled = o.enabled && needs_scaler(dt);
  return GradScaler(o);
}

std::string GradScaler::where() const {
  std::ostringstream os;
  os << "step " << steps_ + 1;
  if (opt_.rank >= 0) os << " (rank " << opt_.rank << ")";
  return os.str();
}

void GradScaler::lazy_init(Device dev) {
  if (scale_.defined()) {
    MINIDL_CHECK(scale_.device() == dev, "GradScaler: the scale lives on ", scale_.device(),
                 " but this loss/gradient is on ", dev, " (", where(), ")");
    return;
  }
  scale_ = full({}, float(opt_.init_scale), kFloat32, dev);
  growth_tracker_ = full({}, int64_t(host_tracker_), kInt32, dev);
  loss_nonfinite_ = zeros({}, kFloat32, dev);
  one_ = ones({}, kFloat32, dev);
  host_scale_ = float(opt_.init_scale);
  host_known_ = true;
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!opt_.enabled) return loss;
  MINIDL_CHECK(loss.defined(), "GradScaler.scale: the loss is undefined (", where(), ")");
  lazy_init(loss.device());
  if (loss.is_floating_point()) {
    NoGradGuard guard;
    // inv_scale 1: a check only (the loss is left as is); the flag is read when step() skips.
    non_finite_check_and_unscale_({loss.detach()}, loss_nonfinite_, one_);
  }
  // PyTorch's scale is a 1-element f32 tensor, so a half loss of any shape scales in f32 (65536
  // is inf in fp16); the cast is differentiable and hands backward a half gradient again.
  if (loss.dtype() == kFloat16 || loss.dtype() == kBFloat16) return mul(loss.to(kFloat32), scale_);
  return mul(loss, scale_);
}

GradScaler::PerOpt& GradScaler::state_of(optim::Optimizer& opt) {
  return per_opt_[&opt];
}

void GradScaler::check_grads(optim::Optimizer& opt, std::vector<Tensor>& grads) {
  for (const optim::ParamGroup& g : opt.param_groups())
    for (const Tensor& p : g.params) {
      const Tensor& gr = p.grad();
      if (!gr.defined()) continue;
      MINIDL_CHECK(gr.dtype() != kFloat16, "Attempting to unscale FP16 gradients. (", where(),
                   ": keep fp32 master weights; a gradient of shape ", gr.shape_str(), " is f16)");
      MINIDL_CHECK(gr.device() == scale_.device(), "GradScaler: a gradient of shape ",
                   gr.shape_str(), " is on ", gr.device(), " but the scale is on ", scale_.device(),
                   " (", where(), ")");
      grads.push_back(gr);
    }
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!opt_.enabled) return;
  MINIDL_CHECK(scale_.defined(),
               "Attempted unscale_ but _scale is None. This may indicate your script did not use "
               "scaler.scale(loss or outputs) earlier in the iteration (",
               where(), ")");
  PerOpt& st = state_of(opt);
  MINIDL_CHECK(st.stage != Stage::kUnscaled,
               "unscale_() has already been called on this optimizer since the last update() (",
               where(), ")");
  MINIDL_CHECK(st.stage != Stage::kStepped, "unscale_() is being called after step() (", where(),
               ")");
  NoGradGuard guard;
  // inv = 1/scale in f64, then f32 (PyTorch).
  const Tensor inv = div(ones({}, kFloat64, scale_.device()), scale_.to(kFloat64)).to(kFloat32);
  std::vector<Tensor> grads;
  check_grads(opt, grads);
  st.found_inf = zeros({}, kFloat32, scale_.device());
  non_finite_check_and_unscale_(grads, st.found_inf, inv);
  if (opt_.reduce_found_inf) opt_.reduce_found_inf(st.found_inf);  // every rank's verdict
  st.stage = Stage::kUnscaled;
}

bool GradScaler::read_found_inf(const Tensor& found_inf) {
  const bool inf = found_inf.item<double>() != 0;
  if (inf && !loss_reported_ && loss_nonfinite_.item<double>() != 0) {  // skips only
    loss_reported_ = true;
    std::cerr << "minidl GradScaler warning: the loss passed to scale() is inf/NaN at " << where()
              << "; the optimizer step is skipped and the scale backed off\n";
  }
  return inf;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!opt_.enabled) {
    opt.step();
    return true;
  }
  MINIDL_CHECK(scale_.defined(),
               "Attempted step but _scale is None. This may indicate your script did not use "
               "scaler.scale(loss or outputs) earlier in the iteration (",
               where(), ")");
  PerOpt& st = state_of(opt);
  MINIDL_CHECK(st.stage != Stage::kStepped,
               "step() has already been called since the last update() (", where(), ")");
  const bool capturing = scale_.is_cuda() && cuda::is_capturing(scale_.device().index);
  if (opt.supports_amp_scaling()) {
    // PyTorch's _step_supports_amp_scaling path: the optimizer divides by the scale and skips
    // on the device. A READY optimizer gets a check-only pass (inv_scale 1) for found_inf.
    Tensor grad_scale;
    if (st.stage == Stage::kReady) {
      NoGradGuard guard;
      std::vector<Tensor> grads;
      check_grads(opt, grads);
      st.found_inf = zeros({}, kFloat32, scale_.device());
      non_finite_check_and_unscale_(grads, st.found_inf, one_);
      if (opt_.reduce_found_inf) opt_.reduce_found_inf(st.found_inf);
      grad_scale = scale_;
    }
    opt.step_with_scaling(grad_scale, st.found_inf);
    st.stage = Stage::kStepped;
    if (capturing) {
      st.found = -1;
      return true;
    }
    st.found = read_found_inf(st.found_inf) ? 1 : 0;
    return st.found == 0;
  }
  MINIDL_CHECK(
      !capturing,
      "GradScaler.step: this optimizer has no device-side AMP step (supports_amp_scaling() "
      "is false), so it cannot be captured in a CUDA graph (",
      where(), ")");
  if (st.stage == Stage::kReady) unscale_(opt);
  st.found = read_found_inf(st.found_inf) ? 1 : 0;
  if (st.found == 0) opt.step();
  st.stage = Stage::kStepped;
  return st.found == 0;
}

void GradScaler::record_skip(bool skipped) {
  last_skipped_ = skipped;
  if (!skipped) {
    consecutive_ = 0;
    warned_streak_ = false;
    return;
  }
  ++skipped_;
  ++consecutive_;
  if (opt_.warn_consecutive_skips > 0 && consecutive_ >= opt_.warn_consecutive_skips &&
      !warned_streak_) {
    warned_streak_ = true;
    std::cerr << "minidl GradScaler warning: " << consecutive_
              << " consecutive optimizer steps skipped (inf/NaN gradients) up to " << where()
              << "; loss scale now " << host_scale_
              << ". The model may be diverging or overflowing fp16; check the loss and the "
                 "learning rate\n";
  }
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!opt_.enabled) return;
  MINIDL_CHECK(scale_.defined(),
               "Attempted update but _scale is None. This may indicate your script did not use "
               "scaler.scale(loss or outputs) earlier in the iteration (",
               where(), ")");
  NoGradGuard guard;
  int found = 0;  // host view of this iteration: 0 finite, 1 inf/NaN, -1 unknown
  if (new_scale) {
    MINIDL_CHECK(*new_scale > 0, "GradScaler.update: new_scale must be positive (got ", *new_scale,
                 ", ", where(), ")");
    scale_.fill_(float(*new_scale));
    host_scale_ = float(*new_scale);
    for (auto& [o, st] : per_opt_)
      found = (found < 0 || st.found < 0) ? -1 : std::max(found, st.found);
  } else {
    Tensor total;
    for (auto& [o, st] : per_opt_) {
      if (!st.found_inf.defined()) continue;
      total = total.defined() ? add(total, st.found_inf) : st.found_inf;
      found = (found < 0 || st.found < 0) ? -1 : std::max(found, st.found);
    }
    MINIDL_CHECK(total.defined(), "No inf checks were recorded prior to update. (", where(), ")");
    amp_update_scale_(scale_, growth_tracker_, total, opt_.growth_factor, opt_.backoff_factor,
                      opt_.growth_interval);
    if (found >= 0 && host_known_) {  // the same arithmetic as the kernel
      if (found) {
        host_scale_ = float(double(host_scale_) * opt_.backoff_factor);
        host_tracker_ = 0;
      } else if (host_tracker_ + 1 == opt_.growth_interval) {
        const float grown = float(double(host_scale_) * opt_.growth_factor);
        if (std::isfinite(grown)) host_scale_ = grown;
        host_tracker_ = 0;
      } else {
        ++host_tracker_;
      }
    } else {
      host_known_ = false;
    }
  }
  if (found >= 0) record_skip(found == 1);
  ++steps_;
  per_opt_.clear();
  loss_nonfinite_.fill_(0.0);
  loss_reported_ = false;
  if (host_known_ && opt_.min_scale > 0)
    MINIDL_CHECK(host_scale_ >= opt_.min_scale, "GradScaler: the loss scale fell to ", host_scale_,
                 " (below min_scale ", opt_.min_scale, ") at step ", steps_,
                 opt_.rank >= 0 ? " on rank " + std::to_string(opt_.rank) : std::string(),
                 " after ", consecutive_,
                 " consecutive skipped steps: the gradients are inf/NaN at every scale (a "
                 "diverged model or an fp16 overflow in the forward pass)");
}

Tensor GradScaler::clip_grad_norm_(optim::Optimizer& opt, double max_norm, double norm_type) {
  if (opt_.enabled) {
    PerOpt& st = state_of(opt);
    MINIDL_CHECK(st.stage != Stage::kStepped,
                 "GradScaler.clip_grad_norm_ is being called after step() (", where(), ")");
    if (st.stage == Stage::kReady) unscale_(opt);
  }
  std::vector<Tensor> params;
  for (const optim::ParamGroup& g : opt.param_groups())
    params.insert(params.end(), g.params.begin(), g.params.end());
  return optim::clip_grad_norm_(params, max_norm, norm_type);
}

double GradScaler::get_scale() const {
  if (!opt_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<double>() : double(float(opt_.init_scale));
}

Tensor GradScaler::scale_tensor() const {
  return scale_;
}

int64_t GradScaler::growth_tracker() const {
  if (!opt_.enabled) return 0;
  return growth_tracker_.defined() ? growth_tracker_.item<int64_t>() : host_tracker_;
}

std::map<std::string, Tensor> GradScaler::state_dict() const {
  if (!opt_.enabled) return {};
  auto i64 = [](int64_t v) { return scalar_tensor(v, kInt64); };
  return {{"scale", scalar_tensor(get_scale(), kFloat32)},
          {"growth_factor", scalar_tensor(opt_.growth_factor, kFloat64)},
          {"backoff_factor", scalar_tensor(opt_.backoff_factor, kFloat64)},
          {"growth_interval", i64(opt_.growth_interval)},
          {"_growth_tracker", i64(growth_tracker())},
          {"minidl.steps", i64(steps_)},
          {"minidl.skipped_steps", i64(skipped_)},
          {"minidl.consecutive_skips", i64(consecutive_)}};
}

void GradScaler::load_state_dict(const std::map<std::string, Tensor>& sd) {
  if (!opt_.enabled) return;
  MINIDL_CHECK(!sd.empty(),
               "The source state dict is empty, possibly because it was saved from a disabled "
               "instance of GradScaler.");
  for (const char* key :
       {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"})
    MINIDL_CHECK(sd.count(key) && sd.at(key).defined() && sd.at(key).numel() == 1,
                 "GradScaler.load_state_dict: missing or non-scalar key `", key, "`");
  auto num = [&](const char* k) { return sd.at(k).item<double>(); };
  auto count = [&](const char* k) { return sd.count(k) ? sd.at(k).item<int64_t>() : int64_t(0); };
  GradScalerOptions o = opt_;
  o.init_scale = num("scale");
  o.growth_factor = num("growth_factor");
  o.backoff_factor = num("backoff_factor");
  o.growth_interval = sd.at("growth_interval").item<int64_t>();
  GradScaler check(o);  // validates the values
  opt_ = o;
  host_tracker_ = sd.at("_growth_tracker").item<int64_t>();
  host_scale_ = float(o.init_scale);
  host_known_ = true;
  if (scale_.defined()) {
    scale_.fill_(float(o.init_scale));
    growth_tracker_.fill_(host_tracker_);
  }
  steps_ = count("minidl.steps");
  skipped_ = count("minidl.skipped_steps");
  consecutive_ = count("minidl.consecutive_skips");
  last_skipped_ = consecutive_ > 0;
  warned_streak_ = opt_.warn_consecutive_skips > 0 && consecutive_ >= opt_.warn_consecutive_skips;
}

void warn_fp16_without_scaler(const std::string& where) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  std::cerr << "minidl warning: fp16 training without a GradScaler"
            << (where.empty() ? "" : " (" + where + ")")
            << ": small gradients underflow to zero in fp16; use amp::GradScaler (or bf16, which "
               "needs no scaler)\n";
}

}  // namespace minidl::amp
