// A training app's parallel layout: mode resolution, process-group setup, per-rank RNG state in
// checkpoints, and evaluation reduced over ranks so each test sample counts exactly once.
#include "apps/common/layout.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "parallel/ddp.h"
#include "parallel/distributed.h"
#include "parallel/launcher.h"
#include "tensor/cuda.h"

namespace minidl::apps {

namespace {

// True when a launcher (minidl-run/torchrun, mpirun, srun) started this process as a rank.
bool under_launcher() {
  return std::getenv("RANK") || std::getenv("OMPI_COMM_WORLD_RANK") || std::getenv("SLURM_PROCID");
}

std::vector<Device> dp_device_list(const RunOptions& o, Device base) {
  int n = o.dp_devices;
  if (base.is_cuda()) {
    int gpus = device_count(DeviceType::cuda);
    if (n == 0) n = gpus;
    MINIDL_CHECK(n <= gpus, "--dp-devices ", n, ": only ", gpus, " GPU(s) visible");
    std::vector<Device> d;
    for (int i = 0; i < n; ++i) d.emplace_back(DeviceType::cuda, i);
    return d;
  }
  if (n == 0) n = 2;  // CPU replicas run on threads of this process
  return std::vector<Device>(size_t(n), kCPU);
}

}  // namespace

std::string Layout::describe() const {
  if (mode == "ddp")
    return "ddp, " + std::to_string(world_size) + " rank(s) (" + backend + "), " + device.str();
  if (mode == "dp")
    return "dp, " + std::to_string(dp_devices.size()) + " replica(s) on " +
           (device.is_cuda() ? "cuda" : "cpu");
  return "1 process, " + device.str();
}

LayoutGuard::LayoutGuard(const RunOptions& o) {
  Layout& l = layout_;
  l.mode = o.mode;
  if (l.mode == "auto") l.mode = under_launcher() ? "ddp" : "single";
  MINIDL_CHECK(l.mode == "single" || l.mode == "dp" || l.mode == "ddp",
               "--mode must be single, dp, ddp or auto, got '", o.mode, "'");
  Device requested(o.device);
  const int gpus = device_count(DeviceType::cuda);
  MINIDL_CHECK(requested.is_cpu() || requested.index < gpus, "--device ", o.device,
               ": this machine has ", gpus, " CUDA device(s)");
  l.device = requested;
  if (l.mode == "ddp") {
    dist::InitOptions init;
    init.backend = o.backend;
    if (init.backend == "auto") init.backend = requested.is_cuda() ? "nccl" : "gloo";
    init.init_method = o.init_method;
    init.timeout = std::chrono::milliseconds(int64_t(o.dist_timeout_s * 1000));
    // The NCCL group binds the current device: make it this rank's before creating it.
    if (requested.is_cuda()) cuda::set_device(dist::get_local_rank() % gpus);
    dist::init_process_group(init);
    l.rank = dist::get_rank();
    l.world_size = dist::get_world_size();
    l.local_rank = dist::get_local_rank();
    l.backend = init.backend;
    if (requested.is_cuda()) l.device = Device(DeviceType::cuda, l.local_rank % gpus);
  } else if (l.mode == "dp") {
    l.dp_devices = dp_device_list(o, requested);
    l.device = l.dp_devices[0];
  }
}

LayoutGuard::~LayoutGuard() {
  if (layout_.distributed() && dist::is_initialized()) dist::destroy_process_group();
}

TrainModule wrap_for_layout(const Layout& l, const std::shared_ptr<nn::Module>& model) {
  TrainModule t{model, nullptr};
  if (l.mode == "ddp") {
    t.module = std::make_shared<dist::DistributedDataParallel>(model);
  } else if (l.mode == "dp") {
    t.data_parallel = std::make_shared<dist::DataParallel>(model, l.dp_devices);
    t.module = t.data_parallel;
  }
  for (const Device& d : l.mode == "dp" ? l.dp_devices : std::vector<Device>{l.device})
    reset_peak_memory_stats(d);
  return t;
}

std::string peak_memory_summary(const Layout& l, const TrainModule& t) {
  auto per_device = t.data_parallel ? t.data_parallel->memory_per_device()
                                    : std::vector{std::pair{l.device, memory_stats(l.device)}};
  std::string out;
  for (const auto& [dev, stats] : per_device) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s %.1f MiB", out.empty() ? "" : ", ", dev.str().c_str(),
                  double(stats.peak) / (1 << 20));
    out += buf;
  }
  return out;
}

void set_intra_op_threads(const RunOptions& o, const Layout& l) {
  if (o.threads > 0)
    set_num_threads(o.threads);
  else if (l.distributed() && !std::getenv("OMP_NUM_THREADS"))
    set_num_threads(std::max(1, int(std::thread::hardware_concurrency()) /
                                    std::max(1, dist::rendezvous_info().local_world_size)));
}

std::map<std::string, std::string> gather_rng_states(const Layout& l) {
  Generator& g = default_generator();
  std::map<std::string, std::string> meta;
  auto entry = [](uint64_t seed, uint64_t offset) {
    return std::to_string(seed) + ":" + std::to_string(offset);
  };
  if (!l.distributed()) {
    meta["rng.rank.0"] = entry(g.seed(), g.offset());
    return meta;
  }
  Tensor mine = tensor(std::vector<int64_t>{int64_t(g.seed()), int64_t(g.offset())});
  std::vector<Tensor> all;
  for (int r = 0; r < l.world_size; ++r) all.push_back(zeros({2}, kInt64));
  dist::default_group().allgather(all, mine)->wait();
  for (int r = 0; r < l.world_size; ++r) {
    const int64_t* v = all[size_t(r)].data_ptr<int64_t>();
    meta["rng.rank." + std::to_string(r)] = entry(uint64_t(v[0]), uint64_t(v[1]));
  }
  return meta;
}

void restore_rank_rng(const Layout& l, const std::map<std::string, std::string>& meta) {
  auto it = meta.find("rng.rank." + std::to_string(l.rank));
  if (it == meta.end()) {
    if (l.rank != 0)
      std::fprintf(stderr,
                   "warning: rank %d: the checkpoint has no RNG state for this rank; "
                   "dropout masks will differ from an uninterrupted run\n",
                   l.rank);
    return;
  }
  uint64_t seed = 0, offset = 0;
  MINIDL_CHECK(std::sscanf(it->second.c_str(), "%" SCNu64 ":%" SCNu64, &seed, &offset) == 2,
               "checkpoint metadata ", it->first, "='", it->second, "' is not <seed>:<offset>");
  default_generator().set_state(seed, offset);
}

std::pair<double, int64_t> reduce_eval_rows(const Layout& l, const Tensor& rows,
                                            int64_t dataset_size) {
  Tensor all = l.distributed() ? dist::gather_for_metrics(rows, dataset_size) : rows;
  Tensor totals = sum(all.to(kFloat64), {0});  // [2]
  const double* t = totals.contiguous().data_ptr<double>();
  return {t[0], int64_t(std::llround(t[1]))};
}

}  // namespace minidl::apps
