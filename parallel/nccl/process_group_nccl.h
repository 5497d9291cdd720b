// The NCCL backend of ProcessGroup (CUDA tensors). Built only when CUDA and NCCL are found;
// no CUDA or NCCL header is included here.
#pragma once
#include <memory>

#include "parallel/process_group/process_group.h"

namespace minidl::dist {

// Throws "minidl was built without NCCL" in builds without NCCL, and "NCCL cannot run two
// ranks on one GPU ..." when two ranks share a device.
std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store> store, int rank,
                                                      int world_size,
                                                      const ProcessGroupOptions& options);

// Whether this build has the NCCL backend.
bool nccl_available();

}  // namespace minidl::dist
