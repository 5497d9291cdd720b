// What a launch is asked for (minidl-run's flags, torchrun's meanings): ranks per node, nodes,
// the master's address, log files, devices, restarts.
#pragma once
#include <string>

namespace minidl::dist {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port from the OS (single node only)
  // Per-rank files rank<R>.out / rank<R>.err (raw, unprefixed; R = global rank) in this
  // directory (torchrun's --log-dir; created if missing). "": $MINIDL_LOG_DIR if set, else a
  // fresh $TMPDIR/minidl-run-XXXXXX that is removed when every rank exits 0 and kept (and named
  // in the failure summary) otherwise, so a run leaves no files behind unless asked or failed.
  // "none": no log files.
  std::string log_dir;
  std::string device_per_rank = "auto";  // auto: print rank -> cuda:k / cpu; none: skip
  std::string backend;                   // "nccl": more local ranks than GPUs is an error
  bool quiet_ranks = false;              // console shows only global rank 0's output
  double timeout_stop_s = 5.0;           // grace between SIGTERM/SIGINT and SIGKILL
  bool verbose = true;                   // launcher's own banner / summary lines on stderr
  // Elastic restarts (torchrun's --max-restarts; one node): when a rank fails, all are stopped
  // and relaunched with `--resume auto` (if the program's --help lists --resume and its
  // arguments have --checkpoint-dir), at most this many times. Ranks see MINIDL_RESTART_COUNT /
  // TORCHELASTIC_RESTART_COUNT (0, 1, ...) and MINIDL_PROGRESS_FILE: a failure is retried only
  // once some rank has written that file (the apps do after each complete checkpoint), since
  // one before any checkpoint (bad flags, missing data) would just repeat.
  int max_restarts = 0;
};

}  // namespace minidl::dist
