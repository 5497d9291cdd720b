// mnist_ddp: trains the classic MNIST CNN (apps/mnist/model.h) or resnet-mini
// (nn/models/resnet_mini.h) on the offline digits or real MNIST. `mnist_ddp --help` lists every
// flag; errors are one line on stderr with exit code 1 (bad flags: 2); Ctrl-C stops after the
// current step with exit code 130.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "apps/common/checkpoints.h"
#include "apps/common/ddp_features.h"
#include "apps/mnist/flags.h"
#include "apps/mnist/graph.h"
#include "apps/mnist/trainer.h"
#include "tensor/profiler.h"

int main(int argc, char** argv) {
  mnist::Options o;
  CLI::App app{"mnist_ddp: train the classic MNIST CNN with minidl", "mnist_ddp"};
  app.get_formatter()->column_width(34);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // last wins
  app.add_option("--data", o.data, "directory with the MNIST IDX files (raw or .gz)")
      ->capture_default_str();
  app.add_option("--model", o.model, "cnn (the classic MNIST CNN) | resnet-mini (BatchNorm)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cnn", "resnet-mini"}));
  mnist::add_training_flags(app, o);
  app.add_flag("--cuda-graph", o.cuda_graph,
               "capture the training step once in a CUDA graph and replay it (one process on "
               "--device cuda; the last partial batch runs eagerly)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "mnist_ddp: error: %s (see --help)\n", e.what());
    return 2;
  }

  if (std::string why = minidl::apps::ddp_flags_error(o); !why.empty()) {
    std::fprintf(stderr, "mnist_ddp: error: %s\n", why.c_str());
    return 2;
  }
  if (std::string why = minidl::apps::amp_flags_error(o); !why.empty()) {
    std::fprintf(stderr, "mnist_ddp: error: %s\n", why.c_str());
    return 2;
  }
  if (o.cuda_graph && o.amp != "off") {
    std::fprintf(stderr,
                 "mnist_ddp: error: --cuda-graph does not support --amp yet (run the AMP step "
                 "eagerly)\n");
    return 2;
  }
  if (o.cuda_graph) {
    std::string why =
        mnist::cuda_graph_refusal(o.device, o.mode, o.nproc, mnist::launcher_world_size());
    if (!why.empty()) {
      std::fprintf(stderr, "mnist_ddp: error: %s\n", why.c_str());
      return 2;
    }
  }
  // -n N: run N ranks of this very command under the launcher (each rank sees RANK etc.).
  if (int rc = 0; minidl::apps::self_launch_if_requested(o, "mnist_ddp", argc, argv, rc)) return rc;
  try {
    minidl::apps::install_stop_handlers();
    mnist::Result r = mnist::run_training(o);
    if (!r.main_rank) return r.interrupted ? 130 : 0;
    if (r.interrupted) {
      std::fprintf(stderr, "mnist_ddp: interrupted; %s\n",
                   o.checkpoint_dir.empty()
                       ? "no checkpoint directory was given"
                       : ("the last complete checkpoint is in " + o.checkpoint_dir).c_str());
      return 130;
    }
    if (minidl::profiler::enabled())  // MINIDL_PROFILE=1: the op table before the summary
      std::printf("op profile, rank 0 (all iterations):\n%s", minidl::profiler::table().c_str());
    std::printf(
        "mnist_ddp: test accuracy %.2f%% (%lld/%lld), test loss %.4f, %lld epoch(s) in "
        "%.1f s, %.0f train samples/s (%s), loader wait %.1f%% of train time, peak memory "
        "%s%s%s%s%s\n",
        r.test_accuracy, (long long)r.correct, (long long)r.test_samples, r.test_loss,
        (long long)r.epochs_run, r.seconds, r.train_samples_per_s, r.layout.c_str(),
        100.0 * r.loader_wait_fraction, r.peak_memory.c_str(), r.amp.empty() ? "" : "; ",
        r.amp.c_str(), r.ddp_features.empty() ? "" : "; ", r.ddp_features.c_str());
    if (r.cuda_graph)
      std::printf(
          "mnist_ddp: CUDA graph mode on: training step captured once, %lld replay(s), %lld "
          "eager step(s) (warm-up and partial batches)\n",
          (long long)r.graph_replays, (long long)r.eager_steps);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist_ddp: error: %s\n", e.what());
    return 1;
  }
}
