// Optimizers over FSDP's shards: one built before wrapping (over the model's own parameters, the
// order HF Accelerate's prepare() takes) moved onto the shards, so the training apps need no
// second optimizer; and the GradScaler whose skip decision all ranks share.
#pragma once
#include <string>
#include <vector>

#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "parallel/fsdp/fsdp.h"

namespace minidl::dist {

// Before wrapping: the name in `model` of each of `opt`'s parameters, group by group. Throws,
// naming the group and the tensor's shape, when the optimizer holds a tensor `model` does not.
std::vector<std::vector<std::string>> optimizer_param_names(const optim::Optimizer& opt,
                                                            nn::Module& model);

// After wrapping: each param group of `opt` holds the flat parameters (this rank's shards) of
// the units whose parameters it held (`names`, from optimizer_param_names), in
// fsdp.parameters() order, keeping its options. Refused with one line naming the unit and the
// parameter when a unit's parameters are split over two groups or only partly in the
// optimizer (a flat parameter is stepped whole), and once the optimizer has stepped.
void shard_optimizer_params(optim::Optimizer& opt, const FullyShardedDataParallel& fsdp,
                            const std::vector<std::vector<std::string>>& names);

// torch's ShardedGradScaler: a GradScaler whose inf/NaN check is agreed over `group`'s ranks
// (an all-reduce max of the flag), so with fp16 MixedPrecision every rank skips, or steps, the
// same steps although each sees only its own shards. group: the default group when null.
// Collective in unscale_() / step(). Clip with FSDP::clip_grad_norm_ after scaler.unscale_(opt).
amp::GradScaler sharded_grad_scaler(amp::GradScalerOptions options = {},
                                    std::shared_ptr<ProcessGroup> group = nullptr);

}  // namespace minidl::dist
