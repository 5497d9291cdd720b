// minidl-run: torchrun-like launcher. `minidl-run -n 2 ./mnist_ddp --epochs 1` starts 2 ranks
// with RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, prefixes their
// output, logs it per rank and stops all ranks when one fails (parallel/launch/launcher.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "parallel/launch/launcher.h"
#include "tensor/error.h"

int main(int argc, char** argv) {
  minidl::dist::LaunchOptions o;
  CLI::App app{
      "usage: minidl-run [options] [--] PROGRAM [ARGS...]\n"
      "Starts PROGRAM once per rank (torchrun contract: RANK, WORLD_SIZE, LOCAL_RANK,\n"
      "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, MINIDL_LAUNCHER=1; OMP_NUM_THREADS =\n"
      "cores / ranks unless set). Console lines are prefixed \"[rank R] \"; raw output goes to\n"
      "LOG_DIR/rank<R>.out and rank<R>.err. When a rank fails, all ranks are stopped (SIGTERM,\n"
      "SIGKILL after --timeout-stop) and the exit code is the failed rank's (128+signal if\n"
      "killed); Ctrl-C/SIGTERM is forwarded to all ranks (exit 130/143). --max-restarts N\n"
      "relaunches them after a failure (MINIDL_RESTART_COUNT, TORCHELASTIC_RESTART_COUNT).",
      "minidl-run"};
  app.get_formatter()->column_width(34);
  app.prefix_command();  // options end at PROGRAM; the rest is PROGRAM's
  app.add_option("-n,--nproc-per-node", o.nproc_per_node, "processes (ranks) on this node")
      ->capture_default_str();
  app.add_option("--nnodes", o.nnodes, "number of nodes")->capture_default_str();
  app.add_option("--node-rank", o.node_rank, "this node's index: RANK = node_rank*n + local")
      ->capture_default_str();
  app.add_option("--master-addr", o.master_addr, "address of global rank 0's store")
      ->capture_default_str();
  app.add_option("--master-port", o.master_port,
                 "port of rank 0's store (0: a free port; required with --nnodes > 1)")
      ->capture_default_str();
  app.add_option("--log-dir", o.log_dir,
                 "per-rank logs rank<R>.out/.err here (default: $MINIDL_LOG_DIR, else a temp "
                 "dir removed unless a rank fails; 'none': no files)");
  app.add_option("--device-per-rank", o.device_per_rank,
                 "auto: print rank -> cuda:k (LOCAL_RANK % visible GPUs) or cpu; none: skip")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "none"}));
  app.add_option("--backend", o.backend,
                 "nccl: refuse more ranks per node than visible GPUs (checked before spawning)")
      ->check(CLI::IsMember({"nccl", "gloo"}));
  app.add_flag("--quiet-ranks", o.quiet_ranks, "console shows only rank 0 (logs keep all)");
  app.add_option("--timeout-stop", o.timeout_stop_s, "seconds between SIGTERM and SIGKILL")
      ->capture_default_str();
  app.add_option("--max-restarts", o.max_restarts,
                 "after a rank fails, stop all and relaunch them (with --resume auto when the "
                 "program takes it) up to N times; not before a first checkpoint")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "minidl-run: error: %s (see --help)\n", e.what());
    return 2;
  }
  std::vector<std::string> program = app.remaining();
  if (!program.empty() && program.front() == "--") {
    program.erase(program.begin());
  } else if (!program.empty() && program.front().size() > 1 && program.front()[0] == '-') {
    std::fprintf(stderr, "minidl-run: error: unknown option %s (see --help)\n",
                 program.front().c_str());
    return 2;
  }
  try {
    return minidl::dist::launch(o, program);
  } catch (const std::exception& e) {  // bad options or program: nothing was started
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
