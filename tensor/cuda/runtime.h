// CUDA runtime entry points usable from plain C++ (no CUDA headers here).
#pragma once
#include <vector>

namespace minidl::cuda {
// Runs a trivial kernel writing start, start+1, ... on device 0 and returns the values.
std::vector<float> smoke_iota(int n, float start);
}  // namespace minidl::cuda
