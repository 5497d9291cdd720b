// The apps' AMP glue (see amp_run.h): amp::initialize from the options, the mixed-precision
// step and the scale/skip report.
#include "apps/common/amp_run.h"

#include <cstdio>

namespace minidl::apps {

std::unique_ptr<AmpRun> AmpRun::create(const RunOptions& o, nn::Module& model,
                                       optim::Optimizer& opt, int rank, bool verbose) {
  std::string why = amp_flags_error(o);
  MINIDL_CHECK(why.empty(), why);
  if (o.amp == "off") return nullptr;
  auto run = std::unique_ptr<AmpRun>(new AmpRun());
  amp::AmpOptions ao;
  ao.opt_level = amp::parse_opt_level(o.opt_level.empty() ? "O1" : o.opt_level);
  ao.dtype = o.amp == "bf16" ? kBFloat16 : kFloat16;
  ao.scaler.init_scale = o.init_scale;
  ao.scaler.rank = rank;
  run->dtype_name_ = o.amp;
  run->amp_ = amp::initialize(model, opt, ao);
  if (verbose && ao.opt_level == amp::OptLevel::O3)
    std::printf(
        "amp: O3 runs everything in %s with loss scale 1: a speed baseline that may "
        "diverge\n",
        o.amp.c_str());
  return run;
}

Tensor AmpRun::train_step(optim::Optimizer& opt, const std::function<Tensor()>& loss_fn,
                          bool& applied, double clip_norm, double* grad_norm) {
  opt.zero_grad();
  Tensor loss;
  {
    auto region = amp_->autocast_region();
    loss = loss_fn();
  }
  amp_->backward(loss);
  if (clip_norm > 0) {
    double norm = amp_->clip_grad_norm_(clip_norm);
    if (grad_norm) *grad_norm = norm;
  }
  applied = amp_->step();
  return loss;
}

Tensor AmpRun::eval_forward(nn::Module& model, const Tensor& x) const {
  auto region = amp_->autocast_region();
  return amp_->forward(model, x).to(kFloat32);
}

std::string AmpRun::name() const {
  return "amp " + dtype_name_ + " " + std::string(amp::opt_level_name(amp_->opt_level()));
}

std::string AmpRun::describe() const {
  std::string s = name();
  if (amp_->scaling()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " (loss scale %g)", scale());
    s += buf;
  }
  return s;
}

std::string AmpRun::epoch_suffix() const {
  char buf[96];
  std::snprintf(buf, sizeof buf, ", scale %g, %lld skipped", scale(), (long long)skipped_steps());
  return buf;
}

void AmpRun::restore(const std::map<std::string, Tensor>& amp_state, const std::string& path,
                     bool main_rank) {
  if (amp_state.empty()) {
    if (main_rank)
      std::fprintf(stderr,
                   "warning: checkpoint '%s' has no AMP state; starting --amp %s with a fresh "
                   "loss scaler\n",
                   path.c_str(), dtype_name_.c_str());
    amp_->reset_masters_from_model();
    return;
  }
  amp_->load_state_dict(amp_state);
}

}  // namespace minidl::apps
