// One timed run of minidl-compare: a mode (single | dp | ddp) trains the chosen model through the
// Accelerator for warm-up + measured steps on a fixed global batch, timing each phase of the step
// and reading the DDP / DataParallel statistics; the result travels between processes as JSON.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace minidl::compare {

// A --modes entry: single | dp | ddp, or a DDP variant ddp-zero1 (ZeroRedundancyOptimizer),
// ddp-fp16 / ddp-bf16 / ddp-powersgd (comm hooks), ddp-syncbn (SyncBatchNorm), or
// FullyShardedDataParallel: fsdp (FULL_SHARD) | fsdp-grad-op (SHARD_GRAD_OP).
struct ModeSpec {
  std::string base;  // single | dp | ddp (fsdp's processes are launched like ddp's)
  bool zero1 = false, sync_bn = false;
  std::string comm_hook;     // "" or dist::make_comm_hook's spec
  std::string fsdp = "off";  // AcceleratorOptions::fsdp
};
// Throws naming the mode and the known ones. ddp-powersgd: rank `powersgd_rank`, compressing
// from the third step (the first two allreduce plainly; DDP fixes its buckets after the first).
ModeSpec parse_mode(const std::string& mode, int powersgd_rank = 2);
std::vector<std::string> known_modes();
bool is_ddp_mode(const std::string& mode);   // ddp or one of its variants
bool is_fsdp_mode(const std::string& mode);  // fsdp | fsdp-grad-op
// One process per rank through the launcher: the ddp and fsdp modes.
bool is_multiprocess_mode(const std::string& mode);

struct RunConfig {
  std::string model = "mnist-cnn";  // mnist-cnn | resnet-mini | gpt
  std::string data;                 // MNIST directory or text file
  std::string mode = "single";      // a known_modes() entry
  int powersgd_rank = 2;            // ddp-powersgd's matrix approximation rank
  std::string device = "cpu";       // cpu | cuda
  int devices = 1;                  // dp replicas, ddp ranks (1 for single)
  int threads = 1;                  // intra-op threads of each replica / rank / single process
  int64_t global_batch = 128;
  int64_t steps = 20, warmup = 3;
  std::string amp = "off";
  uint64_t seed = 1;
  int num_workers = 0;          // loader threads per process
  bool perturb = false;         // test hook: backward of 3 x loss (wrong gradients, true loss)
  int64_t compute_batch = 0;    // single: also time steps at this batch (the per-rank batch)
  bool allreduce_sweep = true;  // ddp: time allreduces of several sizes for the link fit
};

// Seconds per measured step, by phase. forward/backward exclude the DP and DDP work listed
// separately, so the phases add up to (about) the step time.
struct Breakdown {
  double forward = 0, backward = 0, reduce_exposed = 0, reduce_hidden = 0, optimizer = 0,
         data_wait = 0, dp_replicate = 0, dp_scatter = 0, dp_gather = 0, dp_reduce = 0,
         ddp_broadcast = 0;  // ddp: the forwards' buffer broadcasts (DDPStats)
};

struct RunResult {
  std::string mode, label;  // label: "single", "single (2 threads)", "dp", "ddp"
  std::string device;
  int devices = 1, threads = 1;
  int64_t global_batch = 0, per_rank_batch = 0;
  std::vector<double> step_s;  // measured steps (ddp: rank 0)
  std::vector<double> losses;  // every step incl. warm-up: the global batch's mean loss
  Breakdown breakdown;
  int64_t peak_memory_bytes = 0;      // the largest per-device peak (ddp: over ranks)
  int64_t optimizer_state_bytes = 0;  // the largest rank's optimizer state (zero1: its shard)
  int64_t optimizer_state_total = 0;  // summed over ranks (replicated: devices x the above)
  // Parameters + gradients + optimizer state the largest rank holds after a step, measured
  // from its tensors (fsdp: its shards and their gradients and state).
  int64_t state_bytes = 0;
  // ddp
  std::vector<int64_t> bucket_bytes;
  double comm_s = 0, exposed_s = 0, hidden_fraction = 0;  // per step
  std::vector<double> sweep_bytes, sweep_s;               // allreduce sweep (medians)
  int64_t grad_bytes_per_step = 0;  // DDPStats::bytes_per_step: gradient payload allreduced
  int messages_per_bucket = 1;      // gradient collectives per bucket (PowerSGD: 2)
  int64_t buffer_bytes = 0;         // the model's buffers (broadcast before each forward)
  double broadcasts_per_step = 0;   // DDPStats::buffer_broadcasts per step
  // ddp-zero1: the parameter broadcasts after each optimizer step (ZeroStats).
  int64_t zero_broadcast_bytes = 0;
  int64_t zero_broadcasts = 0;
  // ProcessGroup::collective_counts() over the measured steps, per step (rank 0): collectives
  // issued (buffer broadcasts included) and their payload bytes.
  double collectives_per_step = 0, payload_bytes_per_step = 0;
  // single with RunConfig::compute_batch: a step at the per-rank batch
  int64_t compute_batch = 0;
  double compute_step_s = 0, compute_backward_s = 0;

  std::vector<double> round_samples_per_s;  // parent: every round's throughput (sorted)
  // Parent: the loss check's relative tolerance for this row when it does not compute exactly
  // the first row's function (0: the report's), and why ("per-replica BatchNorm statistics").
  double tolerance = 0;
  std::string tolerance_reason;

  double step_p(double q) const;  // quantile q in [0,1] of step_s
  double samples_per_s() const;   // global batch / mean step
};

nlohmann::json to_json(const RunResult& r);
RunResult run_result_from_json(const nlohmann::json& j);

// Trains as configured (under ddp this process is one rank started by the launcher) and returns
// this process's measurements (ddp: meaningful on rank 0; collective over the ranks).
RunResult run_mode(const RunConfig& c);

// The data the apps fetch: data/mnist or data/moby-dick/data.txt.
std::string default_data(const std::string& model);

}  // namespace minidl::compare
