// CPU threading: the OpenMP parallel_for the kernels split their work with, and the thread
// count shared by OpenMP and Eigen (torch.set_num_threads).
#pragma once
#include <cstdint>
#include <functional>

namespace minidl {

void set_num_threads(int n);  // OpenMP + Eigen threads
int get_num_threads();

namespace cpu {

inline constexpr int64_t kParallelGrain = 32768;  // elements per thread chunk, at least

// Runs fn(begin, end) over [0, n) split in chunks across OpenMP threads when n is large.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace cpu
}  // namespace minidl
