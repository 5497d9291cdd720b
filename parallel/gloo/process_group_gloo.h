// The gloo backend of ProcessGroup: one gloo context per group (full mesh over TCP, keys
// exchanged through our Store) and one communication thread running collectives in issue order.
// CPU tensors are used in place; CUDA tensors are staged through pinned host memory.
#pragma once
#include <memory>
#include <string>

#include "parallel/gloo/context.h"
#include "parallel/process_group/process_group.h"

namespace minidl::dist {

// Throws "minidl was built without Gloo" when Gloo was not found at configure time.
std::shared_ptr<ProcessGroup> make_gloo_process_group(std::shared_ptr<Store> store, int rank,
                                                      int world_size,
                                                      const ProcessGroupOptions& options);

}  // namespace minidl::dist
