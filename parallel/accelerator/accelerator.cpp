// Accelerator (see accelerator.h): layout resolution and process-group setup, prepare() of the
// model / optimizer / data loaders, and the step with AMP and gradient accumulation.
#include "parallel/accelerator/accelerator.h"

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "data/sampler.h"
#include "optim/amp.h"
#include "optim/clip_grad.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/distributed.h"
#include "parallel/fsdp/optimizer_shards.h"
#include "parallel/rendezvous/launch_env.h"
#include "tensor/cuda_api.h"
#include "autograd/ops.h"

namespace minidl {

namespace {

// True when a launcher (minidl-run/torchrun, mpirun, srun) started this process as a rank; a
// Slurm batch script without srun is none (launched_as_rank() says so once on stderr).
bool under_launcher() {
  return dist::launched_as_rank();
}

std::vector<Device> dp_device_list(int n, Device base) {
  if (base.is_cuda()) {
    int gpus = device_count(DeviceType::cuda);
    if (n == 0) n = gpus;
    MINIDL_CHECK(n >= 1 && n <= gpus, "Accelerator: ", n, " DataParallel device(s) asked for, ",
                 gpus, " GPU(s) visible");
    std::vector<Device> d;
    for (int i = 0; i < n; ++i) d.emplace_back(DeviceType::cuda, i);
    return d;
  }
  if (n == 0) n = 2;  // CPU replicas run on threads of this process
  MINIDL_CHECK(n >= 1, "Accelerator: DataParallel needs >= 1 device, got ", n);
  return std::vector<Device>(size_t(n), kCPU);
}

}  // namespace

Accelerator::Accelerator(AcceleratorOptions options) : opts_(std::move(options)) {
  MINIDL_CHECK(opts_.grad_accum_steps >= 1, "Accelerator: grad_accum_steps must be >= 1, got ",
               opts_.grad_accum_steps);
  mode_ = opts_.mode == "auto" ? (under_launcher() ? "ddp" : "single") : opts_.mode;
  MINIDL_CHECK(mode_ == "single" || mode_ == "dp" || mode_ == "ddp",
               "Accelerator: mode must be single, dp, ddp or auto, got '", opts_.mode, "'");
  MINIDL_CHECK(opts_.fsdp == "off" || opts_.fsdp == "full" || opts_.fsdp == "grad-op" ||
                   opts_.fsdp == "no-shard",
               "Accelerator: fsdp must be off, full, grad-op or no-shard, got '", opts_.fsdp, "'");
  MINIDL_CHECK(opts_.fsdp == "off" || mode_ == "ddp", "Accelerator: fsdp ", opts_.fsdp,
               " shards the model over processes and needs mode ddp (-n N, or a launcher), but "
               "this run's mode is ",
               mode_);
  Device requested(opts_.device);
  const int gpus = device_count(DeviceType::cuda);
  MINIDL_CHECK(requested.is_cpu() || requested.index < gpus, "Accelerator: device ", opts_.device,
               ": this machine has ", gpus, " CUDA device(s)");
  device_ = requested;
  if (mode_ == "ddp") {
    dist::InitOptions init;
    init.backend =
        opts_.backend == "auto" ? (requested.is_cuda() ? "nccl" : "gloo") : opts_.backend;
    init.init_method = opts_.init_method;
    init.timeout = std::chrono::milliseconds(int64_t(opts_.timeout_s * 1000));
    // The NCCL group binds the current device: make it this rank's before creating it.
    if (requested.is_cuda()) cuda::set_device(dist::get_local_rank() % gpus);
    if (!dist::is_initialized()) {
      dist::init_process_group(init);
      owns_group_ = true;
    }
    rank_ = dist::get_rank();
    world_size_ = dist::get_world_size();
    local_rank_ = dist::get_local_rank();
    backend_ = dist::default_group().backend();
    if (requested.is_cuda()) device_ = Device(DeviceType::cuda, local_rank_ % gpus);
  } else if (mode_ == "dp") {
    devices_ = dp_device_list(opts_.devices, requested);
    device_ = devices_[0];
  }
  if (devices_.empty()) devices_ = {device_};
  // Intra-op threads: as asked, else the machine's cores shared among its ranks.
  if (opts_.threads > 0)
    set_num_threads(opts_.threads);
  else if (distributed() && !std::getenv("OMP_NUM_THREADS"))
    set_num_threads(std::max(1, int(std::thread::hardware_concurrency()) /
                                    std::max(1, dist::rendezvous_info().local_world_size)));
}

Accelerator::~Accelerator() {
  for (PreparedLoader* l : loaders_) l->acc_ = nullptr;
  if (owns_group_ && dist::is_initialized()) dist::destroy_process_group();
}

int Accelerator::parallel_degree() const {
  if (mode_ == "ddp") return world_size_;
  return int(devices_.size());
}

std::string Accelerator::describe() const {
  if (fsdp_ || (mode_ == "ddp" && opts_.fsdp != "off"))
    return "fsdp " + opts_.fsdp + ", " + std::to_string(world_size_) + " rank(s) (" + backend_ +
           "), " + device_.str();
  if (mode_ == "ddp")
    return "ddp, " + std::to_string(world_size_) + " rank(s) (" + backend_ + "), " + device_.str();
  if (mode_ == "dp")
    return "dp, " + std::to_string(devices_.size()) + " replica(s) on " +
           (device_.is_cuda() ? "cuda" : "cpu");
  return "1 process, " + device_.str();
}

std::shared_ptr<nn::Module> Accelerator::prepare(std::shared_ptr<nn::Module> model,
                                                 optim::Optimizer& opt) {
  MINIDL_CHECK(model, "Accelerator::prepare: the model is null");
  MINIDL_CHECK(!model_, "Accelerator::prepare: called twice (one model per Accelerator)");
  model_ = std::move(model);
  opt_ = &opt;
  model_->to(device_);
  // A distinct dropout stream per rank (the initial weights were drawn before, the same on
  // every rank; DDP broadcasts rank 0's anyway).
  manual_seed(dist::rank_seed(opts_.seed, rank_));
  MINIDL_CHECK(opts_.amp == "off" || opts_.amp == "bf16" || opts_.amp == "fp16",
               "Accelerator: amp must be off, bf16 or fp16, got '", opts_.amp, "'");
  MINIDL_CHECK(opts_.fsdp == "off" || opts_.amp == "off" ||
                   (opts_.amp == "bf16" && (opts_.opt_level.empty() || opts_.opt_level == "O1")),
               "Accelerator: fsdp ", opts_.fsdp, " with amp ", opts_.amp, " ",
               opts_.opt_level.empty() ? "O1" : opts_.opt_level,
               ": FSDP runs AMP as bf16 autocast at O1 only (fp16 needs a loss scaler agreed "
               "over the shards, O2/O3 cast the parameters FSDP owns)");
  if (opts_.amp != "off") {
    amp::AmpOptions ao;
    ao.opt_level = amp::parse_opt_level(opts_.opt_level.empty() ? "O1" : opts_.opt_level);
    ao.dtype = opts_.amp == "bf16" ? kBFloat16 : kFloat16;
    ao.scaler.init_scale = opts_.init_scale;
    ao.scaler.rank = rank_;
    amp_ = amp::initialize(*model_, opt, ao);
    if (opts_.verbose && is_main_process() && ao.opt_level == amp::OptLevel::O3)
      std::printf(
          "amp: O3 runs everything in %s with loss scale 1: a speed baseline that may "
          "diverge\n",
          opts_.amp.c_str());
  }
  if (mode_ == "ddp" && opts_.fsdp != "off") {
    // The optimizer was built over the model's parameters: it steps the shards from now on.
    const auto names = dist::optimizer_param_names(opt, *model_);
    dist::FSDPOptions fo;
    fo.sharding_strategy = opts_.fsdp == "full"      ? dist::ShardingStrategy::FULL_SHARD
                           : opts_.fsdp == "grad-op" ? dist::ShardingStrategy::SHARD_GRAD_OP
                                                     : dist::ShardingStrategy::NO_SHARD;
    fo.auto_wrap_policy = opts_.fsdp_auto_wrap_policy;
    fo.flat_param_split = opts_.fsdp_flat_param_split;
    fsdp_ = std::make_shared<dist::FullyShardedDataParallel>(model_, nullptr, fo);
    dist::shard_optimizer_params(opt, *fsdp_, names);
    wrapped_ = fsdp_;
  } else if (mode_ == "ddp") {
    ddp_ = std::make_shared<dist::DistributedDataParallel>(model_, nullptr, opts_.ddp);
    wrapped_ = ddp_;
  } else if (mode_ == "dp") {
    dp_ = std::make_shared<dist::DataParallel>(model_, devices_);
    wrapped_ = dp_;
  } else {
    wrapped_ = model_;
  }
  for (const Device& d : devices_) reset_peak_memory_stats(d);
  return wrapped_;
}

std::unique_ptr<PreparedLoader> Accelerator::prepare_data_loader(
    std::shared_ptr<const data::Dataset> dataset, data::DataLoaderOptions options, bool shuffle) {
  MINIDL_CHECK(dataset, "Accelerator::prepare_data_loader: the dataset is null");
  auto sampler = std::make_shared<data::DistributedSampler>(dataset->size(), world_size_, rank_,
                                                            shuffle, opts_.seed);
  if (options.seed == 0) options.seed = opts_.seed;
  options.pin_memory = options.pin_memory || device_.is_cuda();
  auto p = std::unique_ptr<PreparedLoader>(new PreparedLoader());
  p->acc_ = this;
  p->dataset_size_ = dataset->size();
  p->loader_ = std::make_unique<data::DataLoader>(std::move(dataset), options, std::move(sampler));
  loaders_.push_back(p.get());
  return p;
}

nn::Module& Accelerator::model() const {
  MINIDL_CHECK(wrapped_, "Accelerator: prepare() has not been called");
  return *wrapped_;
}
nn::Module& Accelerator::unwrap_model() const {
  MINIDL_CHECK(model_, "Accelerator: prepare() has not been called");
  return *model_;
}
optim::Optimizer& Accelerator::optimizer() const {
  MINIDL_CHECK(opt_, "Accelerator: prepare() has not been called");
  return *opt_;
}

// ---------------------------------------------------------------- the step

bool Accelerator::accumulating_micro_batch() const {
  return micro_ + 1 < opts_.grad_accum_steps && !end_of_epoch_;
}

bool Accelerator::sync_gradients() const {
  return backward_done_ ? window_synced_ : !accumulating_micro_batch();
}

Tensor Accelerator::forward(const Tensor& x) {
  return forward_inputs({x});
}

Tensor Accelerator::forward_inputs(const std::vector<Tensor>& inputs) {
  nn::Module& m = model();
  std::optional<dist::DistributedDataParallel::NoSync> no_sync;
  if (ddp_ && accumulating_micro_batch()) no_sync.emplace(*ddp_);
  return amp_ ? amp_->forward(m, inputs) : m.call(inputs);
}

amp::autocast Accelerator::autocast() const {
  if (amp_) return amp_->autocast_region();
  return amp::autocast(device_.type, std::nullopt, /*enabled=*/false);
}

void Accelerator::zero_grad() {
  if (micro_ == 0) optimizer().zero_grad();
}

void Accelerator::backward(const Tensor& loss) {
  Tensor l = opts_.grad_accum_steps > 1 ? div(loss, double(opts_.grad_accum_steps)) : loss;
  window_synced_ = !accumulating_micro_batch();
  // FSDP reads its no_sync state during backward (DDP's at forward, see forward_inputs).
  std::optional<dist::FullyShardedDataParallel::NoSync> no_sync;
  if (fsdp_ && !window_synced_) no_sync.emplace(*fsdp_);
  if (amp_)
    amp_->backward(l);
  else
    l.backward();
  ++micro_;
  backward_done_ = true;
}

Tensor Accelerator::clip_grad_norm_(double max_norm, double norm_type) {
  if (backward_done_ && !window_synced_) return zeros({}, kFloat64, device());
  // The norm over every rank's shards (bf16 O1 has no loss scale to take out first).
  if (fsdp_) return fsdp_->clip_grad_norm_(max_norm, norm_type);
  if (amp_) return amp_->clip_grad_norm_(max_norm, norm_type);
  return optim::clip_grad_norm_(unwrap_model().parameters(), max_norm, norm_type);
}

StepResult Accelerator::step() {
  if (backward_done_ && !window_synced_) {
    backward_done_ = false;  // sync_gradients() now speaks of the next micro-batch
    return StepResult::accumulating;
  }
  bool applied = true;
  if (amp_)
    applied = amp_->step();
  else
    optimizer().step();
  micro_ = 0;
  backward_done_ = false;
  ++optimizer_steps_;
  return applied ? StepResult::applied : StepResult::skipped;
}

}  // namespace minidl
