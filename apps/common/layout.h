// The parallel layout of a training app's run (single process, DataParallel or DDP rank) and
// the distributed pieces of its loop: setup/teardown of the process group, per-rank RNG state in
// checkpoints, and exact evaluation over ranks (every test sample counted once).
#pragma once
#include <map>
#include <memory>
#include <string>

#include "apps/common/run_options.h"
#include "minidl.h"
#include "parallel/data_parallel.h"

namespace minidl::apps {

struct Layout {
  std::string mode;  // single | dp | ddp
  int rank = 0, world_size = 1, local_rank = 0;
  Device device;                   // this rank's (or DP's output) device
  std::vector<Device> dp_devices;  // dp only
  std::string backend;             // ddp only
  bool distributed() const { return mode == "ddp"; }
  std::string describe() const;
};

// Resolves the mode, initialises the process group for ddp (destroyed by the returned guard)
// and picks devices: rank r uses cuda:(local_rank % gpus) when --device cuda.
class LayoutGuard {
 public:
  explicit LayoutGuard(const RunOptions& o);
  ~LayoutGuard();
  LayoutGuard(const LayoutGuard&) = delete;
  LayoutGuard& operator=(const LayoutGuard&) = delete;
  const Layout& layout() const { return layout_; }

 private:
  Layout layout_;
};

// The module a training loop runs in this layout: the model itself (single), its DDP wrapper
// (ddp) or a DataParallel over the layout's devices (dp, also kept in `data_parallel`).
struct TrainModule {
  std::shared_ptr<nn::Module> module;
  std::shared_ptr<dist::DataParallel> data_parallel;  // dp only
};
// Wraps `model` for the layout and resets the peak-memory counters of the devices it uses.
TrainModule wrap_for_layout(const Layout& l, const std::shared_ptr<nn::Module>& model);
// This process's tensor-memory peak per device since wrap_for_layout: "cpu 61.2 MiB" (every
// DataParallel replica's device under dp).
std::string peak_memory_summary(const Layout& l, const TrainModule& t);

// --threads N sets the intra-op threads; 0 shares the machine's cores among its DDP ranks
// (unless OMP_NUM_THREADS says otherwise).
void set_intra_op_threads(const RunOptions& o, const Layout& l);

// Checkpoint metadata holding every rank's default-generator state (collective: all ranks
// call it; rank 0 gets the entries "rng.rank.<r>" = "<seed>:<offset>").
std::map<std::string, std::string> gather_rng_states(const Layout& l);
// After load_checkpoint (which restored rank 0's generator): rank r takes its own entry.
void restore_rank_rng(const Layout& l, const std::map<std::string, std::string>& meta);

// Sum over ranks of per-sample [loss, correct] rows, counting each test sample once:
// rows:[n_local, 2] on this rank (DistributedSampler order, shuffle off) -> {loss_sum, correct}.
std::pair<double, int64_t> reduce_eval_rows(const Layout& l, const Tensor& rows,
                                            int64_t dataset_size);

}  // namespace minidl::apps
