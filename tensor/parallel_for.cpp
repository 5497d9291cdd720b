// CPU threading: OpenMP parallel_for used by the kernels, and the thread-count setting
// shared by OpenMP and Eigen.
#include "tensor/parallel_for.h"

#include <algorithm>

#include "tensor/error.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#include <Eigen/Core>

namespace minidl {

void set_num_threads(int n) {
  MINIDL_CHECK(n >= 1, "set_num_threads: expected a positive thread count, got ", n);
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

void parallel_for(int64_t n, [[maybe_unused]] int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
#ifdef _OPENMP
  int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
  int nthreads = int(std::min<int64_t>(omp_get_max_threads(), max_chunks));
  if (nthreads > 1 && !omp_in_parallel()) {
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
