// LR schedulers: PyTorch 1.13's recursive get_lr formulas (and closed forms for step(epoch))
// and OneCycleLR with momentum cycling (SequentialLR and ChainedScheduler:
// lr_scheduler_composite.cpp).
#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>

#include "tensor/error.h"
#include "tensor/warning.h"
#include "autograd/ops.h"

namespace minidl::optim {

LRScheduler::LRScheduler(Optimizer& opt) : opt_(opt) {
  for (ParamGroup& g : opt_.param_groups()) {
    g.options.emplace("initial_lr", g.lr());
    base_lrs_.push_back(g.get("initial_lr"));
  }
  last_lr_ = group_lrs();
}

std::vector<double> LRScheduler::group_lrs() const {
  std::vector<double> v;
  for (const ParamGroup& g : opt_.param_groups()) v.push_back(g.lr());
  return v;
}

void LRScheduler::apply(const std::vector<double>& lrs) {
  auto& groups = opt_.param_groups();
  for (size_t i = 0; i < groups.size() && i < lrs.size(); ++i) groups[i].lr() = lrs[i];
  last_lr_ = group_lrs();
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  step();
}

void LRScheduler::step() {
  ++step_count_;
  ++last_epoch_;
  apply(get_lr());
}

void LRScheduler::step_to(int64_t epoch) {
  ++step_count_;
  last_epoch_ = epoch;
  apply(has_closed_form() ? closed_form_lr() : get_lr());
}

std::map<std::string, Tensor> LRScheduler::state_dict() const {
  std::map<std::string, Tensor> sd;
  for (const HyperParam& h : const_cast<LRScheduler*>(this)->hyper_params()) {
    const double v = h.f64 ? *h.f64 : h.i64 ? double(*h.i64) : double(*h.flag);
    sd[h.key] = scalar_tensor(v, kFloat64);
  }
  sd["last_epoch"] = scalar_tensor(double(last_epoch_), kFloat64);
  sd["step_count"] = scalar_tensor(double(step_count_), kFloat64);
  for (size_t i = 0; i < base_lrs_.size(); ++i)
    sd["base_lrs." + std::to_string(i)] = scalar_tensor(base_lrs_[i], kFloat64);
  for (size_t i = 0; i < last_lr_.size(); ++i)
    sd["last_lr." + std::to_string(i)] = scalar_tensor(last_lr_[i], kFloat64);
  return sd;
}

// 0.1 -> "0.1", 100 -> "100", 1e-05 (the shortest form that reads back as v).
static std::string number_str(double v) {
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.17g", v);
  for (int p = 1; p <= 17; ++p) {
    char shorter[32];
    std::snprintf(shorter, sizeof shorter, "%.*g", p, v);
    if (std::strtod(shorter, nullptr) == v) return shorter;
  }
  return buf;
}

static double scalar_at(const std::map<std::string, Tensor>& sd, const std::string& key) {
  auto it = sd.find(key);
  MINIDL_CHECK(it != sd.end(), "lr_scheduler load_state_dict: missing key `", key, "`");
  MINIDL_CHECK(it->second.numel() == 1, "lr_scheduler load_state_dict: key `", key,
               "` must be a scalar, got shape ", it->second.shape_str());
  return it->second.item<double>();
}

void LRScheduler::load_state_dict(const std::map<std::string, Tensor>& sd) {
  const size_t n = opt_.param_groups().size();
  std::vector<double> base(n), last(n);
  for (size_t i = 0; i < n; ++i) {
    base[i] = scalar_at(sd, "base_lrs." + std::to_string(i));
    last[i] = scalar_at(sd, "last_lr." + std::to_string(i));
  }
  MINIDL_CHECK(!sd.count("base_lrs." + std::to_string(n)), "lr_scheduler load_state_dict: the ",
               "state dict has more than ", n, " param group(s)");
  // Hyper-parameters: all read before any is set (a bad key changes nothing).
  std::vector<std::pair<const HyperParam*, double>> loaded;
  const std::vector<HyperParam> hyper = hyper_params();
  for (const HyperParam& h : hyper)
    if (sd.count(h.key)) loaded.emplace_back(&h, scalar_at(sd, h.key));
  last_epoch_ = int64_t(scalar_at(sd, "last_epoch"));
  step_count_ = int64_t(scalar_at(sd, "step_count"));
  base_lrs_ = std::move(base);
  last_lr_ = std::move(last);
  for (const auto& [h, v] : loaded) {
    const double constructed = h->f64 ? *h->f64 : h->i64 ? double(*h->i64) : double(*h->flag);
    if (v != constructed)
      warn(name() + ".load_state_dict: " + h->key + " = " + number_str(v) +
           " from the state dict replaces the constructed " + number_str(constructed));
    if (h->f64) *h->f64 = v;
    if (h->i64) *h->i64 = int64_t(v);
    if (h->flag) *h->flag = v != 0;
  }
}

// ---- hyper-parameters per scheduler (PyTorch's attribute names)
std::vector<LRScheduler::HyperParam> StepLR::hyper_params() {
  return {{.key = "step_size", .i64 = &step_size_}, {.key = "gamma", .f64 = &gamma_}};
}
std::vector<LRScheduler::HyperParam> MultiStepLR::hyper_params() {
  return {{.key = "gamma", .f64 = &gamma_}};
}
std::vector<LRScheduler::HyperParam> ExponentialLR::hyper_params() {
  return {{.key = "gamma", .f64 = &gamma_}};
}
std::vector<LRScheduler::HyperParam> CosineAnnealingLR::hyper_params() {
  return {{.key = "T_max", .i64 = &T_max_}, {.key = "eta_min", .f64 = &eta_min_}};
}
std::vector<LRScheduler::HyperParam> LinearLR::hyper_params() {
  return {{.key = "start_factor", .f64 = &start_factor_},
          {.key = "end_factor", .f64 = &end_factor_},
          {.key = "total_iters", .i64 = &total_iters_}};
}
std::vector<LRScheduler::HyperParam> OneCycleLR::hyper_params() {
  return {{.key = "total_steps", .i64 = &total_steps_},
          {.key = "phase1_end", .f64 = &phase1_end_},
          {.key = "cycle_momentum", .flag = &cycle_momentum_}};
}

// MultiStepLR's milestones (with repeats) as int64 [n].
std::map<std::string, Tensor> MultiStepLR::state_dict() const {
  std::map<std::string, Tensor> sd = LRScheduler::state_dict();
  std::vector<int64_t> list;
  for (const auto& [m, count] : milestones_) list.insert(list.end(), size_t(count), m);
  sd["milestones"] = tensor(list, Shape{int64_t(list.size())});
  return sd;
}
void MultiStepLR::load_state_dict(const std::map<std::string, Tensor>& sd) {
  std::map<int64_t, int> loaded;
  auto it = sd.find("milestones");
  if (it != sd.end()) {
    MINIDL_CHECK(it->second.dim() == 1 && !it->second.is_floating_point(),
                 "MultiStepLR load_state_dict: `milestones` must be a 1-D integer tensor, got ",
                 it->second.shape_str(), " ", it->second.dtype());
    const Tensor m = it->second.to(kInt64).contiguous();
    for (int64_t i = 0; i < m.numel(); ++i) ++loaded[m.data_ptr<int64_t>()[i]];
  }
  LRScheduler::load_state_dict(sd);
  if (it == sd.end() || loaded == milestones_) return;
  auto str = [](const std::map<int64_t, int>& ms) {
    std::string r = "[";
    for (const auto& [m, count] : ms)
      for (int c = 0; c < count; ++c) r += (r.size() > 1 ? ", " : "") + std::to_string(m);
    return r + "]";
  };
  warn("MultiStepLR.load_state_dict: milestones = " + str(loaded) +
       " from the state dict replace the constructed " + str(milestones_));
  milestones_ = std::move(loaded);
}

// ---- StepLR / MultiStepLR / ExponentialLR
StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  MINIDL_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  initial_step();
}
std::vector<double> StepLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}
std::vector<double> StepLR::closed_form_lr() {
  std::vector<double> lrs = base_lrs_;
  for (double& lr : lrs) lr *= std::pow(gamma_, double(last_epoch_ / step_size_));
  return lrs;
}

MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(opt), gamma_(gamma) {
  for (int64_t m : milestones) ++milestones_[m];
  initial_step();
}
std::vector<double> MultiStepLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  auto it = milestones_.find(last_epoch_);
  if (it == milestones_.end()) return lrs;
  for (double& lr : lrs) lr *= std::pow(gamma_, double(it->second));
  return lrs;
}
std::vector<double> MultiStepLR::closed_form_lr() {
  int n = 0;
  for (const auto& [m, c] : milestones_)
    if (m <= last_epoch_) n += c;
  std::vector<double> lrs = base_lrs_;
  for (double& lr : lrs) lr *= std::pow(gamma_, double(n));
  return lrs;
}

ExponentialLR::ExponentialLR(Optimizer& opt, double gamma) : LRScheduler(opt), gamma_(gamma) {
  initial_step();
}
std::vector<double> ExponentialLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}
std::vector<double> ExponentialLR::closed_form_lr() {
  std::vector<double> lrs = base_lrs_;
  for (double& lr : lrs) lr *= std::pow(gamma_, double(last_epoch_));
  return lrs;
}

// ---- CosineAnnealingLR
CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min)
    : LRScheduler(opt), T_max_(T_max), eta_min_(eta_min) {
  MINIDL_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be positive, got ", T_max);
  initial_step();
}
std::vector<double> CosineAnnealingLR::get_lr() {
  constexpr double pi = std::numbers::pi;
  std::vector<double> lrs = group_lrs();
  const double T = double(T_max_), e = double(last_epoch_);
  if (last_epoch_ == 0) return lrs;
  if (step_count_ == 1 && last_epoch_ > 0) return closed_form_lr();
  if ((last_epoch_ - 1 - T_max_) % (2 * T_max_) == 0) {
    for (size_t i = 0; i < lrs.size(); ++i)
      lrs[i] = lrs[i] + (base_lrs_[i] - eta_min_) * (1 - std::cos(pi / T)) / 2;
    return lrs;
  }
  for (double& lr : lrs)
    lr = (1 + std::cos(pi * e / T)) / (1 + std::cos(pi * (e - 1) / T)) * (lr - eta_min_) + eta_min_;
  return lrs;
}
std::vector<double> CosineAnnealingLR::closed_form_lr() {
  std::vector<double> lrs = base_lrs_;
  for (double& lr : lrs)
    lr = eta_min_ + (lr - eta_min_) *
                        (1 + std::cos(std::numbers::pi * double(last_epoch_) / double(T_max_))) / 2;
  return lrs;
}

// ---- LinearLR
LinearLR::LinearLR(Optimizer& opt, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(opt),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  MINIDL_CHECK(start_factor > 0 && start_factor <= 1,
               "LinearLR: Starting multiplicative factor expected to be greater than 0 and less "
               "or equal to 1, got ",
               start_factor);
  MINIDL_CHECK(end_factor >= 0 && end_factor <= 1,
               "LinearLR: Ending multiplicative factor expected to be between 0 and 1, got ",
               end_factor);
  initial_step();
}
std::vector<double> LinearLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr *= start_factor_;
    return lrs;
  }
  if (last_epoch_ > total_iters_) return lrs;
  const double d = end_factor_ - start_factor_;
  for (double& lr : lrs)
    lr *= 1. + d / (double(total_iters_) * start_factor_ + double(last_epoch_ - 1) * d);
  return lrs;
}
std::vector<double> LinearLR::closed_form_lr() {
  std::vector<double> lrs = base_lrs_;
  for (double& lr : lrs)
    lr *= start_factor_ + (end_factor_ - start_factor_) *
                              double(std::min(total_iters_, last_epoch_)) / double(total_iters_);
  return lrs;
}

// ---- OneCycleLR
OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start,
                       double div_factor, double final_div_factor, bool cycle_momentum,
                       double base_momentum, double max_momentum)
    : LRScheduler(opt), total_steps_(total_steps), cycle_momentum_(cycle_momentum) {
  MINIDL_CHECK(total_steps > 0, "OneCycleLR: Expected positive integer total_steps, but got ",
               total_steps);
  MINIDL_CHECK(pct_start >= 0 && pct_start <= 1,
               "OneCycleLR: Expected float between 0 and 1 pct_start, but got ", pct_start);
  phase1_end_ = pct_start * double(total_steps) - 1;
  if (cycle_momentum) {
    const Options& d = opt.defaults();
    MINIDL_CHECK(
        d.count("momentum") || d.count("beta1"),
        "OneCycleLR: optimizer must support momentum with `cycle_momentum` option enabled");
    momentum_key_ = d.count("beta1") ? "beta1" : "momentum";
  }
  base_lrs_.clear();
  for (ParamGroup& g : opt.param_groups()) {
    g.options["initial_lr"] = max_lr / div_factor;
    g.options["max_lr"] = max_lr;
    g.options["min_lr"] = max_lr / div_factor / final_div_factor;
    base_lrs_.push_back(max_lr / div_factor);
    if (cycle_momentum) {
      g.options[momentum_key_] = max_momentum;
      g.options["max_momentum"] = max_momentum;
      g.options["base_momentum"] = base_momentum;
    }
  }
  initial_step();
}

std::vector<double> OneCycleLR::get_lr() {
  MINIDL_CHECK(last_epoch_ <= total_steps_, "OneCycleLR: Tried to step ", last_epoch_ + 1,
               " times. The specified number of total steps is ", total_steps_);
  auto anneal = [](double start, double end, double pct) {
    return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
  };
  const double step = double(last_epoch_), end2 = double(total_steps_ - 1);
  std::vector<double> lrs;
  for (ParamGroup& g : opt_.param_groups()) {
    double lr, mom;
    if (step <= phase1_end_) {
      const double pct = step / phase1_end_;
      lr = anneal(g.get("initial_lr"), g.get("max_lr"), pct);
      mom = cycle_momentum_ ? anneal(g.get("max_momentum"), g.get("base_momentum"), pct) : 0;
    } else {
      const double pct = (step - phase1_end_) / (end2 - phase1_end_);
      lr = anneal(g.get("max_lr"), g.get("min_lr"), pct);
      mom = cycle_momentum_ ? anneal(g.get("base_momentum"), g.get("max_momentum"), pct) : 0;
    }
    lrs.push_back(lr);
    if (cycle_momentum_) g.options[momentum_key_] = mom;
  }
  return lrs;
}

}  // namespace minidl::optim
