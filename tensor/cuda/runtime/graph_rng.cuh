// Philox state for CUDA random kernels that also works inside CUDA graphs: eager draws pass
// (seed, offset) by value; during capture they read (seed, offset base) from a device slot
// that CUDAGraph::replay() refreshes from the generator before every launch, so each replay
// draws fresh numbers exactly as the same eager calls would.
#pragma once
#include <cstdint>

#include "tensor/random.h"

namespace minidl::cuda {

struct PhiloxArgs {
  uint64_t seed = 0;
  uint64_t offset = 0;             // eager: absolute; captured: relative to the slot's base
  const uint64_t* slot = nullptr;  // captured: device {seed, offset base}; eager: null

  __device__ inline PhiloxStream stream() const {
    if (slot) return PhiloxStream{slot[0], slot[1] + offset};
    return PhiloxStream{seed, offset};
  }
};

// Reserves `counters` Philox blocks from `gen` for a draw on `device` (see tensor/random.h for
// how many a draw needs). Call once per kernel launch, on the launching thread.
PhiloxArgs reserve_philox(Generator& gen, uint64_t counters, int device);

}  // namespace minidl::cuda
