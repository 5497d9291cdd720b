// The shared command-line flags of minidl's training apps and the `-n N` self-launch.
#include "apps/common/run_options.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <algorithm>
#include <exception>

#include "parallel/launch/launcher.h"
#include "tensor/cpu_isa.h"

namespace minidl::apps {

void add_run_flags(CLI::App& app, RunOptions& o) {
  app.add_option("--seed", o.seed, "seed for initialisation, shuffling and dropout")
      ->capture_default_str();
  app.add_option("--device", o.device, "cpu | cuda | cuda:N")->capture_default_str();
  app.add_option("--threads", o.threads,
                 "intra-op threads (0: all cores, shared among the DDP ranks of a machine)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "write atomic checkpoints here (only the newest is kept)");
  app.add_option("--resume", o.resume,
                 "continue from a checkpoint FILE, a DIR's latest, or auto (= --checkpoint-dir); "
                 "a missing or empty DIR starts from scratch");
  app.add_option(
      "--log-json", o.log_json,
      "write metrics as JSON lines to FILE (appended on --resume; rank 0 writes it, or every "
      "rank its own where FILE holds {rank})");
  app.add_option("--plot", o.plot, "training-curve plot: FILE.png (gnuplot) or FILE.svg");
  app.add_option("--log-interval", o.log_interval, "steps between progress lines")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--quiet", o.quiet, "print only the final summary line");
  app.add_option("--mode", o.mode,
                 "single | dp (DataParallel in one process) | ddp (one process per rank) | auto "
                 "(ddp under minidl-run/torchrun/mpirun/srun, else single)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "single", "dp", "ddp"}));
  app.add_option("-n,--nproc", o.nproc, "launch N DDP ranks of this program (via minidl-run)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--backend", o.backend, "ddp backend: gloo | nccl | auto (nccl for cuda)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}));
  app.add_option("--init-method", o.init_method, "env:// | tcp://host:port | file:///path")
      ->capture_default_str();
  app.add_option("--dp-devices", o.dp_devices, "dp replicas (0: every GPU, or 2 on cpu)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dist-timeout", o.dist_timeout_s, "rendezvous/collective timeout in seconds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--amp", o.amp,
                 "mixed precision: off | bf16 | fp16 (fp16 uses dynamic loss scaling)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "bf16", "fp16"}));
  app.add_option("--opt-level", o.opt_level,
                 "Apex opt level with --amp: O0 (fp32) | O1 (autocast, default) | O2 (half model, "
                 "fp32 master weights) | O3 (all half, no scaling)")
      ->check(CLI::IsMember({"O0", "O1", "O2", "O3"}));
  app.add_option("--init-scale", o.init_scale, "initial loss scale for --amp fp16 (O1/O2)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--sync-bn", o.sync_bn,
               "ddp: convert the model's BatchNorm layers to SyncBatchNorm (global-batch "
               "statistics over the ranks)");
  app.add_flag("--zero1", o.zero1,
               "ddp: shard the optimizer state over the ranks (ZeroRedundancyOptimizer, ZeRO-1)");
  app.add_option("--comm-hook", o.comm_hook,
                 "ddp: compress gradient buckets: fp16 | bf16 | powersgd:R[:START] (rank R, "
                 "plain allreduce for the first START steps, default 1000)");
  app.add_option("--fsdp", o.fsdp,
                 "ddp: shard the model instead of replicating it (FullyShardedDataParallel): "
                 "full (parameters, gradients and optimizer state; ZeRO-3) | grad-op (gradients "
                 "and optimizer state; ZeRO-2) | no-shard | off; checkpoints resume on any "
                 "number of ranks")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "full", "grad-op", "no-shard"}));
  app.footer(
      "Environment: MINIDL_CPU_ISA=avx2|avx512|avx512_bf16|native caps the CPU kernels' "
      "instruction set (oneDNN's too; here: " +
      cpu_isa_summary() +
      "); MINIDL_CPU_BACKEND=auto|eigen|onednn picks the CPU conv/GEMM library; "
      "MINIDL_ONEDNN_BF16=auto|bf16|f32 how oneDNN computes bf16; OMP_WAIT_POLICY=passive when "
      "other jobs share the cores.");
}

std::string amp_flags_error(const RunOptions& o) {
  if (o.amp != "off" && o.amp != "bf16" && o.amp != "fp16")
    return "--amp must be off, bf16 or fp16, got '" + o.amp + "'";
  if (o.amp == "off" && !o.opt_level.empty())
    return "--opt-level " + o.opt_level + " needs --amp bf16 or --amp fp16";
  if (!o.opt_level.empty() && o.opt_level != "O0" && o.opt_level != "O1" && o.opt_level != "O2" &&
      o.opt_level != "O3")
    return "--opt-level must be O0, O1, O2 or O3, got '" + o.opt_level + "'";
  if (!(o.init_scale > 0)) return "--init-scale must be > 0";
  return "";
}

bool self_launch_if_requested(const RunOptions& o, const char* program, int argc, char** argv,
                              int& exit_code) {
  if (dist::launched_by_launcher()) return false;
  // --fsdp shards over a process group: on one process it runs as a one-rank job (a 2-rank
  // FSDP checkpoint resumes there too).
  const bool fsdp_alone = o.nproc <= 1 && o.fsdp != "off" && o.mode == "auto";
  if (o.nproc <= 1 && !fsdp_alone) return false;
  if (o.mode == "single" || o.mode == "dp") {
    std::fprintf(stderr, "%s: error: -n %d needs --mode ddp or auto (see --help)\n", program,
                 o.nproc);
    exit_code = 2;
    return true;
  }
  dist::LaunchOptions launch;
  // With nccl the launcher refuses more ranks than GPUs before starting any.
  const bool cuda = o.device.rfind("cuda", 0) == 0;
  launch.backend = o.backend == "auto" ? (cuda ? "nccl" : "gloo") : o.backend;
  try {
    exit_code = dist::self_launch(std::max(1, o.nproc), argc, argv, {"-n", "--nproc"}, launch);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    exit_code = 2;
  }
  return true;
}

}  // namespace minidl::apps
