// mnist_ddp's AMP glue (see mnist_amp.h): flag checks, amp::initialize from the options, the
// mixed-precision step and the scale/skip report.
#include "apps/mnist_amp.h"

#include <cstdio>

namespace mnist {

std::string amp_flags_error(const Options& o) {
  if (o.amp != "off" && o.amp != "bf16" && o.amp != "fp16")
    return "--amp must be off, bf16 or fp16, got '" + o.amp + "'";
  if (o.amp == "off" && !o.opt_level.empty())
    return "--opt-level " + o.opt_level + " needs --amp bf16 or --amp fp16";
  if (!o.opt_level.empty() && o.opt_level != "O0" && o.opt_level != "O1" && o.opt_level != "O2" &&
      o.opt_level != "O3")
    return "--opt-level must be O0, O1, O2 or O3, got '" + o.opt_level + "'";
  if (!(o.init_scale > 0)) return "--init-scale must be > 0";
  if (o.amp != "off" && o.cuda_graph)
    return "--cuda-graph does not support --amp yet (run the AMP step eagerly)";
  return "";
}

std::unique_ptr<AmpRun> AmpRun::create(const Options& o, nn::Module& model, optim::Optimizer& opt,
                                       int rank, bool verbose) {
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

Tensor AmpRun::train_step(nn::Module& train_module, optim::Optimizer& opt, const Tensor& x,
                          const Tensor& y, bool& applied) {
  opt.zero_grad();
  Tensor loss;
  {
    auto region = amp_->autocast_region();
    loss = nn::functional::nll_loss(amp_->forward(train_module, x), y);
  }
  amp_->backward(loss);
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

}  // namespace mnist
