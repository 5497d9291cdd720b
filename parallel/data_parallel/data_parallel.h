// DataParallel (torch.nn.DataParallel): one process, one thread per device. Replicas are
// cloned once and re-synchronised from the source module before every forward; the input is
// scattered along dim 0, replicas run in parallel, outputs are gathered on the output device,
// and backward sums the replicas' gradients into the source parameters' .grad.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "parallel/module_wrapper.h"
#include "tensor/storage.h"
#include "tensor/device.h"

namespace minidl::dist {

// Where DataParallel's step time goes (minidl-compare): totals since construction or
// reset_stats(), wall-clock seconds on the calling thread.
struct DataParallelStats {
  int64_t forwards = 0, backwards = 0;  // forward calls; backward reductions run
  int replicas = 0;                     // replicas used by the last forward
  double replicate_seconds = 0;         // re-synchronising replicas from the source module
  double scatter_seconds = 0;           // splitting the input and copying chunks to devices
  double parallel_apply_seconds = 0;    // the replicas' forwards (wall, all threads)
  double gather_seconds = 0;            // outputs onto the output device
  double reduce_seconds = 0;            // backward: replica gradients summed into the source
};

// The source module must live on devices[0] and serves as replica 0 (so its buffers, e.g.
// BatchNorm running stats, are updated in place by replica 0; other replicas' buffer updates
// and any non-buffer state changed in forward are lost, as in PyTorch). Devices may repeat
// (e.g. {kCPU, kCPU}), which runs the replicas on CPU threads. Each replica's forward runs
// with the caller's grad mode. Modules whose forward draws random numbers (dropout) share the
// global generator across threads, so such runs are not reproducible.
class DataParallel : public ModuleWrapper {
 public:
  DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> devices,
               std::optional<Device> output_device = std::nullopt);

  // x:[B,...] -> chunks of ceil(B / n) rows (fewer replicas when B < n) -> outputs gathered
  // along dim 0 on the output device (0-d outputs become a vector [n]).
  Tensor forward(const Tensor& x) override;
  // Several inputs (`dp(x, mask)`): each is scattered along dim 0 (equal batch sizes) and
  // replica k runs forward on the k-th chunks of all of them.
  Tensor forward_inputs(const std::vector<Tensor>& inputs) override;

  const std::vector<Device>& devices() const { return devices_; }
  // Current and peak tensor memory of each distinct device in devices() (replicas that share
  // a device, e.g. {kCPU, kCPU}, share its counters). See memory_stats(Device).
  std::vector<std::pair<Device, MemoryStats>> memory_per_device() const;
  Device output_device() const { return output_device_; }
  DataParallelStats stats() const;
  void reset_stats();
  // Replica k (replica 0 is the source module).
  nn::Module& replica(size_t k) const { return *replicas_.at(k); }
  // The first forward with grad enabled checks that every tensor requiring grad each replica's
  // forward used is a registered parameter of that replica (nn::assert_registered): a layer held
  // in an unregistered member would be shared by the replicas (clone() cannot see it) and get no
  // summed gradient. false: skip.
  bool check_registration = true;

 private:
  struct GradState;
  void sync_replicas(size_t n);

  std::vector<Device> devices_;
  Device output_device_;
  std::vector<std::shared_ptr<nn::Module>> replicas_;
  std::shared_ptr<GradState> grad_state_;
  bool registration_checked_ = false;
};

// Whether this thread is running a DataParallel replica's forward. nn::SyncBatchNorm then
// normalises with the replica's own chunk, as torch.nn.DataParallel does not sync BatchNorm.
bool in_data_parallel_replica();

}  // namespace minidl::dist
