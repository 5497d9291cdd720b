// CUDA runtime entry points usable from plain C++ (no CUDA headers here).
#pragma once
#include <cstddef>
#include <vector>

namespace minidl::cuda {
// Runs a trivial kernel writing start, start+1, ... on device 0 and returns the values.
std::vector<float> smoke_iota(int n, float start);
// Page-locked host memory from a caching allocator (cudaHostAlloc'd blocks are reused, not
// freed); throws minidl::Error on failure. release_cached_pinned frees the cached blocks.
void* host_alloc_pinned(size_t nbytes);
void host_free_pinned(void* ptr);
void release_cached_pinned();
// Whether `ptr` points into page-locked host memory known to the CUDA runtime.
bool is_pinned_host_ptr(const void* ptr);
}  // namespace minidl::cuda
