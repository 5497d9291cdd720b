// file:// rendezvous (used by rendezvous.cpp): rank 0 publishes its store's address in a file,
// the other ranks read it; both bounded by the timeout.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "parallel/store/tcp_store.h"

namespace minidl::dist {

// This host's name (gethostname).
std::string local_host_name();

// Removes the rendezvous file when rank 0 leaves rendezvous(), on success or exception.
struct RendezvousFileGuard {
  std::string path;  // empty until rank 0 has published the file
  RendezvousFileGuard() = default;
  RendezvousFileGuard(const RendezvousFileGuard&) = delete;
  RendezvousFileGuard& operator=(const RendezvousFileGuard&) = delete;
  ~RendezvousFileGuard();
};

// Rank 0: starts the store on an ephemeral port and publishes "host port pid" at `path`
// (refusing a file a live job owns, reclaiming a stale one); `guard` removes it later.
std::shared_ptr<TcpStore> file_rendezvous_master(const std::string& path, int rank,
                                                 std::chrono::milliseconds timeout,
                                                 RendezvousFileGuard& guard);
// Other ranks: waits for a live rank 0's record at `path` and connects to its store.
std::shared_ptr<TcpStore> file_rendezvous_client(const std::string& path, int rank,
                                                 std::chrono::milliseconds timeout);

}  // namespace minidl::dist
