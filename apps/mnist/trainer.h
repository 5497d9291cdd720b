// The mnist_ddp training run: options, data, model, optimizer, scheduler, the epoch loop with
// progress, metrics, checkpoints and resume, in any parallel mode
// (parallel/accelerator/accelerator.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "apps/common/run_options.h"
#include "data/dataset.h"
#include "nn/module.h"

namespace mnist {

struct Options;

// The datasets a run trains and evaluates on (samples data:[C,H,W] float, target int64 []).
struct TrainData {
  std::shared_ptr<const minidl::data::Dataset> train, test;
};

// mnist_ddp's own flags; the shared ones (device, mode, AMP, checkpoints, ...) are RunOptions.
struct Options : minidl::apps::RunOptions {
  std::string data = "data/mnist";
  std::string model = "cnn";  // cnn (apps/mnist/model.h) | resnet-mini (apps/mnist/resnet_mini.h)
  int64_t epochs = 3;
  int64_t batch_size = 64;  // per process
  int64_t test_batch_size = 1000;
  double lr = 2e-3;
  std::string optimizer = "adamw";  // sgd | adamw
  double momentum = 0.9;            // sgd only
  double weight_decay = 0.0;
  std::string scheduler = "cosine";  // none | step | cosine (over --epochs) | onecycle
  double gamma = 0.7;                // StepLR factor per epoch
  int workers = 2;                   // DataLoader worker threads
  int64_t max_steps = 0;             // >0: stop each epoch after this many steps (smoke tests)
  // Capture the full-batch training step once in a CUDA graph and replay it (apps/mnist/graph.h;
  // one process on a CUDA device; the last partial batch runs eagerly).
  bool cuda_graph = false;
  // Another app on this same run (classify, apps/classify/): its name in messages, its data and
  // model. Unset: MNIST from --data, normalised with (0.1307, 0.3081), and make_model(model).
  std::string app_name = "mnist_ddp";
  std::function<TrainData(const Options&)> make_data;
  std::function<std::shared_ptr<minidl::nn::Module>(const Options&)> make_model;
  bool model_outputs_logits = false;  // logits (cross-entropy) instead of log-probabilities
};

// The outcome of a run (also printed as the one-line summary).
struct Result {
  int64_t epochs_run = 0;
  double test_accuracy = 0;  // percent
  double test_loss = 0;
  int64_t correct = 0, test_samples = 0;
  double seconds = 0, train_samples_per_s = 0, loader_wait_fraction = 0;
  bool interrupted = false;
  bool main_rank = true;    // only rank 0 prints the summary
  std::string layout;       // "1 process, cpu" / "ddp 2 ranks (gloo), cpu" / ...
  std::string peak_memory;  // tensor memory peak per device of this process: "cpu 61.2 MiB"
  bool cuda_graph = false;  // --cuda-graph: steps replayed from the graph / run eagerly
  int64_t graph_replays = 0, eager_steps = 0;
  std::string amp;           // "" or "amp fp16 O1, scale 32768, 3 skipped"
  std::string ddp_features;  // "" or apps::ddp_features_summary (--sync-bn, --zero1, --comm-hook)
  int64_t skipped_steps = 0;
};

// Trains and evaluates; throws minidl::Error with a one-line message on bad input. Returns
// with interrupted=true after SIGINT/SIGTERM (the last complete checkpoint is kept).
Result run_training(const Options& opt);

}  // namespace mnist
