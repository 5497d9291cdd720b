// Helpers for the distributed tests: error-message capture with timing, a forked child
// process that is always reaped (killed after a deadline), and an environment guard.
#pragma once
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "parallel/tcp_store.h"
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

// Forks a child that runs fn and _exits with its result (0: success, 1: false, 2: threw);
// the parent waits at most `limit` and SIGKILLs a child that overruns. Returns the exit code
// (or 128 + signal).
inline int run_child(const std::function<bool()>& fn, std::chrono::milliseconds limit) {
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
  const auto deadline = Clock::now() + limit;
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

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
