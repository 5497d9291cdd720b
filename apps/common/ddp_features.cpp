// --sync-bn, --zero1 and --comm-hook for the training apps (see ddp_features.h).
#include "apps/common/ddp_features.h"

#include <cstdio>

#include "parallel/ddp/comm_hooks.h"
#include "parallel/launch/launcher.h"
#include "parallel/sync_batchnorm/sync_batchnorm.h"

namespace minidl::apps {

namespace {

// The DDP flags given, for messages: "--sync-bn, --zero1".
std::string flags_given(const RunOptions& o) {
  std::string s;
  auto add = [&](bool on, const char* flag) {
    if (on) s += (s.empty() ? "" : ", ") + std::string(flag);
  };
  add(o.sync_bn, "--sync-bn");
  add(o.zero1, "--zero1");
  add(!o.comm_hook.empty(), "--comm-hook");
  add(o.fsdp != "off", "--fsdp");
  return s;
}

// "--zero1 needs DDP" / "--sync-bn, --zero1 need DDP".
std::string need_ddp(const RunOptions& o) {
  const std::string flags = flags_given(o);
  return flags + (flags.find(',') == std::string::npos ? " needs" : " need") + " DDP";
}

int count_modules(const std::shared_ptr<nn::Module>& m, bool sync) {
  int n = 0;
  for (const auto& [name, child] : m->named_modules()) {
    const std::string kind = child->name();
    if (sync ? kind == "SyncBatchNorm" : (kind == "BatchNorm1d" || kind == "BatchNorm2d")) ++n;
  }
  return n;
}

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / (1 << 20));
  return buf;
}

}  // namespace

bool ddp_features_requested(const RunOptions& o) {
  return o.sync_bn || o.zero1 || !o.comm_hook.empty() || o.fsdp != "off";
}

std::string ddp_flags_error(const RunOptions& o) {
  if (!ddp_features_requested(o)) return "";
  if (o.mode == "single" || o.mode == "dp")
    return need_ddp(o) + " (--mode ddp or auto), not --mode " + o.mode;
  // --fsdp alone on one process runs as a one-rank job (self_launch_if_requested).
  if (o.mode == "auto" && o.nproc <= 1 && !dist::launched_by_launcher() && o.fsdp == "off")
    return need_ddp(o) + ": give -n N, or run under minidl-run/torchrun/mpirun/srun";
  if (o.fsdp != "off" && (o.zero1 || !o.comm_hook.empty()))
    return std::string("--fsdp ") + o.fsdp + " replaces DDP: " +
           (o.zero1 ? "--zero1 (FSDP shards the optimizer state itself)"
                    : "--comm-hook (a DDP gradient hook)") +
           " does not apply";
  if (o.fsdp != "off" && o.amp != "off" &&
      (o.amp != "bf16" || (!o.opt_level.empty() && o.opt_level != "O1")))
    return "--fsdp with --amp " + o.amp +
           (o.opt_level.empty() ? "" : " --opt-level " + o.opt_level) +
           ": FSDP runs AMP as --amp bf16 (O1) only";
  if (!o.comm_hook.empty()) {
    try {
      dist::make_comm_hook(o.comm_hook);
    } catch (const std::exception& e) {
      return std::string("--comm-hook: ") + e.what() +
             " (fp16 | bf16 | powersgd:R | powersgd:R:START)";
    }
  }
  return "";
}

void check_ddp_layout(const RunOptions& o, const Accelerator& acc) {
  if (!ddp_features_requested(o)) return;
  MINIDL_CHECK(acc.mode() == "ddp", need_ddp(o), ", but this run is ", acc.describe());
}

std::shared_ptr<nn::Module> apply_sync_bn(const RunOptions& o, const Accelerator& acc,
                                          std::shared_ptr<nn::Module> model) {
  if (!o.sync_bn) return model;
  const int before = count_modules(model, false);
  model = nn::convert_sync_batchnorm(model);
  const int converted = count_modules(model, true);
  if (acc.is_main_process() && !o.quiet) {
    if (before == 0)
      std::printf("--sync-bn: the model has no BatchNorm layers; nothing was converted\n");
    else
      std::printf("--sync-bn: %d BatchNorm layer(s) converted to SyncBatchNorm over %d rank(s)\n",
                  converted, acc.num_processes());
  }
  return model;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const RunOptions& o,
                                                 std::vector<optim::ParamGroup> groups,
                                                 const dist::OptimizerFactory& factory) {
  if (!o.zero1) return factory(std::move(groups));
  return std::make_unique<dist::ZeroRedundancyOptimizer>(std::move(groups), factory);
}

void apply_comm_hook(const RunOptions& o, Accelerator& acc) {
  if (o.comm_hook.empty()) return;
  dist::DistributedDataParallel* ddp = acc.ddp();
  MINIDL_CHECK(ddp != nullptr, "--comm-hook ", o.comm_hook, " needs DDP, but this run is ",
               acc.describe());
  ddp->register_comm_hook(dist::make_comm_hook(o.comm_hook));
}

std::string ddp_features_summary(const RunOptions& o, const Accelerator& acc,
                                 optim::Optimizer& opt) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (o.sync_bn) {
    const int n = count_modules(acc.unwrap_model().shared_from_this(), true);
    add(n > 0 ? "sync-bn (" + std::to_string(n) + " layers)" : "sync-bn (no BatchNorm)");
  }
  if (auto* zero = dynamic_cast<dist::ZeroRedundancyOptimizer*>(&opt)) {
    const dist::ZeroStats st = zero->stats();
    add("zero1 (rank " + std::to_string(st.rank) + " steps " + std::to_string(st.params_owned) +
        "/" + std::to_string(st.params_total) + " parameters, optimizer state " +
        mib(st.state_bytes) + ")");
  }
  if (const dist::FullyShardedDataParallel* fsdp = acc.fsdp()) {
    add("fsdp " + o.fsdp + " (" + std::to_string(fsdp->units().size()) +
        " units; this rank holds parameters + gradients " + mib(fsdp->sharded_state_bytes()) +
        ", optimizer state " + mib(dist::optimizer_state_bytes(opt)) + ")");
  }
  if (!o.comm_hook.empty() && acc.ddp()) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "comm hook %s (%.3f MB per step)", o.comm_hook.c_str(),
                  double(acc.ddp()->stats().bytes_per_step) / 1e6);
    add(buf);
  }
  return s;
}

}  // namespace minidl::apps
