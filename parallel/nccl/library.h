// The NCCL library as minidl loads it (dlopen on first use, parallel/nccl/api.cuh), seen
// without NCCL or CUDA headers: for tests and diagnostics. Defined in CUDA builds with NCCL.
#pragma once
#include <vector>

#include "tensor/cuda/runtime/dynlib.h"

namespace minidl::dist {

// Loads NCCL if needed (throws naming the library and every path tried when it cannot).
const cuda::DynLib& nccl_library();
// Every NCCL function minidl calls, with its resolved address.
std::vector<cuda::DynSymbol> nccl_symbols();
// Whether this process has loaded NCCL (loading nothing).
bool nccl_loaded();

}  // namespace minidl::dist
