// The mnist_ddp training run: options, data, model, optimizer, scheduler, the epoch loop with
// progress, metrics, checkpoints and resume. Written around (rank, world_size) so the
// distributed modes slot in; today it runs one process.
#pragma once
#include <cstdint>
#include <string>

namespace mnist {

struct Options {
  std::string data = "data/mnist";
  int64_t epochs = 3;
  int64_t batch_size = 64;  // per process
  int64_t test_batch_size = 1000;
  double lr = 2e-3;
  std::string optimizer = "adamw";  // sgd | adamw
  double momentum = 0.9;            // sgd only
  double weight_decay = 0.0;
  std::string scheduler = "cosine";  // none | step | cosine (over --epochs) | onecycle
  double gamma = 0.7;                // StepLR factor per epoch
  uint64_t seed = 1;
  std::string device = "cpu";
  int threads = 0;  // 0: all cores
  int workers = 2;  // DataLoader worker threads
  std::string checkpoint_dir;
  std::string resume;  // a checkpoint file, or a directory (its latest checkpoint)
  std::string log_json;
  std::string plot;
  int64_t log_interval = 20;  // steps between plain progress lines / curve samples
  int64_t max_steps = 0;      // >0: stop each epoch after this many steps (smoke tests)
  bool quiet = false;
  // Parallelism: single (one process, one device), dp (DataParallel over dp_devices replicas in
  // one process), ddp (one process per rank; also chosen by `auto` under minidl-run, torchrun,
  // mpirun or srun).
  std::string mode = "auto";
  std::string backend = "auto";        // gloo | nccl | auto
  std::string init_method = "env://";  // env:// | tcp://host:port | file:///path
  int nproc = 1;                       // -n N: launch N ranks of this program (ddp)
  int dp_devices = 0;                  // dp replicas (0: every GPU, or 2 on CPU)
  double dist_timeout_s = 300;         // rendezvous and collective timeout
  // Capture the full-batch training step once in a CUDA graph and replay it (apps/mnist_graph.h;
  // one process on a CUDA device; the last partial batch runs eagerly).
  bool cuda_graph = false;
  // Mixed precision (apps/mnist_amp.h): off | bf16 | fp16; Apex opt level O0..O3 (default O1);
  // the GradScaler's initial scale (fp16 at O1/O2; e.g. 1e10 to watch it recover).
  std::string amp = "off";
  std::string opt_level;
  double init_scale = 65536.0;
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
  std::string amp;  // "" or "amp fp16 O1, scale 32768, 3 skipped"
  int64_t skipped_steps = 0;
};

// Trains and evaluates; throws minidl::Error with a one-line message on bad input. Returns
// with interrupted=true after SIGINT/SIGTERM (the last complete checkpoint is kept).
Result run_training(const Options& opt);

// Installs SIGINT/SIGTERM handlers that ask the training loop to stop after the current step
// (a second signal terminates at once).
void install_stop_handlers();

}  // namespace mnist
