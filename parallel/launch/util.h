// The launcher's helpers (unit-tested; parallel/launch/util.cpp): flag stripping, free ports,
// wait statuses, visible GPUs and the device plan, per-rank environments, restart arguments,
// and the console's line splitting.
#pragma once
#include <cstddef>
#include <deque>
#include <string>
#include <vector>

#include "parallel/launch/options.h"

namespace minidl::dist {

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
