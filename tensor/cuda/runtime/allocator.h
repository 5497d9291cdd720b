// Internals of the CUDA caching allocator shared with CUDA graphs (no CUDA header): routing
// a device's allocations into a graph's private pool during capture, and releasing it.
#pragma once
#include <cstdint>

namespace minidl::cuda::alloc {

using PoolId = uint64_t;  // 0: the default pool
PoolId new_pool_id();
// While set, allocations on `device` come from (and frees return to) `pool`.
void begin_allocate_to_pool(int device, PoolId pool);
void end_allocate_to_pool(int device);
// The graph is gone: its pool's segments go back to the driver once all their blocks are free.
void release_pool(int device, PoolId pool);
// Number of bytes of segments owned by a pool (tests).
int64_t pool_reserved_bytes(int device, PoolId pool);

}  // namespace minidl::cuda::alloc
