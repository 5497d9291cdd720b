// minidl-run's engine (torchrun-like): spawns one process per rank with the torchrun env
// contract, prefixes and logs their output, and stops every rank when one fails (fail-fast).
// Apps can self-launch (`mnist_ddp -n 2 ...`) through self_launch().
#pragma once
#include <string>
#include <vector>

#include "parallel/launch/options.h"
#include "parallel/launch/util.h"

namespace minidl::dist {

// Runs argv (argv[0] searched in PATH) nproc_per_node times and returns the launcher's exit
// code: 0 when every rank exits 0; else the first failing rank's exit code (128+signal when
// killed); 128+signal when the launcher itself got SIGINT/SIGTERM. Bad options or a missing
// program throw minidl::Error before anything is spawned.
int launch(const LaunchOptions& options, const std::vector<std::string>& argv);

// True inside a process started by launch() (MINIDL_LAUNCHER=1).
bool launched_by_launcher();

// Re-executes /proc/self/exe with argv[1..] minus the flags in drop_flags (each with its value:
// "-n 2", "-n2", "--nproc=2") as nproc ranks under launch(); returns launch()'s exit code.
// Typical use in main(): if (n > 1 && !launched_by_launcher()) return self_launch(n, ...).
int self_launch(int nproc, int argc, char** argv, const std::vector<std::string>& drop_flags,
                LaunchOptions options = {});  // options.nproc_per_node is replaced by nproc

}  // namespace minidl::dist
