// Rendezvous (like torch.distributed's init_method): finds the store, registers every rank
// and returns who is who. env:// follows the torchrun contract (MASTER_ADDR, MASTER_PORT,
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) with OpenMPI / MPICH / Slurm fallbacks
// (launch_env.h); tcp://host:port names the master; file:///path exchanges the master's address
// in a file.
#pragma once
#include <memory>
#include <string>

#include "parallel/rendezvous/launch_env.h"  // LaunchEnv, read_launch_env()
#include "parallel/store/store.h"

namespace minidl::dist {

struct RendezvousInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  std::shared_ptr<Store> store;  // rank 0 hosts the server; keep this alive while in use
};

struct RendezvousOptions {
  int rank = -1;        // -1: from the URL query (?rank=) or the environment
  int world_size = -1;  // -1: from the URL query (?world_size=) or the environment
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;  // bounds every step
};

// Blocks until all world_size ranks have joined or the timeout passes. Errors: a duplicate
// rank fails at once ("rank 1 joined twice"); a missing one fails at the timeout with
// "expected 3, joined 2, missing ranks [2]".
RendezvousInfo rendezvous(const std::string& init_method, const RendezvousOptions& options);
inline RendezvousInfo rendezvous(const std::string& init_method,
                                 std::chrono::milliseconds timeout = Store::kDefaultTimeout) {
  return rendezvous(init_method, RendezvousOptions{.timeout = timeout});
}

// Registers `rank` in `store` and waits for all ranks (used by rendezvous; exposed for
// stores made by hand). Fills local_rank / local_world_size from the hosts that joined.
// *joined (optional) becomes true once this rank has counted itself in.
void register_rank(Store& store, RendezvousInfo& info, std::chrono::milliseconds timeout,
                   const std::string& where, bool* joined = nullptr);

}  // namespace minidl::dist
