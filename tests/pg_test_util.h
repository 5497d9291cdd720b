// Helpers for the process-group tests: run N ranks in forked children that report their
// findings through a TcpStore in a process of its own (always reaped, killed after a
// deadline), and a small failure collector for code running inside a child.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dist_test_util.h"
#include "parallel/store/tcp_store.h"

namespace pgtest {

using namespace std::chrono_literals;

// Collects failed expectations inside a child (doctest macros do not cross fork()).
struct Checker {
  std::ostringstream out;
  bool check(bool cond, const std::string& what) {
    if (!cond) out << what << "; ";
    return cond;
  }
  std::string str() const { return out.str(); }
};

// What each rank reported: "OK", its failure text, or why it reported nothing.
struct RankReport {
  std::string text;
  int exit_code = 0;
};

// Forks `world` children; child r runs fn(r, store) where `store` is a client of a TcpStore
// hosted by a disttest::StoreProcess (for results and, when the test wants, process-group
// setup). fn returns "" on success. Children _exit; the parent reaps all of them, killing
// those past `limit`. A rank that reported but exited non-zero (under ThreadSanitizer: it
// reported a race) gets its exit code appended to its text.
inline std::vector<RankReport> run_ranks(
    int world, const std::function<std::string(int, std::shared_ptr<minidl::dist::Store>)>& fn,
    std::chrono::milliseconds limit = 8000ms) {
  using minidl::dist::TcpStore;
  disttest::StoreProcess host(5000ms);
  const int port = host.port();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      std::string result;
      try {
        auto store = std::make_shared<TcpStore>(minidl::dist::TcpStoreOptions{
            .host = "127.0.0.1", .port = port, .timeout = 5000ms, .rank = r});
        try {
          result = fn(r, store);
        } catch (const std::exception& e) {
          result = std::string("threw: ") + e.what();
        }
        store->set("result/" + std::to_string(r), result.empty() ? "OK" : result);
      } catch (...) {
      }
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  std::vector<RankReport> out(static_cast<size_t>(world));
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (int r = 0; r < world; ++r)
    out[size_t(r)].exit_code =
        pids[size_t(r)] < 0 ? -1 : disttest::reap_child(pids[size_t(r)], deadline);
  {
    TcpStore results({.host = "127.0.0.1", .port = port, .timeout = 5000ms});
    for (int r = 0; r < world; ++r) {
      RankReport& report = out[size_t(r)];
      const std::string key = "result/" + std::to_string(r);
      const std::string code = "exit code " + std::to_string(report.exit_code);
      if (!results.check({key}))
        report.text = "no report (" + code + ")";
      else
        report.text = results.get_string(key) + (report.exit_code == 0 ? "" : " (" + code + ")");
    }
  }
  const int host_code = host.stop();
  CHECK_MESSAGE(host_code == 0, "the store process exited with ", host_code);
  return out;
}

}  // namespace pgtest
