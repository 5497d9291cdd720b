// ReduceLROnPlateau: PyTorch 1.13's step/is_better/_reduce_lr, line for line.
#include "optim/plateau.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "autograd/ops.h"
#include "tensor/warning.h"

namespace minidl::optim {

namespace {

void check_modes(const std::string& mode, const std::string& threshold_mode) {
  MINIDL_CHECK(mode == "min" || mode == "max", "ReduceLROnPlateau: mode ", mode, " is unknown!");
  MINIDL_CHECK(threshold_mode == "rel" || threshold_mode == "abs",
               "ReduceLROnPlateau: threshold mode ", threshold_mode, " is unknown!");
}

double worse_of(const std::string& mode) {
  const double inf = std::numeric_limits<double>::infinity();
  return mode == "min" ? inf : -inf;
}

}  // namespace

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, PlateauOptions options)
    : optimizer_(opt), opt_(std::move(options)) {
  MINIDL_CHECK(opt_.factor < 1.0, "ReduceLROnPlateau: Factor should be < 1.0., got ", opt_.factor);
  const size_t n = optimizer_.param_groups().size();
  if (opt_.min_lr.size() == 1) {
    min_lrs_.assign(n, opt_.min_lr[0]);
  } else {
    MINIDL_CHECK(opt_.min_lr.size() == n, "ReduceLROnPlateau: expected ", n, " min_lrs, got ",
                 opt_.min_lr.size());
    min_lrs_ = opt_.min_lr;
  }
  check_modes(opt_.mode, opt_.threshold_mode);
  mode_worse_ = worse_of(opt_.mode);
  best_ = mode_worse_;  // _reset()
  for (const ParamGroup& g : optimizer_.param_groups()) last_lr_.push_back(g.lr());
}

bool ReduceLROnPlateau::is_better(double a, double best) const {
  const bool min = opt_.mode == "min", rel = opt_.threshold_mode == "rel";
  if (min && rel) return a < best * (1. - opt_.threshold);
  if (min) return a < best - opt_.threshold;
  if (rel) return a > best * (opt_.threshold + 1.);
  return a > best + opt_.threshold;
}

void ReduceLROnPlateau::step(double current) {
  last_epoch_ += 1;
  if (is_better(current, best_)) {
    best_ = current;
    num_bad_epochs_ = 0;
  } else {
    num_bad_epochs_ += 1;
  }
  if (in_cooldown()) {
    cooldown_counter_ -= 1;
    num_bad_epochs_ = 0;  // ignore any bad epochs in cooldown
  }
  if (num_bad_epochs_ > opt_.patience) {
    reduce_lr();
    cooldown_counter_ = opt_.cooldown;
    num_bad_epochs_ = 0;
  }
  last_lr_.clear();
  for (const ParamGroup& g : optimizer_.param_groups()) last_lr_.push_back(g.lr());
}

void ReduceLROnPlateau::reduce_lr() {
  auto& groups = optimizer_.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    const double old_lr = groups[i].lr();
    const double new_lr = std::max(old_lr * opt_.factor, min_lrs_[i]);
    if (old_lr - new_lr > opt_.eps) groups[i].lr() = new_lr;
  }
}

std::map<std::string, Tensor> ReduceLROnPlateau::state_dict() const {
  std::map<std::string, Tensor> sd;
  auto put = [&sd](const std::string& k, double v) { sd[k] = scalar_tensor(v, kFloat64); };
  put("factor", opt_.factor);
  put("patience", double(opt_.patience));
  put("threshold", opt_.threshold);
  put("cooldown", double(opt_.cooldown));
  put("cooldown_counter", double(cooldown_counter_));
  put("best", best_);
  put("num_bad_epochs", double(num_bad_epochs_));
  put("mode_worse", mode_worse_);
  put("eps", opt_.eps);
  put("last_epoch", double(last_epoch_));
  put("mode", opt_.mode == "min" ? 0 : 1);
  put("threshold_mode", opt_.threshold_mode == "rel" ? 0 : 1);
  for (size_t i = 0; i < min_lrs_.size(); ++i) put("min_lrs." + std::to_string(i), min_lrs_[i]);
  for (size_t i = 0; i < last_lr_.size(); ++i) put("last_lr." + std::to_string(i), last_lr_[i]);
  return sd;
}

void ReduceLROnPlateau::load_state_dict(const std::map<std::string, Tensor>& sd) {
  auto get = [&sd](const std::string& key) {
    auto it = sd.find(key);
    MINIDL_CHECK(it != sd.end(), "ReduceLROnPlateau load_state_dict: missing key `", key, "`");
    MINIDL_CHECK(it->second.numel() == 1, "ReduceLROnPlateau load_state_dict: key `", key,
                 "` must be a scalar, got shape ", it->second.shape_str());
    return it->second.item<double>();
  };
  const size_t n = optimizer_.param_groups().size();
  MINIDL_CHECK(!sd.count("min_lrs." + std::to_string(n)),
               "ReduceLROnPlateau load_state_dict: ", "the state dict has more than ", n,
               " param group(s)");
  PlateauOptions o = opt_;
  o.factor = get("factor");
  o.patience = int64_t(get("patience"));
  o.threshold = get("threshold");
  o.cooldown = int64_t(get("cooldown"));
  o.eps = get("eps");
  const double mode = get("mode"), tmode = get("threshold_mode");
  MINIDL_CHECK((mode == 0 || mode == 1) && (tmode == 0 || tmode == 1),
               "ReduceLROnPlateau load_state_dict: `mode`/`threshold_mode` must be 0 or 1, got ",
               mode, " and ", tmode);
  o.mode = mode == 0 ? "min" : "max";
  o.threshold_mode = tmode == 0 ? "rel" : "abs";
  std::vector<double> min_lrs(n), last(n);
  for (size_t i = 0; i < n; ++i) {
    min_lrs[i] = get("min_lrs." + std::to_string(i));
    last[i] = get("last_lr." + std::to_string(i));
  }
  const double cooldown_counter = get("cooldown_counter"), best = get("best"),
               bad = get("num_bad_epochs"), last_epoch = get("last_epoch");
  get("mode_worse");
  // Say which constructed hyper-parameters the state dict replaces.
  std::string changed;
  auto note = [&changed](const char* key, const std::string& from, const std::string& to) {
    if (from != to)
      changed += std::string(changed.empty() ? "" : ", ") + key + " " + from + " -> " + to;
  };
  auto num = [](double v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  note("factor", num(opt_.factor), num(o.factor));
  note("patience", num(double(opt_.patience)), num(double(o.patience)));
  note("threshold", num(opt_.threshold), num(o.threshold));
  note("cooldown", num(double(opt_.cooldown)), num(double(o.cooldown)));
  note("eps", num(opt_.eps), num(o.eps));
  note("mode", opt_.mode, o.mode);
  note("threshold_mode", opt_.threshold_mode, o.threshold_mode);
  for (size_t i = 0; i < n && i < min_lrs_.size(); ++i)
    note(("min_lr[" + std::to_string(i) + "]").c_str(), num(min_lrs_[i]), num(min_lrs[i]));
  if (!changed.empty())
    warn("ReduceLROnPlateau.load_state_dict: the state dict replaces constructed values: " +
         changed);
  opt_ = std::move(o);
  opt_.min_lr = min_lrs;
  min_lrs_ = std::move(min_lrs);
  last_lr_ = std::move(last);
  cooldown_counter_ = int64_t(cooldown_counter);
  best_ = best;
  num_bad_epochs_ = int64_t(bad);
  last_epoch_ = int64_t(last_epoch);
  mode_worse_ = worse_of(opt_.mode);  // _init_is_better
}

}  // namespace minidl::optim
