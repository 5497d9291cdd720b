// CPU threading: OpenMP parallel_for used by the kernels, the thread-count setting shared by
// OpenMP and Eigen, and one thread in a child forked after OpenMP's threads started (GNU
// libgomp's pool does not survive fork(): a team started in that child would wait forever).
#include "tensor/parallel_for.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "tensor/error.h"
#include "tensor/warning.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#include <Eigen/Core>

namespace minidl {
namespace {

// A team of more than one OpenMP thread may have started in this process (its pool is alive).
std::atomic<bool> g_team_started{false};
// This process was forked after a team started: OpenMP runs one thread here.
std::atomic<bool> g_forked_after_team{false};

// fork()'s child side (pthread_atfork): plain stores and libgomp's thread-count setting.
void on_fork_child() {
  if (!g_team_started.load(std::memory_order_relaxed)) return;
  g_forked_after_team.store(true, std::memory_order_relaxed);
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  Eigen::setNbThreads(1);
}

[[maybe_unused]] const int g_atfork_registered = pthread_atfork(nullptr, nullptr, on_fork_child);

}  // namespace

void set_num_threads(int n) {
  MINIDL_CHECK(n >= 1, "set_num_threads: expected a positive thread count, got ", n);
  if (n > 1 && g_forked_after_team.load(std::memory_order_relaxed)) {
    warn_once("set_num_threads after fork",
              "set_num_threads(" + std::to_string(n) +
                  "): this process was forked after OpenMP's threads started, and OpenMP "
                  "cannot start threads in it (they would hang); its CPU kernels run on 1 thread. "
                  "Set the thread count in a process started with exec (minidl-run, torchrun), "
                  "or fork before the first parallel kernel");
    n = 1;
  }
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
  Eigen::setNbThreads(n);
}

int get_num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

namespace cpu {

void note_thread_team(int nthreads) {
  if (nthreads > 1 && !g_team_started.load(std::memory_order_relaxed))
    g_team_started.store(true, std::memory_order_relaxed);
}

void parallel_for(int64_t n, [[maybe_unused]] int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
#ifdef _OPENMP
  int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
  int nthreads = int(std::min<int64_t>(omp_get_max_threads(), max_chunks));
  if (nthreads > 1 && !omp_in_parallel()) {
    note_thread_team(nthreads);
#pragma omp parallel num_threads(nthreads)
    {
      int t = omp_get_thread_num(), nt = omp_get_num_threads();
      int64_t chunk = (n + nt - 1) / nt;
      int64_t b = t * chunk, e = std::min(n, b + chunk);
      if (b < e) fn(b, e);
    }
    return;
  }
#endif
  fn(0, n);
}

}  // namespace cpu
}  // namespace minidl
