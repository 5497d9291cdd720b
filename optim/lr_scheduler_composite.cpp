// Schedulers made of schedulers: SequentialLR (one after another at milestones) and
// ChainedScheduler (all stepped together), with their children's state in one state dict.
#include <algorithm>
#include <memory>
#include <string>

#include "optim/lr_scheduler.h"
#include "tensor/error.h"

namespace minidl::optim {

SequentialLR::SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(opt), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  MINIDL_CHECK(!schedulers_.empty(), "SequentialLR: expects at least one scheduler");
  for (size_t i = 0; i < schedulers_.size(); ++i)
    MINIDL_CHECK(schedulers_[i] && &schedulers_[i]->opt_ == &opt,
                 "SequentialLR: expects all schedulers to belong to the same optimizer, but got "
                 "schedulers at index ",
                 i, " to be different than the optimizer passed in");
  MINIDL_CHECK(milestones_.size() + 1 == schedulers_.size(),
               "SequentialLR: expects number of schedulers provided to be one more than the "
               "number of milestone points, but got number of schedulers ",
               schedulers_.size(), " and the number of milestones to be equal to ",
               milestones_.size());
  last_epoch_ = 0;
  for (ParamGroup& g : opt.param_groups()) g.lr() = g.get("initial_lr");
  for (auto& s : schedulers_) s->last_epoch_ -= 1;
  schedulers_[0]->initial_step();
  last_lr_ = schedulers_[0]->get_last_lr();
}

void SequentialLR::step() {
  ++last_epoch_;
  const size_t idx = size_t(std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) -
                            milestones_.begin());
  LRScheduler& s = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == last_epoch_)
    s.step_to(0);
  else
    s.step();
  last_lr_ = s.get_last_lr();
}

static std::map<std::string, Tensor> with_children(
    std::map<std::string, Tensor> sd, const std::vector<std::shared_ptr<LRScheduler>>& children) {
  for (size_t k = 0; k < children.size(); ++k)
    for (auto& [key, t] : children[k]->state_dict())
      sd["schedulers." + std::to_string(k) + "." + key] = t;
  return sd;
}

static void load_children(const std::map<std::string, Tensor>& sd,
                          std::vector<std::shared_ptr<LRScheduler>>& children) {
  for (size_t k = 0; k < children.size(); ++k) {
    const std::string pre = "schedulers." + std::to_string(k) + ".";
    std::map<std::string, Tensor> sub;
    for (const auto& [key, t] : sd)
      if (key.rfind(pre, 0) == 0) sub[key.substr(pre.size())] = t;
    children[k]->load_state_dict(sub);
  }
}

std::map<std::string, Tensor> SequentialLR::state_dict() const {
  return with_children(LRScheduler::state_dict(), schedulers_);
}
void SequentialLR::load_state_dict(const std::map<std::string, Tensor>& sd) {
  LRScheduler::load_state_dict(sd);
  load_children(sd, schedulers_);
}

static Optimizer& first_optimizer(const std::vector<std::shared_ptr<LRScheduler>>& s) {
  MINIDL_CHECK(!s.empty() && s[0], "ChainedScheduler: expects at least one scheduler");
  return s[0]->optimizer();
}

ChainedScheduler::ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers)
    : LRScheduler(first_optimizer(schedulers)), schedulers_(std::move(schedulers)) {
  for (size_t i = 1; i < schedulers_.size(); ++i)
    MINIDL_CHECK(schedulers_[i] && &schedulers_[i]->opt_ == &opt_,
                 "ChainedScheduler: expects all schedulers to belong to the same optimizer, but "
                 "got schedulers at index 0 and ",
                 i, " to be different");
  last_epoch_ = 0;
  last_lr_ = group_lrs();
}

void ChainedScheduler::step() {
  ++last_epoch_;
  ++step_count_;
  for (auto& s : schedulers_) s->step();
  last_lr_ = group_lrs();
}

std::map<std::string, Tensor> ChainedScheduler::state_dict() const {
  return with_children(LRScheduler::state_dict(), schedulers_);
}
void ChainedScheduler::load_state_dict(const std::map<std::string, Tensor>& sd) {
  LRScheduler::load_state_dict(sd);
  load_children(sd, schedulers_);
}

}  // namespace minidl::optim
