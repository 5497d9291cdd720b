// minidl-run's engine (torchrun-like): spawns one process per rank with the torchrun env
// contract, prefixes and logs their output, and stops every rank when one fails (fail-fast).
// Apps can self-launch (`mnist_ddp -n 2 ...`) through self_launch().
#pragma once
#include <chrono>
#include <cstddef>
#include <deque>
#include <string>
#include <utility>
#include <vector>

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

// Runs argv (argv[0] searched in PATH) nproc_per_node times and returns the launcher's exit
// code: 0 when every rank exits 0; else the first failing rank's exit code (128+signal when
// killed); 128+signal when the launcher itself got SIGINT/SIGTERM. Bad options or a missing
// program throw minidl::Error before anything is spawned.
int launch(const LaunchOptions& options, const std::vector<std::string>& argv);

// True inside a process started by launch() (MINIDL_LAUNCHER=1).
bool launched_by_launcher();

// Re-executes /proc/self/exe with argv[1..] minus the flags in drop_flags (each with its value:
// "-n 2", "-n2", "--nproc=2") as nproc ranks under launch(); returns launch()'s exit code.
// Typical use in main(): if (n > 1 && !launched_by_launcher()) return self_launch(n, ...).
int self_launch(int nproc, int argc, char** argv, const std::vector<std::string>& drop_flags,
                LaunchOptions options = {});  // options.nproc_per_node is replaced by nproc

// ---------------------------------------------------------------- helpers (unit-tested)

// args minus every flag in drop_flags together with its value.
std::vector<std::string> strip_flags(const std::vector<std::string>& args,
                                     const std::vector<std::string>& drop_flags);

// Binds port 0 on all interfaces, reads the port the OS chose and closes the socket.
int pick_free_port();

// "exited with code 3" / "killed by signal 9 (SIGKILL)" for a waitpid status.
std::string describe_wait_status(int status);
// The launcher's exit code for a failed rank's waitpid status (code, or 128+signal).
int exit_code_of(int status);

// Visible CUDA devices without touching the driver: CUDA_VISIBLE_DEVICES when set (entries up
// to the first invalid one, as CUDA does), else /proc/driver/nvidia/gpus/*. Returns the
// physical ids ("3", "GPU-uuid"...) in visible order.
std::vector<std::string> visible_gpus();
// "rank r -> cuda:k (physical p)" / "rank r -> cpu" for each local rank; throws when backend
// is "nccl" and nproc_per_node exceeds the visible GPU count.
std::vector<std::string> device_plan(const LaunchOptions& options,
                                     const std::vector<std::string>& gpus);

// The environment of local rank `local_rank`: `base` (NAME=VALUE entries) with RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, MINIDL_LAUNCHER
// replaced, and OMP_NUM_THREADS=omp_threads added unless already set.
std::vector<std::string> rank_env(const std::vector<std::string>& base, const LaunchOptions& o,
                                  int local_rank, int master_port, int omp_threads);

// The arguments of a restart: argv minus any --resume, plus `--resume auto` when the program
// takes it (accepts_resume) and argv has --checkpoint-dir; else argv unchanged.
std::vector<std::string> restart_argv(const std::vector<std::string>& argv, bool accepts_resume);

// Splits a byte stream into lines for the console. '\n' ends a line; '\r' ends a progress
// update (cr = true) so a bar redraws in place. Lines longer than max_line are cut.
class LineSplitter {
 public:
  struct Line {
    std::string text;  // without the terminator
    bool cr = false;   // ended by '\r' (a progress update), not '\n'
  };
  explicit LineSplitter(std::size_t max_line = 64 * 1024) : max_line_(max_line) {}
  std::vector<Line> feed(const char* data, std::size_t n);
  // The unterminated rest at EOF into `out`; false when there is none.
  bool flush(Line& out);

 private:
  std::string partial_;
  bool pending_cr_ = false;  // saw '\r'; a following '\n' makes it a plain line end
  std::size_t max_line_;
};

// Keeps the last `capacity` lines (the failure summary's stderr tail).
class LineTail {
 public:
  explicit LineTail(std::size_t capacity = 20) : capacity_(capacity) {}
  void push(std::string line);
  const std::deque<std::string>& lines() const { return lines_; }

 private:
  std::deque<std::string> lines_;
  std::size_t capacity_;
};

}  // namespace minidl::dist
