// Connecting the gloo backend: the address gloo listens on and a full-mesh gloo context whose
// keys travel through minidl's Store (parallel/gloo/context.cpp).
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "parallel/store/store.h"

#if MINIDL_WITH_GLOO
#include <gloo/rendezvous/context.h>
#endif

namespace minidl::dist {

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
