// The parallel layout of an mnist_ddp run (single process, DataParallel or DDP rank) and the
// distributed pieces of the loop: setup/teardown of the process group, per-rank RNG state in
// checkpoints, and exact evaluation over ranks (every test sample counted once).
#pragma once
#include <map>
#include <memory>
#include <string>

#include "apps/mnist_trainer.h"
#include "minidl.h"

namespace mnist {

struct Layout {
  std::string mode;  // single | dp | ddp
  int rank = 0, world_size = 1, local_rank = 0;
  minidl::Device device;                   // this rank's (or DP's output) device
  std::vector<minidl::Device> dp_devices;  // dp only
  std::string backend;                     // ddp only
  bool distributed() const { return mode == "ddp"; }
  std::string describe() const;
};

// Resolves the mode, initialises the process group for ddp (destroyed by the returned guard)
// and picks devices: rank r uses cuda:(local_rank % gpus) when --device cuda.
class LayoutGuard {
 public:
  explicit LayoutGuard(const Options& o);
  ~LayoutGuard();
  LayoutGuard(const LayoutGuard&) = delete;
  LayoutGuard& operator=(const LayoutGuard&) = delete;
  const Layout& layout() const { return layout_; }

 private:
  Layout layout_;
};

// Checkpoint metadata holding every rank's default-generator state (collective: all ranks
// call it; rank 0 gets the entries "rng.rank.<r>" = "<seed>:<offset>").
std::map<std::string, std::string> gather_rng_states(const Layout& l);
// After load_checkpoint (which restored rank 0's generator): rank r takes its own entry.
void restore_rank_rng(const Layout& l, const std::map<std::string, std::string>& meta);

// Sum over ranks of per-sample [loss, correct] rows, counting each test sample once:
// rows:[n_local, 2] on this rank (DistributedSampler order, shuffle off) -> {loss_sum, correct}.
std::pair<double, int64_t> reduce_eval_rows(const Layout& l, const minidl::Tensor& rows,
                                            int64_t dataset_size);

}  // namespace mnist
