// Helpers for the distributed tests: error-message capture with timing, forked children that
// are always reaped (killed after a deadline), a store server in its own process, and an
// environment guard.
#pragma once
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "parallel/store/tcp_store.h"
#include "tensor/error.h"

namespace disttest {

using Clock = std::chrono::steady_clock;

// A port that was free a moment ago (the OS picked it; its listener is closed).
inline int free_port() {
  minidl::dist::TcpStore probe({.port = 0, .is_master = true});
  return probe.port();
}

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs fn, expecting a minidl::Error; returns its message and the elapsed seconds.
struct Failure {
  std::string message;
  double seconds = 0;
};
inline Failure expect_error(const std::function<void()>& fn) {
  auto t0 = Clock::now();
  try {
    fn();
  } catch (const minidl::Error& e) {
    return {e.what(), seconds_since(t0)};
  }
  FAIL("expected a minidl::Error");
  return {};
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Forks a child that runs fn and _exits with its result (0: success, 1: false, 2: threw).
inline pid_t spawn_child(const std::function<bool()>& fn) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 2;
    try {
      code = fn() ? 0 : 1;
    } catch (...) {
    }
    ::_exit(code);
  }
  return pid;
}

// Waits for a child until `deadline`, SIGKILLing it then. Returns its exit code (or 128 +
// signal). Under ThreadSanitizer a child that reported a race exits with 66 (its _exit).
inline int reap_child(pid_t pid, Clock::time_point deadline) {
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// spawn_child and reap_child: waits at most `limit` for the child.
inline int run_child(const std::function<bool()>& fn, std::chrono::milliseconds limit) {
  const pid_t pid = spawn_child(fn);
  return reap_child(pid, Clock::now() + limit);
}

// A TcpStore master hosted by a forked process, so that a test process that forks ranks has
// no thread of its own while it forks (as under a real launcher): ThreadSanitizer cannot
// follow threads that a child starts after a fork from a threaded parent ("dup thread with
// used id"). Create it before any thread; stop() (or the destructor) ends and reaps it.
class StoreProcess {
 public:
  explicit StoreProcess(std::chrono::milliseconds timeout = minidl::dist::Store::kDefaultTimeout) {
    int port_pipe[2], stop_pipe[2];
    REQUIRE(::pipe(port_pipe) == 0);
    REQUIRE(::pipe(stop_pipe) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives a crashed test
      ::close(port_pipe[0]);
      ::close(stop_pipe[1]);
      serve(timeout, port_pipe[1], stop_pipe[0]);
    }
    ::close(port_pipe[1]);
    ::close(stop_pipe[0]);
    stop_fd_ = stop_pipe[1];
    ssize_t n;
    do {
      n = ::read(port_pipe[0], &port_, sizeof(port_));
    } while (n < 0 && errno == EINTR);
    ::close(port_pipe[0]);
    REQUIRE_MESSAGE(port_ > 0, "the store process could not start its server");
  }
  StoreProcess(const StoreProcess&) = delete;
  StoreProcess& operator=(const StoreProcess&) = delete;
  ~StoreProcess() {
    if (pid_ > 0) stop();
  }

  int port() const { return port_; }

  // Closes the pipe the server process waits on (forked ranks hold it too, so call this once
  // they are gone) and reaps it; returns its exit code (non-zero: it failed, or, under
  // ThreadSanitizer, reported a race).
  int stop() {
    ::close(stop_fd_);
    const int code = reap_child(pid_, Clock::now() + std::chrono::seconds(5));
    pid_ = -1;
    return code;
  }

 private:
  [[noreturn]] static void serve(std::chrono::milliseconds timeout, int port_fd, int stop_fd) {
    int port = -1;
    {
      std::unique_ptr<minidl::dist::TcpStore> store;
      try {
        store = std::make_unique<minidl::dist::TcpStore>(
            minidl::dist::TcpStoreOptions{.port = 0, .is_master = true, .timeout = timeout});
        port = store->port();
      } catch (...) {
      }
      [[maybe_unused]] ssize_t w = ::write(port_fd, &port, sizeof(port));
      char c;
      ssize_t n;
      do {  // until EOF: the test closed its end
        n = ::read(stop_fd, &c, 1);
      } while (n > 0 || (n < 0 && errno == EINTR));
    }
    ::_exit(port > 0 ? 0 : 1);
  }

  pid_t pid_ = -1;
  int port_ = -1;
  int stop_fd_ = -1;
};

// Sets / unsets environment variables for a scope and restores the previous values.
class EnvGuard {
 public:
  void set(const std::string& name, const std::optional<std::string>& value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
  ~EnvGuard() {
    for (auto& [name, value] : saved_) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace disttest
