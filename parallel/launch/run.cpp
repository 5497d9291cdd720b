// The launcher's supervisor: fork/exec of every rank into its own process group with stdout and
// stderr on pipes, a poll loop that prefixes lines ("[rank 1] ...") for the console and copies
// raw bytes to rank<R>.out/.err, and fail-fast stopping (SIGTERM/SIGINT, grace, SIGKILL).
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <memory>

#include "parallel/launch/run.h"
#include "tensor/error.h"

namespace minidl::dist {

namespace {

int g_signal_pipe = -1;  // write end; the handler reports signal numbers through it

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t r = ::write(g_signal_pipe, &b, 1);
  errno = saved;
}

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", s);
  return buf;
}

struct Stream {
  int fd = -1;      // read end of the child's pipe; -1 after EOF
  int log_fd = -1;  // rank<R>.out / .err
  int console_fd = 1;
  LineSplitter split;
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  double exit_s = 0;
  Stream out, err;
  LineTail tail{20};
};

// Restores the launcher's signal dispositions on every exit path.
struct SignalGuard {
  int pipe_fds[2] = {-1, -1};
  struct sigaction old[4];
  static constexpr int kSignals[4] = {SIGCHLD, SIGINT, SIGTERM, SIGPIPE};
  SignalGuard() {
    MINIDL_CHECK(::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) == 0,
                 "minidl-run: pipe2: ", strerror(errno));
    g_signal_pipe = pipe_fds[1];
    for (int i = 0; i < 4; ++i) {
      struct sigaction sa {};
      sa.sa_handler = kSignals[i] == SIGPIPE ? SIG_IGN : on_signal;
      sa.sa_flags = SA_RESTART | (kSignals[i] == SIGCHLD ? SA_NOCLDSTOP : 0);
      sigemptyset(&sa.sa_mask);
      ::sigaction(kSignals[i], &sa, &old[i]);
    }
  }
  ~SignalGuard() {
    for (int i = 0; i < 4; ++i) ::sigaction(kSignals[i], &old[i], nullptr);
    g_signal_pipe = -1;
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
  }
};

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const std::string& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Child side of fork(): only async-signal-safe calls until execve.
[[noreturn]] void exec_child(const char* path, char** argv, char** envp, int out_fd, int err_fd,
                             int null_fd, pid_t parent, const char* fail_msg) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the launcher dying (even by SIGKILL) kills the rank
  if (::getppid() != parent) ::_exit(127);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGPIPE}) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;  // the parent blocked every signal around fork()
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::dup2(null_fd, 0);
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  ::execve(path, argv, envp);
  [[maybe_unused]] ssize_t r = ::write(2, fail_msg, strlen(fail_msg));
  ::_exit(127);
}

class Supervisor {
 public:
  explicit Supervisor(const LaunchPlan& plan) : plan_(plan), o_(plan.options) {}
  int run();
  RunOutcome outcome() const {
    if (!failed_) return {interrupted_ != 0, -1, ""};
    return {interrupted_ != 0, failed_->rank,
            "rank " + std::to_string(failed_->rank) + " " + describe_wait_status(failed_->status)};
  }

 private:
  void spawn(Rank& r, int local);
  void pump(Stream& s, Rank& r, bool is_err);
  void close_stream(Stream& s, Rank& r, bool is_err);
  void reap();
  void signal_all(int sig);
  void begin_stop(int sig);
  void fail_summary(const Rank& r);
  void note_diagnosis(const Rank& r, const std::string& line);

  const LaunchPlan& plan_;
  const LaunchOptions& o_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  Console console_;
  double start_s_ = now_s();
  bool stopping_ = false, killed_ = false;
  double kill_at_ = 0, give_up_at_ = 0;
  int interrupted_ = 0;       // SIGINT/SIGTERM received by the launcher
  double interrupted_s_ = 0;  // when (now_s())
  const Rank* failed_ = nullptr;
  std::string diagnosis_;  // the latest heartbeat line of any rank (names unreachable peers)
};

// Keeps the latest "minidl: rank R: ... heartbeat ..." line (parallel/rendezvous/peer_watch.cpp):
// the rank that fails first may not be the one that saw which peer went silent.
void Supervisor::note_diagnosis(const Rank& r, const std::string& line) {
  if (line.rfind("minidl: rank ", 0) != 0 || line.find("heartbeat") == std::string::npos) return;
  diagnosis_ = "[rank " + std::to_string(r.rank) + "] " + line;
}

void Supervisor::spawn(Rank& r, int local) {
  int out[2], err[2];
  MINIDL_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0,
               "minidl-run: pipe2 for rank ", r.rank, ": ", strerror(errno));
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::vector<char*> argv = c_strings(plan_.argv);
  std::vector<char*> envp = c_strings(plan_.envs[static_cast<std::size_t>(local)]);
  std::string fail_msg =
      "minidl-run: rank " + std::to_string(r.rank) + ": cannot execute " + plan_.program + "\n";
  pid_t parent = ::getpid();
  // Signals stay blocked across fork until the child has reset our handlers: a SIGTERM that
  // reaches it before execve must not run on_signal (it would write to our signal pipe).
  sigset_t all, old_mask;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  pid_t pid = ::fork();
  if (pid == 0) {
    exec_child(plan_.program.c_str(), argv.data(), envp.data(), out[1], err[1], null_fd, parent,
               fail_msg.c_str());
  }
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  for (int fd : {out[1], err[1], null_fd}) ::close(fd);
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    MINIDL_FAIL("minidl-run: fork for rank ", r.rank, " failed: ", strerror(fork_errno));
  }
  ::setpgid(pid, pid);  // also in the child: whichever runs first wins the race
  r.pid = pid;
  r.running = true;
  r.out.fd = out[0];
  r.err.fd = err[0];
  r.err.console_fd = 2;
  for (Stream* s : {&r.out, &r.err}) ::fcntl(s->fd, F_SETFL, O_NONBLOCK);
  if (!plan_.log_dir.empty()) {
    for (auto [s, ext] : {std::pair{&r.out, ".out"}, std::pair{&r.err, ".err"}}) {
      std::string path = plan_.log_dir + "/rank" + std::to_string(r.rank) + ext;
      s->log_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (s->log_fd < 0) console_.note("minidl-run: cannot write " + path + ": " + strerror(errno));
    }
  }
}

void Supervisor::pump(Stream& s, Rank& r, bool is_err) {
  char buf[65536];
  for (int chunk = 0; chunk < 16 && s.fd >= 0; ++chunk) {  // bounded: others get a turn
    ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) return close_stream(s, r, is_err);
    if (s.log_fd >= 0) write_all(s.log_fd, std::string(buf, static_cast<std::size_t>(n)));
    for (LineSplitter::Line& l : s.split.feed(buf, static_cast<std::size_t>(n))) {
      if (is_err && !l.cr) r.tail.push(l.text);
      if (is_err && !l.cr) note_diagnosis(r, l.text);
      if (!o_.quiet_ranks || r.rank == 0) console_.line(r.rank, s.console_fd, l);
    }
    console_.flush();
  }
}

void Supervisor::close_stream(Stream& s, Rank& r, bool is_err) {
  LineSplitter::Line rest;
  if (s.split.flush(rest)) {  // a partial last line still reaches the console
    if (is_err) r.tail.push(rest.text);
    if (!o_.quiet_ranks || r.rank == 0) console_.line(r.rank, s.console_fd, rest);
    console_.flush();
  }
  ::close(s.fd);
  s.fd = -1;
  if (s.log_fd >= 0) ::close(s.log_fd);
  s.log_fd = -1;
}

void Supervisor::signal_all(int sig) {
  // Whole process groups, also of ranks already reaped: their children may linger.
  for (auto& r : ranks_) {
    if (r->pid > 0) ::kill(-r->pid, sig);
  }
}

void Supervisor::begin_stop(int sig) {
  stopping_ = true;
  kill_at_ = now_s() + o_.timeout_stop_s;
  signal_all(sig);
}

void Supervisor::reap() {
  for (auto& r : ranks_) {
    if (!r->running) continue;
    int status = 0;
    pid_t got = ::waitpid(r->pid, &status, WNOHANG);
    if (got != r->pid) continue;
    r->running = false;
    r->status = status;
    r->exit_s = now_s() - start_s_;
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok || stopping_) continue;
    failed_ = r.get();
    begin_stop(SIGTERM);
    pump(r->out, *r, false);  // a dead rank's output is all in its pipes: read it first
    pump(r->err, *r, true);
    fail_summary(*r);
  }
}

void Supervisor::fail_summary(const Rank& r) {
  int others = 0;
  for (auto& x : ranks_) others += x->running;
  std::string msg = "minidl-run: rank " + std::to_string(r.rank) + " (pid " +
                    std::to_string(r.pid) + ") failed first: " + describe_wait_status(r.status) +
                    " after " + fmt_seconds(r.exit_s) + " s; " +
                    (others > 0 ? "stopping the other " + std::to_string(others) + " rank(s)."
                                : "no other rank was running.");
  const auto& tail = r.tail.lines();
  if (tail.empty()) {
    msg += " Rank " + std::to_string(r.rank) + " wrote nothing to stderr.";
  } else {
    msg += " Last " + std::to_string(tail.size()) + " lines of rank " + std::to_string(r.rank) +
           "'s stderr:";
    for (const std::string& l : tail) msg += "\n    " + l;
  }
  if (!diagnosis_.empty()) msg += "\nminidl-run: heartbeat diagnosis: " + diagnosis_;
  if (!plan_.log_dir.empty()) {
    msg += "\nminidl-run: full logs: " + plan_.log_dir + "/rank" + std::to_string(r.rank) + ".err";
  }
  console_.note(msg);
}

int Supervisor::run() {
  SignalGuard guard;
  for (const std::string& line : plan_.banner) console_.note(line);
  int local = 0;
  try {
    for (; local < o_.nproc_per_node; ++local) {
      ranks_.push_back(std::make_unique<Rank>());
      ranks_.back()->rank = o_.node_rank * o_.nproc_per_node + local;
      spawn(*ranks_.back(), local);
    }
  } catch (const Error&) {
    ranks_.pop_back();  // the rank that failed to spawn never started
    signal_all(SIGKILL);
    for (auto& r : ranks_) ::waitpid(r->pid, nullptr, 0);
    throw;
  }
  double drain_until = 0;
  while (true) {
    reap();
    bool any_running = false, any_open = false;
    for (auto& r : ranks_) {
      any_running = any_running || r->running;
      any_open = any_open || r->out.fd >= 0 || r->err.fd >= 0;
    }
    double now = now_s();
    if (!any_running) {
      // Grandchildren may hold the pipes open: drain briefly, then stop reading.
      if (drain_until == 0) drain_until = now + 1.0;
      if (!any_open || now >= drain_until) break;
    }
    if (stopping_ && !killed_ && now >= kill_at_) {
      signal_all(SIGKILL);
      killed_ = true;
      give_up_at_ = now + 3.0;
    }
    if (killed_ && now >= give_up_at_) break;  // unkillable (D state): do not hang
    std::vector<pollfd> fds{{guard.pipe_fds[0], POLLIN, 0}};
    std::vector<std::pair<Rank*, bool>> owners{{nullptr, false}};
    for (auto& r : ranks_) {
      if (r->out.fd >= 0) fds.push_back({r->out.fd, POLLIN, 0}), owners.push_back({r.get(), false});
      if (r->err.fd >= 0) fds.push_back({r->err.fd, POLLIN, 0}), owners.push_back({r.get(), true});
    }
    double wake = drain_until > 0 ? drain_until : now + 1.0;  // 1 s tick backs up SIGCHLD
    if (stopping_ && !killed_) wake = std::min(wake, kill_at_);
    if (killed_) wake = std::min(wake, give_up_at_);
    int timeout_ms = std::max(1, static_cast<int>((wake - now) * 1000) + 1);
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) {
      unsigned char sigs[64];
      ssize_t n = ::read(guard.pipe_fds[0], sigs, sizeof(sigs));
      for (ssize_t i = 0; i < n; ++i) {
        int sig = sigs[i];
        if (sig != SIGINT && sig != SIGTERM) continue;  // SIGCHLD: reap() at the loop top
        if (interrupted_ != 0 || killed_) {
          console_.note("minidl-run: second signal: killing all ranks now");
          signal_all(SIGKILL);
          killed_ = true;
          give_up_at_ = now_s() + 3.0;
          continue;
        }
        interrupted_ = sig;
        interrupted_s_ = now_s();
        console_.note(std::string("minidl-run: got ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") +
                      "; forwarding it to all ranks, SIGKILL after " +
                      fmt_seconds(o_.timeout_stop_s) + " s (press Ctrl-C again to kill now)");
        begin_stop(sig);
      }
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto [r, is_err] = owners[i];
      pump(is_err ? r->err : r->out, *r, is_err);
    }
  }
  for (auto& r : ranks_) {
    for (auto [s, is_err] : {std::pair{&r->out, false}, std::pair{&r->err, true}}) {
      if (s->fd >= 0) close_stream(*s, *r, is_err);
    }
  }
  if (stopping_) signal_all(SIGKILL);  // leftovers in the groups (children of ranks)
  const std::string took = fmt_seconds(now_s() - start_s_);
  int unreaped = 0;
  for (auto& r : ranks_) unreaped += r->running;
  if (unreaped > 0) {
    console_.note("minidl-run: " + std::to_string(unreaped) +
                  " rank(s) did not exit even after SIGKILL; giving up on them");
  }
  if (interrupted_ != 0) {
    console_.note("minidl-run: stopped all ranks " + fmt_seconds(now_s() - interrupted_s_) +
                  " s after " + std::string(interrupted_ == SIGINT ? "SIGINT" : "SIGTERM") +
                  " (ran " + took + " s)");
    return 128 + interrupted_;
  }
  if (failed_ != nullptr) return exit_code_of(failed_->status);
  if (unreaped > 0) return 1;
  if (o_.verbose) {
    console_.note("minidl-run: all " + std::to_string(ranks_.size()) + " ranks finished in " +
                  took + " s");
  }
  return 0;
}

}  // namespace

int run_ranks(const LaunchPlan& plan, RunOutcome* outcome) {
  Supervisor s(plan);
  const int rc = s.run();
  if (outcome) *outcome = s.outcome();
  return rc;
}

}  // namespace minidl::dist
