// The options every minidl training app shares (device, parallel mode, AMP, checkpoints, logs),
// their command-line flags, and the self-launch of `-n N` DDP ranks. mnist_ddp and gpt derive
// their own Options from RunOptions, so the flags read and behave the same in both.
#pragma once
#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace minidl::apps {

struct RunOptions {
  uint64_t seed = 1;
  std::string device = "cpu";
  int threads = 0;  // intra-op threads; 0: all cores (shared among the DDP ranks of a machine)
  std::string checkpoint_dir;
  std::string resume;  // a checkpoint file, a directory (its latest checkpoint) or "auto"
  std::string log_json;
  std::string plot;
  int64_t log_interval = 20;  // steps between plain progress lines / curve samples
  bool quiet = false;
  // Parallelism: single (one process, one device), dp (DataParallel over dp_devices replicas in
  // one process), ddp (one process per rank; also chosen by `auto` under minidl-run, torchrun,
  // mpirun or srun).
  std::string mode = "auto";
  std::string backend = "auto";        // gloo | nccl | auto
  std::string init_method = "env://";  // env:// | tcp://host:port | file:///path
  int nproc = 1;                       // -n N: launch N ranks of this program (ddp)
  int dp_devices = 0;                  // dp replicas (0: every GPU, or 2 on CPU)
  double dist_timeout_s = 300;         // rendezvous and collective timeout
  // Mixed precision (apps/common/amp_run.h): off | bf16 | fp16; Apex opt level O0..O3 (default
  // O1); the GradScaler's initial scale (fp16 at O1/O2).
  std::string amp = "off";
  std::string opt_level;
  double init_scale = 65536.0;
  // DDP features (apps/common/ddp_features.h; ddp only): SyncBatchNorm, ZeRO-1 optimizer state
  // sharding, a gradient communication hook ("" | fp16 | bf16 | powersgd:R[:START]).
  bool sync_bn = false;
  bool zero1 = false;
  std::string comm_hook;
  // Fully sharded data parallel instead of DDP (ddp only): off | full | grad-op | no-shard.
  std::string fsdp = "off";
};

// Adds the shared flags (--seed, --device, --threads, --checkpoint-dir, --resume, --log-json,
// --plot, --log-interval, --quiet, --mode, -n, --backend, --init-method, --dp-devices,
// --dist-timeout, --amp, --opt-level, --init-scale, --sync-bn, --zero1, --comm-hook, --fsdp) to
// `app`,
// writing into `o`.
void add_run_flags(CLI::App& app, RunOptions& o);

// Checks the AMP flags; "" when consistent, else the one-line error (the apps exit 2 on it).
std::string amp_flags_error(const RunOptions& o);

// `-n N` outside a launcher: runs N ranks of this very command under minidl-run's machinery and
// returns the job's exit code in `exit_code` (true). False when this process should train itself.
// Errors (e.g. -n with --mode single) are printed as "<program>: error: ..." with exit code 2.
bool self_launch_if_requested(const RunOptions& o, const char* program, int argc, char** argv,
                              int& exit_code);

}  // namespace minidl::apps
