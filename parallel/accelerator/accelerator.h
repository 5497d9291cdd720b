// Write the training loop once (HF Accelerate's Accelerator): one object resolves the parallel
// layout (single process, DataParallel, or a DDP rank under minidl-run/torchrun/mpirun/srun),
// prepares model, optimizer and data loaders for it, and runs AMP, accumulation and checkpoints.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "parallel/ddp/ddp.h"
#include "parallel/fsdp/fsdp.h"
#include "autograd/autocast.h"

namespace minidl {

namespace amp {
class Amp;
}  // namespace amp
namespace dist {
class DataParallel;
}

struct AcceleratorOptions {
  // auto: ddp when a launcher started this process (RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID
  // set), else single.
  std::string mode = "auto";           // auto | single | dp | ddp
  std::string device = "cpu";          // cpu | cuda | cuda:N (ddp rank r: cuda:(local_rank % gpus))
  int devices = 0;                     // dp replicas (0: every visible GPU, or 2 on CPU)
  std::string backend = "auto";        // ddp: gloo | nccl | auto (nccl on cuda)
  std::string init_method = "env://";  // ddp: env:// | tcp://host:port | file:///path
  double timeout_s = 300;              // ddp rendezvous and collective timeout
  std::string amp = "off";             // off | bf16 | fp16 (optim/amp.h)
  std::string opt_level = "";          // O0..O3 ("" = O1)
  double init_scale = 65536.0;         // GradScaler's initial scale (fp16 at O1/O2)
  int64_t grad_accum_steps = 1;        // micro-batches per optimizer step
  uint64_t seed = 1;                   // data order; per-rank RNG streams (see prepare)
  int threads = 0;                     // intra-op threads (0: cores shared among local ranks)
  // ddp: shard the model with FullyShardedDataParallel instead of replicating it with DDP:
  // off | full (FULL_SHARD, ZeRO-3) | grad-op (SHARD_GRAD_OP, ZeRO-2) | no-shard (NO_SHARD).
  // prepare() re-points the optimizer at the shards; AMP: off or bf16 at O1.
  std::string fsdp = "off";
  dist::AutoWrapPolicy fsdp_auto_wrap_policy = nullptr;  // the units (none: the model is one)
  // Per-unit flat parameters by optimizer group (see dist::FSDPOptions::flat_param_split).
  dist::FlatParamSplit fsdp_flat_param_split = nullptr;
  dist::DDPOptions ddp = {};
  bool verbose = true;  // notes (e.g. the O3 warning) on the main process
};

// What Accelerator::step() did.
enum class StepResult {
  applied,       // the optimizer stepped
  skipped,       // AMP found inf/NaN gradients: no update, the loss scale was lowered
  accumulating,  // a micro-batch of an accumulation window: gradients kept, no update yet
};

class Accelerator;

// A DataLoader over this process's share of a dataset (its DistributedSampler slice under ddp,
// the whole dataset otherwise), with batches moved to the Accelerator's device (pinned on CUDA).
// Each pass `for (data::Example& b : loader)` runs the next epoch: set_epoch is done for the
// user (epoch 1, 2, ...; load_state restores the count). The last batch of an epoch closes an
// accumulation window early.
class PreparedLoader {
 public:
  ~PreparedLoader();  // unregisters from its Accelerator
  PreparedLoader(const PreparedLoader&) = delete;
  PreparedLoader& operator=(const PreparedLoader&) = delete;
  int64_t size() const { return loader_->size(); }  // batches per epoch on this process
  int64_t dataset_size() const { return dataset_size_; }
  int64_t epoch() const { return epoch_; }  // the epoch running (or last run); 0 before any
  void set_epoch(int64_t epoch) { epoch_ = epoch - 1; }  // the next pass runs `epoch`
  data::DataLoader& loader() { return *loader_; }

  class Iterator {
   public:
    Iterator(PreparedLoader* owner, bool end);
    data::Example& operator*() { return batch_; }
    Iterator& operator++();
    bool operator!=(const Iterator& o) const { return owner_ != o.owner_; }

   private:
    void fetch();
    PreparedLoader* owner_;  // nullptr at the end of the epoch
    data::Example batch_;
    int64_t index_ = 0;
  };
  Iterator begin();  // starts the next epoch
  Iterator end() { return Iterator(nullptr, true); }

 private:
  friend class Accelerator;
  PreparedLoader() = default;
  Accelerator* acc_ = nullptr;
  std::unique_ptr<data::DataLoader> loader_;
  int64_t dataset_size_ = 0;
  int64_t epoch_ = 0;
};

// Usage (the same code runs single, dp and ddp; the mode comes from options or the launcher):
//   Accelerator acc({.mode = "auto", .amp = "bf16", .grad_accum_steps = 2});
//   manual_seed(1);                                       // same initial weights everywhere
//   auto model = std::make_shared<Net>();
//   optim::AdamW opt(model->parameters(), 1e-3);
//   auto net = acc.prepare(model, opt);                   // device, AMP, DDP/DataParallel
//   auto loader = acc.prepare_data_loader(train_set, {.batch_size = 64}, /*shuffle=*/true);
//   for (int e = 1; e <= epochs; ++e)
//     for (data::Example& b : *loader) {
//       acc.zero_grad();
//       Tensor loss;
//       { auto ac = acc.autocast(); loss = nll_loss(acc.forward(b.data), b.target); }
//       acc.backward(loss);
//       acc.clip_grad_norm_(1.0);
//       if (acc.step() == StepResult::applied) sched.step();
//     }
//   acc.save_state("ckpt.safetensors", {{"epoch", "3"}});
class Accelerator {
 public:
  explicit Accelerator(AcceleratorOptions options = {});
  ~Accelerator();  // destroys the process group it created
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  // ---- layout
  const std::string& mode() const { return mode_; }  // single | dp | ddp
  bool distributed() const { return mode_ == "ddp"; }
  int process_index() const { return rank_; }  // global rank (0 outside ddp)
  int num_processes() const { return world_size_; }
  int local_process_index() const { return local_rank_; }
  bool is_main_process() const { return rank_ == 0; }
  bool is_local_main_process() const { return local_rank_ == 0; }
  Device device() const { return device_; }  // this rank's device (dp: the output device)
  // dp: the replicas' devices; otherwise {device()}.
  const std::vector<Device>& devices() const { return devices_; }
  // Samples of one step processed in parallel: processes (ddp), replicas (dp) or 1.
  int parallel_degree() const;
  const std::string& backend() const { return backend_; }  // ddp only
  const AcceleratorOptions& options() const { return opts_; }
  // "1 process, cpu" / "dp, 2 replica(s) on cpu" / "ddp, 2 rank(s) (gloo), cpu" /
  // "fsdp full, 2 rank(s) (gloo), cpu"
  std::string describe() const;

  // ---- prepare
  // Moves `model` to device() (parameters keep their identity, so an optimizer built on them
  // stays valid), sets up AMP for the level (O2 re-points `opt` at fp32 master weights), and
  // returns the module the loop trains: the model itself (single), a DistributedDataParallel
  // (ddp), a FullyShardedDataParallel (ddp with options().fsdp; `opt` then steps the shards)
  // or a DataParallel over devices() (dp). Then seeds the default generator with a
  // per-rank stream (dist::rank_seed(seed, rank)) for dropout. Call once, before load_state.
  std::shared_ptr<nn::Module> prepare(std::shared_ptr<nn::Module> model, optim::Optimizer& opt);
  // Registers a scheduler for save_state/load_state (step it yourself after an applied step).
  void prepare_scheduler(optim::LRScheduler& sched) { scheduler_ = &sched; }
  // A loader over this process's share of `dataset` (options.batch_size is per process; the
  // global batch is batch_size * num_processes()). Shuffled with options().seed when `shuffle`.
  std::unique_ptr<PreparedLoader> prepare_data_loader(std::shared_ptr<const data::Dataset> dataset,
                                                      data::DataLoaderOptions options,
                                                      bool shuffle);

  nn::Module& model() const;            // the prepared (wrapped) module
  nn::Module& unwrap_model() const;     // the user's model
  optim::Optimizer& optimizer() const;  // the prepared optimizer
  dist::DistributedDataParallel* ddp() const { return ddp_.get(); }     // ddp only
  dist::FullyShardedDataParallel* fsdp() const { return fsdp_.get(); }  // with options().fsdp
  dist::DataParallel* data_parallel() const { return dp_.get(); }       // dp only
  amp::Amp* amp() const { return amp_.get(); }                          // null with amp off

  // ---- the step
  // The prepared module on x under the AMP level's casting (O2/O3 cast floating inputs to the
  // half dtype and the output back to f32). Under ddp a micro-batch that does not end its
  // accumulation window runs without gradient synchronisation (DDP no_sync).
  Tensor forward(const Tensor& x);
  // A model with several tensor inputs: acc.forward(x, mask) (nn::Module::forward_inputs;
  // under dp each input is scattered along dim 0).
  template <class... Ts>
  requires(sizeof...(Ts) >= 2 && (std::same_as<std::remove_cvref_t<Ts>, Tensor> && ...)) Tensor
      forward(const Ts&... inputs) {
    return forward_inputs({inputs...});
  }
  Tensor forward_inputs(const std::vector<Tensor>& inputs);
  // The AMP level's autocast region (inactive with amp off): hold it over forward and loss.
  [[nodiscard]] amp::autocast autocast() const;
  // True when the current micro-batch ends its accumulation window (always with 1 step).
  bool sync_gradients() const;
  // Clears gradients at the start of an accumulation window; a no-op inside one.
  void zero_grad();
  // Backward of loss / grad_accum_steps, scaled for fp16 AMP.
  void backward(const Tensor& loss);
  // At the end of a window: unscales (AMP) and clips the gradients to max_norm, returning
  // their total norm (0-d tensor on the device, not read back: .item() it at log time); inside
  // a window it does nothing and returns 0.
  Tensor clip_grad_norm_(double max_norm, double norm_type = 2.0);
  // At the end of a window: the optimizer step (skipped on inf/NaN under AMP) and the scaler
  // update; inside a window: accumulating.
  StepResult step();
  int64_t optimizer_steps() const { return optimizer_steps_; }  // applied + skipped

  // ---- collectives (identities outside ddp; every rank must call them)
  // Concatenation along dim 0 of every rank's t (all ranks' shapes must be equal; see
  // pad_across_processes). t:[n,...] -> [world*n,...]
  Tensor gather(const Tensor& t) const;
  // gather() in DistributedSampler order without the sampler's padding: each of the dataset's
  // samples exactly once. t:[n_r,...] (this rank's rows of a non-shuffled loader) -> [N,...]
  Tensor gather_for_metrics(const Tensor& t, int64_t dataset_size) const;
  Tensor gather_for_metrics(const Tensor& t, const PreparedLoader& loader) const {
    return gather_for_metrics(t, loader.dataset_size());
  }
  // Pads dim `dim` with pad_value to the largest size over ranks (at the end, or the front).
  Tensor pad_across_processes(const Tensor& t, int64_t dim = 0, double pad_value = 0,
                              bool pad_first = false) const;
  // Elementwise sum or mean over ranks (op: "sum" | "mean"), on a copy.
  Tensor reduce(const Tensor& t, const std::string& op = "mean") const;
  double reduce(double value, const std::string& op = "mean") const;
  void wait_for_everyone() const;
  // Prints (and flushes) on the main process only; print adds a newline.
  void print(const std::string& text) const;
  void printf(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));

  // ---- state
  // One atomic checkpoint file written by rank 0 (collective; every rank fails if the write
  // does): the unwrapped model, optimizer, registered scheduler, AMP state, every rank's RNG
  // stream, the prepared loaders' epoch and the step counters, plus `meta`. Under FSDP the
  // model and optimizer go to a sharded checkpoint in the directory `path`.shards (one file per
  // rank, written first), which load_state reads on any number of ranks.
  void save_state(const std::string& path, std::map<std::string, std::string> meta = {});
  // Restores what save_state wrote (this rank's own RNG stream; a checkpoint without AMP state
  // starts AMP fresh with one warning) and returns the metadata. Errors name the file.
  std::map<std::string, std::string> load_state(const std::string& path);

  // This process's tensor-memory peak per device since prepare(): "cpu 61.2 MiB".
  std::string peak_memory_summary() const;

 private:
  friend class PreparedLoader;
  bool accumulating_micro_batch() const;

  AcceleratorOptions opts_;
  std::string mode_, backend_;
  int rank_ = 0, world_size_ = 1, local_rank_ = 0;
  bool owns_group_ = false;
  Device device_;
  std::vector<Device> devices_;
  std::shared_ptr<nn::Module> model_, wrapped_;
  std::shared_ptr<dist::DistributedDataParallel> ddp_;
  std::shared_ptr<dist::DataParallel> dp_;
  std::shared_ptr<dist::FullyShardedDataParallel> fsdp_;
  optim::Optimizer* opt_ = nullptr;
  optim::LRScheduler* scheduler_ = nullptr;
  std::unique_ptr<amp::Amp> amp_;
  std::vector<PreparedLoader*> loaders_;  // for the epoch in save_state/load_state
  int64_t micro_ = 0;                     // backward() calls in the current accumulation window
  bool backward_done_ = false;            // a backward ran since the last step()
  bool window_synced_ = false;            // ... and it closed its accumulation window
  bool end_of_epoch_ = false;             // the loader just handed out its epoch's last batch
  int64_t optimizer_steps_ = 0;           // windows closed by step()
};

}  // namespace minidl
