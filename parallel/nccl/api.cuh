// NCCL is not linked: a table of its functions, filled on first use by dlopen/dlsym of
// libnccl.so.<NCCL_MAJOR> (tensor/cuda/runtime/dynlib.h's search and errors), so a CPU-only run of
// a CUDA build never needs it. Calls go through the table: nccl_api().ncclAllReduce(...).
#pragma once
#include <nccl.h>

#include <vector>

#include "parallel/nccl/library.h"

#define MINIDL_NCCL_FUNCTIONS(X) \
  X(ncclGetErrorString)          \
  X(ncclGetUniqueId)             \
  X(ncclCommInitRank)            \
  X(ncclCommDestroy)             \
  X(ncclCommAbort)               \
  X(ncclCommGetAsyncError)       \
  X(ncclGroupStart)              \
  X(ncclGroupEnd)                \
  X(ncclAllReduce)               \
  X(ncclBroadcast)               \
  X(ncclReduce)                  \
  X(ncclSend)                    \
  X(ncclRecv)

namespace minidl::dist {

#define MINIDL_NCCL_API_MEMBER(name) decltype(&::name) name = nullptr;
struct NcclApi {
  MINIDL_NCCL_FUNCTIONS(MINIDL_NCCL_API_MEMBER)
};
#undef MINIDL_NCCL_API_MEMBER

// Loaded on the first call (thread-safe); throws an Error naming the library or symbol that is
// missing, and tries again on the next call.
const NcclApi& nccl_api();

}  // namespace minidl::dist
