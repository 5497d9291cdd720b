// The DDP features the training apps share behind --sync-bn (nn::SyncBatchNorm), --zero1
// (dist::ZeroRedundancyOptimizer) and --comm-hook (fp16 | bf16 | powersgd:R[:START]): their
// checks, where each goes in the set-up (convert, build the optimizer, register the hook) and
// their part of the summary line.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "apps/common/run_options.h"
#include "minidl.h"
#include "parallel/accelerator/accelerator.h"
#include "parallel/zero/zero_redundancy_optimizer.h"

namespace minidl::apps {

// Whether any of --sync-bn, --zero1, --comm-hook is given.
bool ddp_features_requested(const RunOptions& o);

// Checks the flags before anything starts; "" when consistent, else the one-line error (the apps
// exit 2 on it): they need DDP (--mode ddp, or auto with -n N or under a launcher), and the
// --comm-hook spec must parse.
std::string ddp_flags_error(const RunOptions& o);

// After the Accelerator resolved its layout: throws naming the flag when it is not ddp.
void check_ddp_layout(const RunOptions& o, const Accelerator& acc);

// --sync-bn (before acc.prepare): every BatchNorm1d/2d of `model` becomes an nn::SyncBatchNorm
// over the default group (sharing its tensors). Prints how many were converted on the main
// process, or that the model has none (nothing converted). Returns the (new) root.
std::shared_ptr<nn::Module> apply_sync_bn(const RunOptions& o, const Accelerator& acc,
                                          std::shared_ptr<nn::Module> model);

// The app's optimizer over `groups` from `factory`; with --zero1 a ZeroRedundancyOptimizer
// whose ranks each step their shard with a local optimizer from `factory`.
std::unique_ptr<optim::Optimizer> make_optimizer(const RunOptions& o,
                                                 std::vector<optim::ParamGroup> groups,
                                                 const dist::OptimizerFactory& factory);

// --comm-hook (after acc.prepare): registers dist::make_comm_hook(spec) on the DDP.
void apply_comm_hook(const RunOptions& o, Accelerator& acc);

// For the summary line: "sync-bn (6 layers), zero1 (rank 0 steps 11/22 parameters, optimizer
// state 0.10 MiB), comm hook bf16 (0.04 MB per step)"; "" when no flag is given.
std::string ddp_features_summary(const RunOptions& o, const Accelerator& acc,
                                 optim::Optimizer& opt);

}  // namespace minidl::apps
