// One FSDP unit's parameters as one flat parameter: the originals concatenated, padded to a
// multiple of the world size and sharded evenly over the ranks. Gathered into views that the
// modules' parameter slots hold for a forward; the gradient of the gathered tensor is
// reduce-scattered back to the shard by its autograd node.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nn/module.h"
#include "parallel/process_group/process_group.h"

namespace minidl::dist {

// torch.distributed.fsdp.ShardingStrategy.
enum class ShardingStrategy {
  FULL_SHARD,     // ZeRO-3: parameters gathered for a unit's forward, freed, gathered again
                  // for its backward; gradients and optimizer state sharded
  SHARD_GRAD_OP,  // ZeRO-2: parameters kept from a unit's forward until its backward ends
  NO_SHARD,       // DDP's behaviour: every rank holds everything, gradients all-reduced
};
std::string sharding_strategy_name(ShardingStrategy s);

// A Module holding one parameter, `flat_param` (the shard), so FSDP's parameters() are the
// shards the optimizer steps and its state_dict saves them.
class FlatParamUnit : public nn::Module {
 public:
  // Where one original parameter lives: the module slots holding it (a tied parameter has
  // several), its name in the wrapped model, its shape and place in the flat parameter.
  struct Slot {
    nn::Module* module;
    std::string name;  // the module's own parameter name
    std::string fqn;   // its name in the wrapped model: "h.0.attn.c_attn.weight"
  };
  struct Param {
    std::vector<Slot> slots;  // the first is where the parameter was found first
    Shape shape;
    int64_t offset = 0, numel = 0;
  };

  // `params` with their current values (every rank's the same: the wrapper broadcasts rank 0's
  // first). The slots are emptied: they hold views of the gathered flat parameter while the
  // unit runs. param_dtype: the gathered parameters' dtype (the shard keeps the originals');
  // reduce_dtype: the gradients' on the wire (default: param_dtype).
  FlatParamUnit(std::string name, std::vector<Param> params, std::shared_ptr<ProcessGroup> group,
                ShardingStrategy strategy, std::optional<DType> param_dtype = std::nullopt,
                std::optional<DType> reduce_dtype = std::nullopt);

  std::string name() const override { return "FlatParameter"; }
  const std::string& unit_name() const { return name_; }  // "h.0" ("" for the root)
  const std::vector<Param>& params() const { return params_; }
  // The whole flat parameter, gathered into a new tensor (no autograd; collective).
  Tensor gather_full();
  // The leaf the optimizer steps: this rank's [shard_numel] piece (NO_SHARD: all of it).
  Tensor& shard() { return flat_param; }
  int64_t numel() const { return numel_; }          // of the originals together
  int64_t padded_numel() const { return padded_; }  // world * shard_numel
  int64_t shard_numel() const { return flat_param.numel(); }
  bool gathered() const { return full_.defined() && full_.storage()->has_data(); }

  // Before the unit's forward: gathers the flat parameter (a node whose backward
  // reduce-scatters its gradient to the shard) and puts views of it into the slots.
  void unshard_for_forward();
  // After the unit's forward: FULL_SHARD frees the gathered memory (`reshard_after_forward`)
  // and, when `output` requires grad, gathers it again when the output's gradient arrives.
  void after_forward(const Tensor& output, bool reshard_after_forward);
  // Frees the gathered memory (the views stay, without memory, until the next forward).
  void reshard();
  // Starts this unit's all-gather on the group's communication thread, so it runs while the
  // unit before it computes (forward prefetch) or while the unit after it runs its backward
  // (backward prefetch, FULL_SHARD). The gather that needs it then only waits. A prefetch
  // from an earlier forward (`epoch`) is never used: the shard may have changed since.
  void prefetch();
  // At the end of a backward (FSDP queues it): waits for this unit's reduce-scatter, started
  // asynchronously so it overlaps the rest of the backward, and adds the result to
  // flat_param's gradient.
  void finish_backward();

  // The forward count of the owning FSDP (prefetches are tagged with it).
  std::shared_ptr<const int64_t> epoch;
  // The units that ran after / before this one in the last forward (prefetch targets).
  std::weak_ptr<FlatParamUnit> next_in_forward, next_in_backward;

  Tensor flat_param;  // the shard: a leaf that requires grad

  // no_sync(): gradients accumulate unsharded here, reduce-scattered by the next synced backward.
  bool require_sync = true;
  // Collectives and bytes this unit issued (all-gathers, reduce-scatters / all-reduces).
  int64_t gathers = 0, reductions = 0;
  int64_t prefetched = 0;  // gathers that found their data already on the way
  // Seconds the compute thread spent waiting on this unit's collectives (the communication
  // not hidden behind compute): its gathers before a forward, and in the backward its
  // re-gathers and its reduce-scatters (or NO_SHARD's allreduce).
  double forward_wait_seconds = 0, backward_wait_seconds = 0;

 private:
  Tensor wait_gathered(double& waited);  // the prefetched (or now issued) gather's [padded]
  void gather_into(const Tensor& dst, double& waited);
  void regather();                              // before the unit's backward (FULL_SHARD)
  Tensor reduce_grad(const Tensor& full_grad);  // the shard's gradient (averaged over ranks)
  void set_views(const Tensor& full);

  std::string name_;
  std::vector<Param> params_;
  std::shared_ptr<ProcessGroup> group_;
  ShardingStrategy strategy_;
  int rank_ = 0, world_ = 1;
  int64_t numel_ = 0, padded_ = 0;
  DType compute_dtype_ = kFloat32;  // of the gathered parameters
  DType reduce_dtype_ = kFloat32;   // of the reduce-scatter
  Tensor full_;                     // the gathered flat parameter of the current forward ([padded])
  Tensor unsharded_grad_;           // accumulated under no_sync
  struct Pending {
    std::shared_ptr<Work> work;
    Tensor data;
    int64_t epoch = -1;
  };
  Pending gather_;  // a prefetched all-gather ([padded])
  Pending reduce_;  // the reduce-scatter of the current backward ([shard])
};

}  // namespace minidl::dist
