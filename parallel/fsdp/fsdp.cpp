// FullyShardedDataParallel: the auto-wrap traversal that assigns parameters to units, the
// forward hooks that gather and free them, no_sync, the sharded clip_grad_norm_ and the
// gathered full state dict.
#include "parallel/fsdp/fsdp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/container.h"
#include "nn/set_data.h"
#include "optim/fused.h"
#include "parallel/distributed.h"

namespace minidl::dist {

AutoWrapPolicy size_based_auto_wrap_policy(int64_t min_num_params) {
  return [min_num_params](const nn::Module&, int64_t unclaimed) {
    return unclaimed >= min_num_params;
  };
}

namespace {

// Every parameter of the model (by TensorImpl: tied parameters once) with all its slots.
struct ParamIndex {
  std::unordered_map<const TensorImpl*, FlatParamUnit::Param> params;
  std::vector<const TensorImpl*> order;  // first-seen order
  std::unordered_map<const TensorImpl*, Tensor> tensors;
};

ParamIndex index_parameters(nn::Module& root) {
  ParamIndex idx;
  for (const auto& [prefix, m] : root.named_modules())
    for (const auto& [name, t] : m->named_parameters(/*recurse=*/false)) {
      if (!t.defined()) continue;
      const std::string fqn = prefix.empty() ? name : prefix + "." + name;
      MINIDL_CHECK(t.requires_grad(), "FullyShardedDataParallel: parameter '", fqn,
                   "' does not require grad; a flat parameter needs every parameter it holds to "
                   "be trainable (freeze none, or keep frozen ones out of the model)");
      auto [it, fresh] = idx.params.try_emplace(t.impl());
      if (fresh) idx.order.push_back(t.impl()), idx.tensors.emplace(t.impl(), t);
      it->second.slots.push_back({m.get(), name, fqn});
    }
  return idx;
}

struct Planner {
  ParamIndex& idx;
  const AutoWrapPolicy& policy;
  std::unordered_map<const TensorImpl*, std::string> claimed;  // -> unit name
  // (unit name, module, its parameters) in post-order
  std::vector<std::tuple<std::string, nn::Module*, std::vector<const TensorImpl*>>> units;

  int64_t numel_of(const std::vector<const TensorImpl*>& ps) const {
    int64_t n = 0;
    for (const TensorImpl* p : ps) n += shape_numel(p->shape);
    return n;
  }

  // The parameters of m's subtree that no unit claimed, after m's children decided.
  std::vector<const TensorImpl*> visit(nn::Module& m, const std::string& prefix, bool is_root) {
    std::vector<const TensorImpl*> unclaimed;
    std::unordered_set<const TensorImpl*> seen;
    auto add = [&](const TensorImpl* p) {
      if (!claimed.count(p) && seen.insert(p).second) unclaimed.push_back(p);
    };
    for (const auto& [name, t] : m.named_parameters(false))
      if (t.defined()) add(t.impl());
    for (const auto& [name, child] : m.named_children())
      for (const TensorImpl* p : visit(*child, prefix.empty() ? name : prefix + "." + name, false))
        add(p);
    if (is_root || !policy || unclaimed.empty() || !policy(m, numel_of(unclaimed)))
      return unclaimed;
    for (const TensorImpl* p : unclaimed) claimed[p] = prefix;
    units.emplace_back(prefix, &m, unclaimed);
    return {};
  }
};

// Every module in m's subtree.
void subtree(nn::Module& m, std::unordered_set<const nn::Module*>& out) {
  out.insert(&m);
  for (const auto& child : m.children()) subtree(*child, out);
}

}  // namespace

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<nn::Module> module,
                                                   std::shared_ptr<ProcessGroup> group,
                                                   FSDPOptions options)
    : module_(std::move(module)),
      group_(group ? std::move(group) : default_group_ptr()),
      options_(std::move(options)) {
  MINIDL_CHECK(module_ != nullptr, "FullyShardedDataParallel: null module");
  NoGradGuard no_grad;
  if (options_.sync_module_states && group_->size() > 1) {
    for (Tensor t : module_->parameters()) group_->broadcast(t, 0)->wait();
    for (Tensor t : module_->buffers())
      if (t.defined()) group_->broadcast(t, 0)->wait();
  }
  if (const auto dt = options_.mixed_precision.buffer_dtype)
    for (const Tensor& b : module_->buffers())
      if (b.defined() && b.is_floating_point() && b.dtype() != *dt)
        nn::set_data(b, b.to(*dt));  // the same buffer, cast
  ParamIndex idx = index_parameters(*module_);
  Planner plan{idx, options_.auto_wrap_policy, {}, {}};
  std::vector<const TensorImpl*> rest = plan.visit(*module_, "", /*is_root=*/true);
  auto build = [&](const std::string& unit_name, nn::Module* unit_module,
                   const std::vector<const TensorImpl*>& impls) {
    std::unordered_set<const nn::Module*> inside;
    if (unit_module != nullptr) subtree(*unit_module, inside);
    std::vector<FlatParamUnit::Param> params;
    for (const TensorImpl* p : idx.order) {  // the model's parameter order
      if (std::find(impls.begin(), impls.end(), p) == impls.end()) continue;
      const FlatParamUnit::Param& param = idx.params.at(p);
      for (const auto& slot : param.slots)
        MINIDL_CHECK(unit_module == nullptr || inside.count(slot.module),
                     "FullyShardedDataParallel: parameter '", param.slots[0].fqn, "' of unit '",
                     unit_name, "' is shared with '", slot.fqn,
                     "' outside it; tied parameters must be in one unit (wrap their common "
                     "parent, or leave both in the root)");
      params.push_back(param);
    }
    const MixedPrecision& mp = options_.mixed_precision;
    return std::make_shared<FlatParamUnit>(unit_name, std::move(params), group_,
                                           options_.sharding_strategy, mp.param_dtype,
                                           mp.reduce_dtype);
  };
  // flat_param_split: one unit per distinct value, "h.0", "h.0[1]", ... (ascending values).
  auto split = [&](const std::string& unit_name, const std::vector<const TensorImpl*>& impls) {
    std::vector<std::pair<std::string, std::vector<const TensorImpl*>>> parts;
    if (!options_.flat_param_split) {
      parts.emplace_back(unit_name, impls);
      return parts;
    }
    std::map<int, std::vector<const TensorImpl*>> by_value;
    for (const TensorImpl* p : impls) {
      by_value[options_.flat_param_split(idx.params.at(p).slots[0].fqn, idx.tensors.at(p))]
          .push_back(p);
    }
    for (auto& [value, ps] : by_value)
      parts.emplace_back(
          parts.empty() ? unit_name : unit_name + "[" + std::to_string(parts.size()) + "]",
          std::move(ps));
    return parts;
  };
  for (const auto& [planned_name, unit_module, planned] : plan.units)
    for (const auto& [unit_name, impls] : split(planned_name, planned)) {
      auto unit = build(unit_name, unit_module, impls);
      std::weak_ptr<FlatParamUnit> weak = unit;
      const bool reshard = options_.sharding_strategy == ShardingStrategy::FULL_SHARD;
      hooks_.push_back(unit_module->register_forward_pre_hook(
          [this, weak](nn::Module&,
                       const std::vector<Tensor>&) -> std::optional<std::vector<Tensor>> {
            if (auto u = weak.lock()) unit_forward_begins(u);
            return std::nullopt;
          }));
      hooks_.push_back(unit_module->register_forward_hook(
          [weak, reshard](nn::Module&, const std::vector<Tensor>&,
                          const Tensor& out) -> std::optional<Tensor> {
            if (auto u = weak.lock()) u->after_forward(out, reshard);
            return std::nullopt;
          }));
      units_.push_back(std::move(unit));
    }
  // The root's parameters: one unit (or one per split), gathered around the whole forward.
  if (!rest.empty())
    for (const auto& [unit_name, impls] : split("", rest)) {
      root_units_.push_back(build(unit_name, nullptr, impls));
      units_.push_back(root_units_.back());
    }
  // parameters() and state_dict() are the shards: "units.<i>.flat_param".
  unit_list_ = std::make_shared<nn::ModuleListOf<FlatParamUnit>>();
  for (const auto& u : units_) {
    u->epoch = epoch_;
    unit_list_->push_back(u);
  }
  register_module("units", &unit_list_);
}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  for (auto& h : hooks_) h.remove();
}

Tensor FullyShardedDataParallel::forward(const Tensor& x) {
  return forward_inputs({x});
}

void FullyShardedDataParallel::unit_forward_begins(const std::shared_ptr<FlatParamUnit>& unit) {
  if (auto last = last_in_forward_.lock()) {
    last->next_in_forward = unit;
    unit->next_in_backward = last;
  }
  last_in_forward_ = unit;
  unit->unshard_for_forward();
  // The next unit of the last forward gathers while this one computes.
  if (auto next = unit->next_in_forward.lock()) next->prefetch();
}

Tensor FullyShardedDataParallel::forward_inputs(const std::vector<Tensor>& inputs) {
  ++*epoch_;
  last_in_forward_.reset();
  for (const auto& root : root_units_) unit_forward_begins(root);
  const MixedPrecision& mp = options_.mixed_precision;
  Tensor out;
  if (mp.param_dtype && mp.cast_forward_inputs) {  // the inputs in the parameters' dtype
    std::vector<Tensor> cast = inputs;
    for (Tensor& t : cast)
      if (t.defined() && t.is_floating_point() && t.dtype() != *mp.param_dtype)
        t = t.to(*mp.param_dtype);
    out = module_->call(cast);
  } else {
    out = module_->call(inputs);
  }
  // The root's parameters stay gathered until its backward ends (torch: the root does not
  // reshard after forward); without a backward they are freed now.
  for (const auto& root : root_units_) root->after_forward(out, /*reshard_after_forward=*/false);
  return out;
}

void FullyShardedDataParallel::train(bool on) {
  nn::Module::train(on);
  module_->train(on);
}

FullyShardedDataParallel::NoSync::NoSync(FullyShardedDataParallel& fsdp) : fsdp_(fsdp) {
  for (auto& u : fsdp_.units_) u->require_sync = false;
}
FullyShardedDataParallel::NoSync::~NoSync() {
  for (auto& u : fsdp_.units_) u->require_sync = true;
}

Tensor FullyShardedDataParallel::clip_grad_norm_(double max_norm, double norm_type) {
  NoGradGuard no_grad;
  const bool inf = std::isinf(norm_type);
  std::vector<Tensor> grads;
  for (auto& u : units_)
    if (u->shard().grad().defined()) grads.push_back(u->shard().grad());
  // clip_grad_norm_'s list ops (one dispatch each, the norm kept on the device), with the
  // shards' partial norms combined over the ranks in between. A rank without gradients still
  // takes part in the collective.
  Tensor total = grads.empty() ? zeros({}, kFloat64,
                                       units_.empty() ? Device(kCPU) : units_[0]->shard().device())
                               : optim::fused::foreach_norm(grads, norm_type);
  if (options_.sharding_strategy != ShardingStrategy::NO_SHARD && group_->size() > 1) {
    Tensor t = (inf ? total : pow(total, Scalar(norm_type))).reshape({1}).clone();
    group_->allreduce(t, inf ? ReduceOp::max : ReduceOp::sum)->wait();
    total = (inf ? t : pow(t, Scalar(1.0 / norm_type))).reshape({});
  }
  if (!grads.empty()) optim::fused::foreach_clip_by_norm_(grads, total, max_norm);
  return total;
}

nn::StateDict FullyShardedDataParallel::full_state_dict() {
  nn::StateDict sd;
  for (auto& u : units_) {
    Tensor full = u->gather_full();
    for (const auto& p : u->params()) {
      Tensor value = full.narrow(0, p.offset, p.numel).view(p.shape).clone();
      for (const auto& slot : p.slots) sd[slot.fqn] = value;
    }
  }
  for (const auto& [name, b] : module_->named_buffers())
    if (b.defined()) sd[name] = b.detach();
  return sd;
}

int64_t FullyShardedDataParallel::sharded_state_bytes() const {
  int64_t bytes = 0;
  for (const auto& u : units_) {
    const Tensor& s = u->flat_param;
    bytes += s.numel() * int64_t(s.element_size());
    if (s.grad().defined()) bytes += s.grad().numel() * int64_t(s.grad().element_size());
  }
  return bytes;
}

FSDPStats FullyShardedDataParallel::stats() const {
  FSDPStats st;
  for (const auto& u : units_) {
    st.gathers += u->gathers, st.prefetched += u->prefetched, st.reductions += u->reductions;
    st.forward_wait_seconds += u->forward_wait_seconds;
    st.backward_wait_seconds += u->backward_wait_seconds;
  }
  return st;
}

void FullyShardedDataParallel::reset_stats() {
  for (const auto& u : units_) {
    u->gathers = u->prefetched = u->reductions = 0;
    u->forward_wait_seconds = u->backward_wait_seconds = 0;
  }
}

}  // namespace minidl::dist
