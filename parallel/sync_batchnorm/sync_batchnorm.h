// nn::SyncBatchNorm (torch.nn.SyncBatchNorm): BatchNorm whose training statistics are those of
// the global batch over the ranks of a process group, and convert_sync_batchnorm. In parallel/
// (it needs the ProcessGroup) but in namespace minidl::nn, as PyTorch has it in torch.nn.
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "nn/normalization.h"
#include "parallel/process_group/process_group.h"

namespace minidl::nn {

// x:[N,C], [N,C,L], [N,C,H,W] or [N,C,*]. Parameters weight/bias and buffers running_mean,
// running_var, num_batches_tracked have BatchNorm1d/2d's names, dtypes and defaults, so
// state_dicts load both ways.
//
// Training with a group of more than one rank: every rank's per-channel count, mean and sum of
// squared deviations are allgathered (one collective) and combined in rank order (Chan's
// parallel variance), so each rank normalises with the same global mean and biased variance and
// updates its running stats identically (unbiased variance, momentum or cumulative average).
// Backward allreduces sum(dy) and sum(dy * (x - mean)) per channel (one collective) for the
// input gradient of the concatenated batch; weight/bias gradients stay local (DDP reduces them).
// Uneven per-rank batches, including empty ones, are weighted by their counts.
//
// Plain BatchNorm (the same ops as nn::BatchNorm2d, bitwise its results) in eval mode, without
// a group (process_group null and no dist::init_process_group), with a group of one rank, and
// inside a DataParallel replica (see forward()).
class SyncBatchNorm : public Cloneable<SyncBatchNorm>, public BatchNormState {
 public:
  explicit SyncBatchNorm(int64_t num_features, BatchNormOptions opt = {},
                         std::shared_ptr<dist::ProcessGroup> process_group = nullptr);
  SyncBatchNorm(int64_t num_features, double eps, double momentum = 0.1, bool affine = true,
                bool track_running_stats = true,
                std::shared_ptr<dist::ProcessGroup> process_group = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "SyncBatchNorm"; }
  std::string extra_repr() const override;
  // The group forward synchronises over in training: process_group, else the default group
  // when dist::is_initialized(), else null.
  std::shared_ptr<dist::ProcessGroup> group() const;

  std::shared_ptr<dist::ProcessGroup> process_group;
  // Set by convert_sync_batchnorm for a BatchNorm1d: revert_sync_batchnorm then makes a
  // BatchNorm1d again (else a BatchNorm2d).
  bool from_batchnorm1d = false;

 private:
  // Every rank's channel count checked once (first synchronised forward): the statistics'
  // allgather needs equal sizes on all ranks.
  bool channels_checked_ = false;
};

namespace detail {
// SyncBatchNorm's forward and its group (process_group, else the default group when
// initialised, else null), shared with SyncBatchNormIn<BN>.
std::shared_ptr<dist::ProcessGroup> sync_batchnorm_group(
    const std::shared_ptr<dist::ProcessGroup>& process_group);
Tensor sync_batchnorm_forward(BatchNormState& s, bool training,
                              const std::shared_ptr<dist::ProcessGroup>& process_group,
                              bool& channels_checked, const Tensor& x);
std::string sync_batchnorm_repr(const BatchNormState& s);
// `to` takes `from`'s tensors (shared: names, values, requires_grad and .grad are the tensors').
inline void share_batchnorm_tensors(BatchNormState& to, const BatchNormState& from) {
  to.weight = from.weight;
  to.bias = from.bias;
  to.running_mean = from.running_mean;
  to.running_var = from.running_var;
  to.num_batches_tracked = from.num_batches_tracked;
}
}  // namespace detail

// What convert_sync_batchnorm puts into a member declared std::shared_ptr<nn::BatchNorm2d> (or
// BatchNorm1d), which cannot hold a SyncBatchNorm: a BN subclass that trains as SyncBatchNorm
// (same tensors, names and behaviour; name() "SyncBatchNorm"). Its clone() is a plain BN (the
// Cloneable base copies the BN part): DataParallel replicas do not synchronise anyway.
template <class BN>
class SyncBatchNormIn final : public BN {
 public:
  SyncBatchNormIn(const BatchNormState& state, std::shared_ptr<dist::ProcessGroup> pg)
      : BN(state.num_features, state.opt), process_group(std::move(pg)) {
    detail::share_batchnorm_tensors(*this, state);  // the converted layer's tensors
  }
  Tensor forward(const Tensor& x) override {
    return detail::sync_batchnorm_forward(*this, this->is_training(), process_group,
                                          channels_checked_, x);
  }
  std::string name() const override { return "SyncBatchNorm"; }
  std::string extra_repr() const override { return detail::sync_batchnorm_repr(*this); }
  std::shared_ptr<dist::ProcessGroup> process_group;

 private:
  bool channels_checked_ = false;
};

// Replaces every BatchNorm1d/BatchNorm2d in `module` (recursively, the root included) by a
// SyncBatchNorm over `process_group` (null: the default group at forward time) that shares its
// weight, bias and buffer tensors (same names, values and requires_grad; training mode kept; a
// BatchNorm shared by several parents becomes one shared SyncBatchNorm). Returns the new root
// (the same object unless the root itself was a BatchNorm). A BatchNorm held in a member slot
// declared std::shared_ptr<BatchNorm2d> (or BatchNorm1d) cannot hold a SyncBatchNorm: it gets a
// SyncBatchNormIn<BatchNorm2d> instead (a BatchNorm2d that trains as SyncBatchNorm).
std::shared_ptr<Module> convert_sync_batchnorm(
    std::shared_ptr<Module> module, std::shared_ptr<dist::ProcessGroup> process_group = nullptr);

// The inverse: every SyncBatchNorm becomes the BatchNorm1d/2d it was converted from (BatchNorm2d
// when built directly), sharing its tensors; e.g. to run a DDP-trained model on one process.
std::shared_ptr<Module> revert_sync_batchnorm(std::shared_ptr<Module> module);

namespace functional {

// The synchronised batch norm in training mode over `pg` (the op behind SyncBatchNorm; every
// rank calls it together). running_mean/running_var (both or neither) are updated in place with
// `momentum`. Records one autograd node (x, weight, bias); its backward issues one allreduce.
// x:[N,C,*]; weight, bias, running stats:[C] or undefined.
Tensor sync_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       Tensor running_mean, Tensor running_var, double momentum, double eps,
                       const std::shared_ptr<dist::ProcessGroup>& pg);

}  // namespace functional
}  // namespace minidl::nn
