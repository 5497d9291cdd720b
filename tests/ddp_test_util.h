// Forked-rank harness for the DDP tests: runs a function on N forked ranks joined by a gloo
// group, shared doubles for reporting, bitwise cross-rank comparisons.
#pragma once
#include <doctest/doctest.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

#include "dist_test_util.h"
#include "parallel/distributed.h"
#include "parallel/ddp/ddp.h"
#include "parallel/store/tcp_store.h"
#include "autograd/ops.h"

namespace ddptest {
using namespace minidl;
using namespace minidl::dist;
using namespace std::chrono_literals;

// Doubles shared between the forked ranks and the test (measured errors, timings).
inline double* shared_doubles() {
  static double* mem = static_cast<double*>(
      ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  return mem;
}

using RankFn = std::function<bool(int rank, std::shared_ptr<ProcessGroup> pg)>;

// Inside a rank: the store its group was built on (for DDPOptions::store).
inline std::shared_ptr<Store>& rank_store() {
  static std::shared_ptr<Store> store;
  return store;
}

// Forked children of a process whose OpenMP pool already ran can hang in libgomp: ctest runs
// each case in its own process, where this is the first parallel work.
// Runs fn on `world` forked ranks joined by a gloo group (store hosted by a
// disttest::StoreProcess, forked first, so the test process has no thread while it forks);
// every rank must return true within 30 s. A rank's error is printed with its rank.
inline void run_ranks(int world, const RankFn& fn, std::chrono::milliseconds pg_timeout = 10s) {
  shared_doubles();   // map the shared page before forking
  std::cout.flush();  // a child's std::cerr (tied to cout) must not replay buffered output
  std::fflush(stdout);
  disttest::StoreProcess host;
  const int port = host.port();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r)
    pids.push_back(disttest::spawn_child([&, r] {
      try {
        set_num_threads(1);
        auto store = std::make_shared<TcpStore>(TcpStoreOptions{.port = port});
        auto pg = make_process_group("gloo", store, r, world, {.timeout = pg_timeout});
        rank_store() = store;
        return fn(r, pg);
      } catch (const std::exception& e) {
        std::cerr << "[rank " << r << "] error: " << e.what() << "\n";
        return false;
      }
    }));
  const auto deadline = disttest::Clock::now() + 30s;
  for (int r = 0; r < world; ++r) {
    const int code = disttest::reap_child(pids[size_t(r)], deadline);
    INFO("rank " << r);
    CHECK(code == 0);
  }
  CHECK(host.stop() == 0);
}

inline bool report(int rank, bool ok, const std::string& what) {
  if (!ok) std::cerr << "[rank " << rank << "] check failed: " << what << "\n";
  return ok;
}

// The floating tensors among `ts`, flattened into one (f32 here).
inline Tensor flat(const std::vector<Tensor>& ts) {
  std::vector<Tensor> parts;
  for (const Tensor& t : ts)
    if (t.is_floating_point()) parts.push_back(t.detach().flatten());
  return cat(parts, 0);
}
inline Tensor flat_state(nn::Module& m) {
  std::vector<Tensor> all = m.parameters(), buffers = m.buffers();
  all.insert(all.end(), buffers.begin(), buffers.end());
  return flat(all);
}

// Whether `t` is bitwise equal on every rank.
inline bool same_on_all_ranks(ProcessGroup& pg, const Tensor& t) {
  std::vector<Tensor> all(size_t(pg.size()));
  for (auto& a : all) a = empty_like(t);
  pg.allgather(all, t.contiguous())->wait();
  for (auto& a : all)
    if (std::memcmp(a.data_ptr(), all[0].data_ptr(), size_t(t.numel()) * t.element_size()) != 0)
      return false;
  return true;
}

}  // namespace ddptest
