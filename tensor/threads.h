// The CPU thread count shared by OpenMP and Eigen (torch.set_num_threads / get_num_threads);
// defined in tensor/parallel_for.cpp beside the parallel_for the kernels split their work with.
#pragma once

namespace minidl {

void set_num_threads(int n);  // OpenMP + Eigen threads
int get_num_threads();

}  // namespace minidl
