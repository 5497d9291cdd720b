// CPU threading for the kernels: the OpenMP parallel_for they split their work with (the thread
// count is set through tensor/threads.h). Internal to tensor/: not included by ops.h.
#pragma once
#include <cstdint>
#include <functional>

#include "tensor/threads.h"

namespace minidl {
namespace cpu {

inline constexpr int64_t kParallelGrain = 32768;  // elements per thread chunk, at least

// Runs fn(begin, end) over [0, n) split in chunks across OpenMP threads when n is large.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Records that OpenMP may start a team of nthreads here (Eigen's GEMM, a oneDNN primitive):
// a child forked after the first team > 1 runs its kernels on one thread instead of hanging.
void note_thread_team(int nthreads);

}  // namespace cpu
}  // namespace minidl
