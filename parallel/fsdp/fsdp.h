// FullyShardedDataParallel (torch.distributed.fsdp, the ZeRO-3 idea): each auto-wrapped
// submodule ("unit") owns one flat parameter sharded evenly over the ranks; a unit's
// parameters are all-gathered just before its forward (and, with FULL_SHARD, again before its
// backward) and freed after use; gradients are reduce-scattered unit by unit as backward
// produces them. The optimizer sees only this rank's shards: any minidl optimizer, unchanged.
//
//   auto fsdp = std::make_shared<dist::FSDP>(model, nullptr,
//       dist::FSDPOptions{.auto_wrap_policy = dist::module_wrap_policy<Block>()});
//   optim::AdamW opt(fsdp->parameters(), 3e-4);   // the shards
//   loss = cross_entropy((*fsdp)(x), y); loss.backward(); fsdp->clip_grad_norm_(1.0); opt.step();
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nn/container.h"
#include "nn/module.h"
#include "parallel/fsdp/flat_param.h"
#include "parallel/process_group/process_group.h"

namespace minidl::dist {

// Decides whether `module` becomes a unit, given how many of its parameters no unit below it
// claimed yet (the traversal is post-order: children decide first, as torch's).
using AutoWrapPolicy = std::function<bool(const nn::Module& module, int64_t unclaimed_params)>;

// torch's ModuleWrapPolicy({Block, ...}): every module of one of these types becomes a unit.
template <class... Modules>
AutoWrapPolicy module_wrap_policy() {
  return [](const nn::Module& m, int64_t) {
    return ((dynamic_cast<const Modules*>(&m) != nullptr) || ...);
  };
}
// torch's size_based_auto_wrap_policy: a module whose unclaimed parameters number at least
// min_num_params becomes a unit.
AutoWrapPolicy size_based_auto_wrap_policy(int64_t min_num_params = 100000000);

// torch's MixedPrecision: the dtype the units' parameters are gathered and computed in, the
// dtype gradients are reduce-scattered in (default: param_dtype) and the dtype of the model's
// floating buffers. The shards the optimizer steps stay in the model's dtype (f32 masters), and
// so do their gradients. Unset: no casting.
struct MixedPrecision {
  std::optional<DType> param_dtype = std::nullopt;
  std::optional<DType> reduce_dtype = std::nullopt;
  std::optional<DType> buffer_dtype = std::nullopt;
  bool cast_forward_inputs = true;  // floating inputs of the root forward cast to param_dtype
};

// Splits each unit's parameters into several flat parameters, one per distinct value it
// returns, so that optimizer param groups that treat them differently (weight decay on the
// matrices only) each step whole flat parameters: torch needs use_orig_params=True for this.
//   .flat_param_split = [](const std::string&, const Tensor& p) { return p.dim() >= 2 ? 0 : 1; }
using FlatParamSplit = std::function<int(const std::string& fqn, const Tensor& param)>;

// What the units did since the wrapper was built or reset_stats(): collectives issued, and the
// seconds the compute thread waited on them (exposed communication; the rest hid behind
// compute), before forwards and inside backwards.
struct FSDPStats {
  int64_t gathers = 0, prefetched = 0, reductions = 0;
  double forward_wait_seconds = 0, backward_wait_seconds = 0;
};

struct FSDPOptions {
  ShardingStrategy sharding_strategy = ShardingStrategy::FULL_SHARD;
  AutoWrapPolicy auto_wrap_policy = nullptr;  // none: the whole model is one unit
  bool sync_module_states = true;  // broadcast rank 0's parameters and buffers when wrapping
  MixedPrecision mixed_precision = {};
  // None: one flat parameter per unit. Else unit "h.0" holds its first split's parameters
  // and "h.0[1]", "h.0[2]", ... the others' (by ascending value).
  FlatParamSplit flat_param_split = nullptr;
};

class FullyShardedDataParallel : public nn::Module {
 public:
  // group: the default group when null. Collective: every rank wraps the same model.
  FullyShardedDataParallel(std::shared_ptr<nn::Module> module,
                           std::shared_ptr<ProcessGroup> group = nullptr, FSDPOptions options = {});
  ~FullyShardedDataParallel() override;  // removes its hooks from the wrapped modules

  Tensor forward(const Tensor& x) override;
  Tensor forward_inputs(const std::vector<Tensor>& inputs) override;
  void train(bool on = true) override;
  std::string name() const override { return "FullyShardedDataParallel"; }

  // Gradient accumulation without communication (torch's no_sync()): gradients stay
  // unsharded until the first backward after the guard ends.
  class NoSync {
   public:
    explicit NoSync(FullyShardedDataParallel& fsdp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    FullyShardedDataParallel& fsdp_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // torch's FSDP.clip_grad_norm_: the norm over every rank's shards (collective), then the
  // shards' gradients scaled by min(1, max_norm / (norm + 1e-6)). Returns the total norm (0-d
  // f64 on the shards' device, not read back).
  Tensor clip_grad_norm_(double max_norm, double norm_type = 2.0);

  // The wrapped model's parameters and buffers under its own names (the names a non-sharded
  // model saves), gathered to every rank. Collective.
  nn::StateDict full_state_dict();

  nn::Module& module() const { return *module_; }
  ProcessGroup& process_group() const { return *group_; }
  ShardingStrategy sharding_strategy() const { return options_.sharding_strategy; }
  // The units in creation order (post-order; the root's own unit, if any, last).
  const std::vector<std::shared_ptr<FlatParamUnit>>& units() const { return units_; }
  // Bytes of parameters, gradients and optimizer-state-free state this rank holds between
  // steps: its shards and their gradients (the memory the sharding saves; compare DDP's
  // whole copies).
  int64_t sharded_state_bytes() const;
  FSDPStats stats() const;  // summed over the units
  void reset_stats();

 private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  FSDPOptions options_;
  std::vector<std::shared_ptr<FlatParamUnit>> units_;
  // The parameters no wrapped submodule claimed (several with flat_param_split).
  std::vector<std::shared_ptr<FlatParamUnit>> root_units_;
  std::vector<nn::Module::RemovableHandle> hooks_;
  std::shared_ptr<nn::ModuleListOf<FlatParamUnit>> unit_list_;
  std::shared_ptr<int64_t> epoch_ = std::make_shared<int64_t>(0);  // forwards begun
  std::weak_ptr<FlatParamUnit> last_in_forward_;  // the order of this forward's units
  // A unit's forward begins: records the order (for the prefetches of the next forward and of
  // this backward), gathers it, and starts the next unit's gather.
  void unit_forward_begins(const std::shared_ptr<FlatParamUnit>& unit);
};

using FSDP = FullyShardedDataParallel;

}  // namespace minidl::dist
