// Internal to the launcher: a fully resolved launch (program path, per-rank environments,
// port, log dir), the rank-prefixing console, and the supervisor entry point
// (parallel/launch/run.cpp).
#pragma once
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <string>
#include <vector>

#include "parallel/launch/options.h"
#include "parallel/launch/util.h"

namespace minidl::dist {

struct LaunchPlan {
  LaunchOptions options;
  std::string program;                         // resolved path of argv[0]
  std::vector<std::string> argv;               // as given (argv[0] unchanged)
  std::vector<std::vector<std::string>> envs;  // one NAME=VALUE list per local rank
  int master_port = 0;
  std::string log_dir;              // "" = no log files
  std::vector<std::string> banner;  // printed to stderr before spawning
};

inline void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // console gone (EPIPE): keep supervising anyway
    done += static_cast<std::size_t>(n);
  }
}

// Console output: one line at a time with a rank prefix; a '\r'-ended progress update stays on
// screen until another rank or stream prints, which first ends it with '\n' (no garbling).
class Console {
 public:
  void line(int rank, int fd, const LineSplitter::Line& l) {
    if (l.cr && l.text.empty()) return;
    if (pending_fd_ >= 0 && (pending_fd_ != fd || pending_rank_ != rank)) end_pending();
    if (fd != buf_fd_) flush();
    buf_fd_ = fd;
    buf_ += "[rank " + std::to_string(rank) + "] " + l.text + (l.cr ? "\r" : "\n");
    pending_fd_ = l.cr ? fd : -1;
    pending_rank_ = rank;
  }
  void note(const std::string& text) {  // the launcher's own messages (stderr)
    end_pending();
    flush();
    write_all(2, text + "\n");
  }
  void flush() {  // lines are batched per read chunk: one write() each
    if (!buf_.empty()) write_all(buf_fd_, buf_);
    buf_.clear();
  }

 private:
  void end_pending() {
    if (pending_fd_ < 0) return;
    if (pending_fd_ != buf_fd_) flush();
    buf_fd_ = pending_fd_;
    buf_ += "\n";
    pending_fd_ = -1;
  }
  int pending_fd_ = -1, pending_rank_ = -1;
  int buf_fd_ = 1;
  std::string buf_;
};

// How one run of the ranks ended, for the restart decision (launch() with max_restarts).
struct RunOutcome {
  bool interrupted = false;  // the launcher itself got SIGINT/SIGTERM: never restarted
  int failed_rank = -1;      // the rank that failed first, or -1
  std::string cause;         // "rank 1 killed by signal 9 (SIGKILL)"
};

// Spawns, supervises and reaps the ranks; returns the launcher's exit code (see launch()).
int run_ranks(const LaunchPlan& plan, RunOutcome* outcome = nullptr);

// The restart loop of launch() for max_restarts > 0 (restart.cpp): plan_for(argv,
// attempt, progress_file) gives each attempt's plan.
using PlanFor = std::function<LaunchPlan(const std::vector<std::string>&, int, const std::string&)>;
int launch_with_restarts(const LaunchOptions& options, const std::vector<std::string>& argv,
                         const PlanFor& plan_for);

}  // namespace minidl::dist
