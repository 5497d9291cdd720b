// The gloo backend of ProcessGroup: one gloo context per group (full mesh over TCP, keys
// exchanged through our Store) and one communication thread running collectives in issue order.
// CPU tensors are used in place; CUDA tensors are staged through pinned host memory.
#pragma once
#include <memory>
#include <string>

#include "parallel/process_group.h"

#if MINIDL_WITH_GLOO
#include <gloo/rendezvous/context.h>
#endif

namespace minidl::dist {

// Throws "minidl was built without Gloo" when Gloo was not found at configure time.
std::shared_ptr<ProcessGroup> make_gloo_process_group(std::shared_ptr<Store> store, int rank,
                                                      int world_size,
                                                      const ProcessGroupOptions& options);

#if MINIDL_WITH_GLOO
// A connected gloo context made the way the gloo backend makes its own: TCP device on the
// address chosen by gloo_host_address(), keys under `prefix` in `store` (used by benchmarks).
std::shared_ptr<gloo::rendezvous::Context> connect_gloo_context(std::shared_ptr<Store> store,
                                                                int rank, int world_size,
                                                                const std::string& prefix,
                                                                std::chrono::milliseconds timeout);
#endif

// Where gloo listens: MINIDL_GLOO_IFNAME names an interface ("if:eth0"); else 127.0.0.1 when
// the store's master is on loopback, else the local address that routes to the master, else
// the hostname.
std::string gloo_host_address(Store& store);

}  // namespace minidl::dist
