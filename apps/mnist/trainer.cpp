// mnist_ddp's training run: builds data, model and optimizer from Options, trains through the
// Accelerator (one loop for single, dp and ddp) with a progress bar, evaluates each epoch, logs
// JSON lines, writes atomic per-epoch checkpoints and resumes from them bit-exactly.
#include "apps/mnist/trainer.h"

#include <cmath>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "apps/common/shared_cores.h"
#include "apps/common/accelerate.h"
#include "apps/common/checkpoints.h"
#include "apps/common/ddp_features.h"
#include "apps/common/metrics.h"
#include "apps/common/progress.h"
#include "apps/mnist/graph.h"
#include "apps/mnist/resnet_mini.h"
#include "data/dataloader.h"
#include "data/mnist.h"
#include "data/transforms.h"
#include "parallel/distributed.h"
#include "tensor/cpu_isa.h"

namespace mnist {
namespace fs = std::filesystem;
using minidl::Error;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// --optimizer over the model's parameters (with --zero1 sharded over the ranks).
std::unique_ptr<optim::Optimizer> make_optimizer(const Options& o, nn::Module& model) {
  dist::OptimizerFactory factory;
  if (o.optimizer == "sgd")
    factory = dist::sgd_factory(o.lr, o.momentum, 0.0, o.weight_decay);
  else if (o.optimizer == "adamw")
    factory = dist::adamw_factory(o.lr, {0.9, 0.999}, 1e-8, o.weight_decay);
  else
    MINIDL_FAIL("--optimizer must be sgd or adamw, got '", o.optimizer, "'");
  return apps::make_optimizer(o, {optim::ParamGroup(model.parameters())}, factory);
}

// Per-epoch schedulers step after each epoch, OneCycleLR after each batch.
std::unique_ptr<optim::LRScheduler> make_scheduler(const Options& o, optim::Optimizer& opt,
                                                   int64_t steps_per_epoch) {
  if (o.scheduler == "none") return nullptr;
  if (o.scheduler == "step") return std::make_unique<optim::StepLR>(opt, 1, o.gamma);
  if (o.scheduler == "cosine") return std::make_unique<optim::CosineAnnealingLR>(opt, o.epochs);
  if (o.scheduler == "onecycle")
    return std::make_unique<optim::OneCycleLR>(opt, o.lr, o.epochs * steps_per_epoch);
  MINIDL_FAIL("--scheduler must be none, step, cosine or onecycle, got '", o.scheduler, "'");
}

struct EvalResult {
  double loss = 0;
  int64_t correct = 0, samples = 0;
};

// Test loss and accuracy over the whole test set: each rank evaluates its DistributedSampler
// share (shuffle off) and per-sample [loss, correct] rows are gathered without the sampler's
// padding, so the result is identical for any number of ranks.
// The model's output as log-probabilities [B,K]: log_softmax of logits, or as they come.
Tensor log_probs_of(const Tensor& output, bool logits) {
  return logits ? log_softmax(output, 1) : output;
}

EvalResult evaluate(Accelerator& acc, PreparedLoader& loader, bool logits) {
  NoGradGuard no_grad;
  nn::Module& model = acc.unwrap_model();
  model.eval();
  std::vector<Tensor> rows;
  for (data::Example& batch : loader) {
    Tensor log_probs = log_probs_of(apps::eval_forward(acc, batch.data), logits);  // [B,K]
    Tensor loss = nn::functional::nll_loss(log_probs, batch.target, Reduction::none).to(kFloat64);
    Tensor correct = eq(argmax(log_probs, 1), batch.target).to(kFloat64);
    rows.push_back(stack({loss, correct}, 1).cpu());  // [B,2]
  }
  model.train();
  Tensor mine = rows.empty() ? zeros({0, 2}, kFloat64) : cat(rows, 0);
  Tensor totals = sum(acc.gather_for_metrics(mine, loader), {0});  // [2]
  const double* t = totals.contiguous().data_ptr<double>();
  EvalResult r{t[0], int64_t(std::llround(t[1])), loader.dataset_size()};
  if (r.samples > 0) r.loss /= double(r.samples);
  return r;
}

}  // namespace

Result run_training(const Options& o) {
  auto t_start = Clock::now();
  MINIDL_CHECK(o.epochs >= 1, "--epochs must be >= 1, got ", o.epochs);
  MINIDL_CHECK(o.batch_size >= 1, "--batch-size must be >= 1, got ", o.batch_size);
  MINIDL_CHECK(o.lr > 0, "--lr must be > 0, got ", o.lr);
  MINIDL_CHECK(o.workers >= 0, "--workers must be >= 0, got ", o.workers);
  AcceleratorOptions acc_options = apps::accelerator_options(o);
  // --fsdp: each convolution and linear layer is a unit, gathered just before it runs.
  acc_options.fsdp_auto_wrap_policy = dist::module_wrap_policy<nn::Conv2d, nn::Linear>();
  Accelerator acc(acc_options);
  const bool main_rank = acc.is_main_process(), verbose = main_rank && !o.quiet;

  // Data: MNIST normalised with the usual mean/std (0.1307, 0.3081), or the app's own; each rank
  // reads its DistributedSampler share (seed + epoch shuffle; the test set unshuffled).
  TrainData datasets;
  if (o.make_data) {
    datasets = o.make_data(o);
  } else {
    auto normalize = std::make_shared<data::Normalize>(std::vector{0.1307}, std::vector{0.3081});
    datasets.train = std::make_shared<data::TransformDataset>(
        std::make_shared<data::MnistDataset>(o.data, data::MnistSplit::train), normalize);
    datasets.test = std::make_shared<data::TransformDataset>(
        std::make_shared<data::MnistDataset>(o.data, data::MnistSplit::test), normalize);
  }
  const auto& train_set = datasets.train;
  const auto& test_set = datasets.test;
  // (On a GPU the prepared loaders build batches in pinned memory, copied asynchronously.)
  auto train_loader = acc.prepare_data_loader(
      train_set, {.batch_size = o.batch_size, .num_workers = o.workers}, /*shuffle=*/true);
  auto test_loader = acc.prepare_data_loader(
      test_set, {.batch_size = o.test_batch_size, .num_workers = o.workers}, /*shuffle=*/false);
  MINIDL_CHECK(train_loader->size() > 0, "no training batches: ",
               (train_set->size() + acc.num_processes() - 1) / acc.num_processes(),
               " samples per rank with --batch-size ", o.batch_size);

  // The same initial weights on every rank (DDP broadcasts rank 0's anyway); prepare() then
  // moves the model, gives each rank its own dropout stream, sets up --amp (O2 re-points the
  // optimizer at fp32 masters) and wraps the model for the mode.
  manual_seed(o.seed);
  apps::check_ddp_layout(o, acc);
  std::shared_ptr<nn::Module> model =
      apps::apply_sync_bn(o, acc, o.make_model ? o.make_model(o) : make_model(o.model));
  model->to(acc.device());
  auto optimizer = make_optimizer(o, *model);
  const int64_t steps_per_epoch =
      o.max_steps > 0 ? std::min(o.max_steps, train_loader->size()) : train_loader->size();
  auto scheduler = make_scheduler(o, *optimizer, steps_per_epoch);
  const bool per_step_scheduler = o.scheduler == "onecycle";
  const std::shared_ptr<nn::Module> train_module = acc.prepare(model, *optimizer);
  apps::apply_comm_hook(o, acc);
  if (scheduler) acc.prepare_scheduler(*scheduler);
  const bool amp = acc.amp() != nullptr;

  int64_t first_epoch = 1;
  std::string resume_path, fresh_note;
  if (!o.resume.empty())
    resume_path = apps::resolve_resume(o.resume, o.checkpoint_dir, "epoch", &fresh_note);
  if (!fresh_note.empty() && main_rank)
    std::fprintf(stderr, "%s: %s\n", o.app_name.c_str(), fresh_note.c_str());
  if (!resume_path.empty()) {
    const std::string& path = resume_path;
    auto meta = acc.load_state(path);
    MINIDL_CHECK(meta.count("epoch"), "checkpoint '", path, "' has no epoch");
    first_epoch = std::stoll(meta["epoch"]) + 1;
    const std::map<std::string, std::string> now = {
        {"seed", std::to_string(o.seed)},
        {"batch_size", std::to_string(o.batch_size)},
        {"world_size", std::to_string(acc.num_processes())}};
    for (const auto& [key, value] : now)
      if (meta.count(key) && meta[key] != value && main_rank)
        std::fprintf(stderr, "warning: resuming with %s=%s, the checkpoint used %s\n", key.c_str(),
                     value.c_str(), meta[key].c_str());
    if (verbose)
      std::printf("resumed from %s (epoch %lld done)\n", path.c_str(),
                  (long long)(first_epoch - 1));
  }

  // --cuda-graph (main() refused it for cpu, dp and -n > 1; a launcher's world is known here).
  std::unique_ptr<CudaGraphStep> graph_step;
  if (o.cuda_graph) {
    std::string why = cuda_graph_refusal(acc.device().str(), acc.mode(), acc.num_processes(),
                                         acc.num_processes());
    MINIDL_CHECK(why.empty(), why);
    graph_step =
        std::make_unique<CudaGraphStep>(*train_module, *optimizer, acc.device(), o.batch_size);
  }

  if (!o.checkpoint_dir.empty() && main_rank) fs::create_directories(o.checkpoint_dir);
  apps::JsonLinesLog log;
  if (const std::string log_path = apps::rank_log_path(o.log_json, acc.process_index());
      !log_path.empty())
    log = apps::JsonLinesLog(log_path, !resume_path.empty());
  apps::TrainingCurves curves;
  const int64_t global_batch = o.batch_size * acc.num_processes();
  if (verbose)
    std::printf(
        "%s: %lld train / %lld test images from %s; %s; batch %lld per process, "
        "%lld global; %s lr %g; %d thread(s), %d loader worker(s) per process; CPU kernels "
        "%s%s%s\n",
        o.app_name.c_str(), (long long)train_set->size(), (long long)test_set->size(),
        o.data.c_str(), acc.describe().c_str(), (long long)o.batch_size, (long long)global_batch,
        o.optimizer.c_str(), o.lr, get_num_threads(), o.workers, cpu_isa_summary().c_str(),
        amp ? "; " : "", apps::amp_describe(acc).c_str());
  if (const std::string note = apps::shared_cores_note(get_num_threads()); verbose && !note.empty())
    std::printf("%s\n", note.c_str());

  Result result;
  result.main_rank = main_rank;
  result.layout = acc.describe();
  double train_seconds = 0, loader_wait = 0;
  int64_t train_samples = 0;
  train_module->train();
  bool nonfinite_reported = false;
  for (int64_t epoch = first_epoch; epoch <= o.epochs; ++epoch) {
    auto t_epoch = Clock::now();
    train_loader->set_epoch(epoch);  // sampler order = f(seed, epoch, rank)
    train_loader->loader().reset_stats();
    apps::ProgressBar bar("epoch " + std::to_string(epoch) + "/" + std::to_string(o.epochs),
                          steps_per_epoch, verbose, o.log_interval);
    double loss_sum = 0, logged_loss_sum = 0;
    int64_t step = 0, logged_step = 0;
    if (graph_step) graph_step->reset_loss_sum();
    // On a GPU the eager loss is summed on the device too (in f64, so the sum equals the host
    // one) and read at log steps: an item() per step would stall the stream every step.
    Tensor device_loss_sum;
    if (!graph_step && acc.device().is_cuda()) device_loss_sum = zeros({}, kFloat64, acc.device());
    bool applied = true;  // AMP: whether the step's update was applied (not skipped)
    for (data::Example& batch : *train_loader) {
      if (graph_step) {  // the loss stays on the device until a log step reads the sum
        graph_step->step(batch.data, batch.target);
      } else {  // the loop written once: single, dp and ddp, with or without AMP
        acc.zero_grad();
        Tensor loss;
        {
          auto region = acc.autocast();
          loss = nn::functional::nll_loss(
              log_probs_of(acc.forward(batch.data), o.model_outputs_logits), batch.target);
        }
        acc.backward(loss);
        applied = acc.step() == StepResult::applied;
        if (device_loss_sum.defined())
          device_loss_sum += loss.detach().to(kFloat64);
        else
          loss_sum += loss.item<double>();
      }
      // A skipped AMP step leaves the schedule where it was (PyTorch would advance it).
      if (scheduler && per_step_scheduler && applied) scheduler->step();
      train_samples += batch.data.size(0);
      ++step;
      const bool log_step = step % o.log_interval == 0 || step == steps_per_epoch;
      if (graph_step && log_step) loss_sum = graph_step->loss_sum();
      if (device_loss_sum.defined() && log_step) loss_sum = device_loss_sum.item<double>();
      // A diverged run says so once, with the step and rank (the sum is already on the host).
      if (!nonfinite_reported && !std::isfinite(loss_sum) &&
          (log_step || !device_loss_sum.defined())) {
        nonfinite_reported = true;
        std::fprintf(
            stderr,
            "%s: warning: the training loss became inf/NaN by epoch %lld step %lld (rank "
            "%d)%s\n",
            o.app_name.c_str(), (long long)epoch, (long long)step, acc.process_index(),
            amp && !acc.amp()->scaling() ? "; this AMP level runs without loss scaling" : "");
      }
      if (!(graph_step || device_loss_sum.defined()) || log_step)
        bar.update(step, loss_sum / double(step));
      if (log_step) {
        curves.train_x.push_back(double(epoch - 1) + double(step) / double(steps_per_epoch));
        curves.train_loss.push_back((loss_sum - logged_loss_sum) / double(step - logged_step));
        logged_loss_sum = loss_sum, logged_step = step;
      }
      // Ranks stop without further collectives; peers blocked in one fail when it exits.
      if (apps::stop_requested() || step == steps_per_epoch) break;
    }
    if (graph_step) loss_sum = graph_step->loss_sum();
    if (device_loss_sum.defined()) loss_sum = device_loss_sum.item<double>();
    if (apps::stop_requested()) {
      bar.close("(interrupted)");
      result.interrupted = true;
      break;
    }
    double epoch_train_seconds = seconds_since(t_epoch);
    train_seconds += epoch_train_seconds;
    loader_wait += train_loader->loader().stats().wait_seconds;
    if (scheduler && !per_step_scheduler) scheduler->step();
    // Global mean train loss (each rank ran `step` batches of batch_size).
    double train_loss = acc.distributed()
                            ? dist::all_reduce_mean(loss_sum / double(step), double(step))
                            : loss_sum / double(step);

    EvalResult ev = evaluate(acc, *test_loader, o.model_outputs_logits);
    double accuracy = ev.samples ? 100.0 * double(ev.correct) / double(ev.samples) : 0;
    char suffix[160];
    std::snprintf(suffix, sizeof suffix,
                  "train loss %.4f, test loss %.4f, acc %.2f%% (%lld/%lld)%s", train_loss, ev.loss,
                  accuracy, (long long)ev.correct, (long long)ev.samples,
                  apps::amp_suffix(acc).c_str());
    bar.close(suffix);
    curves.epoch.push_back(double(epoch));
    curves.test_loss.push_back(ev.loss);
    curves.test_acc.push_back(accuracy);
    result.epochs_run = epoch - first_epoch + 1;
    result.test_accuracy = accuracy, result.test_loss = ev.loss;
    result.correct = ev.correct, result.test_samples = ev.samples;
    log.write({{"event", "epoch"},
               {"epoch", epoch},
               {"train_loss", train_loss},
               {"test_loss", ev.loss},
               {"test_accuracy", accuracy},
               {"lr", optimizer->param_groups()[0].lr()},
               {"world_size", acc.num_processes()},
               {"epoch_seconds", seconds_since(t_epoch)},
               {"train_seconds", epoch_train_seconds},
               {"loader_wait_seconds", train_loader->loader().stats().wait_seconds},
               {"train_samples_per_s", double(step * global_batch) / epoch_train_seconds},
               {"amp", o.amp},
               {"loss_scale", amp ? acc.amp()->scaler().get_scale() : 1.0},
               {"skipped_steps", apps::amp_skipped_steps(acc)}});
    if (!o.checkpoint_dir.empty()) {
      // Collective: rank 0 writes atomically; every rank fails if the write failed (--zero1:
      // the Accelerator gathers the optimizer's shards onto rank 0 first).
      acc.save_state(apps::checkpoint_path(o.checkpoint_dir, "epoch", epoch),
                     {{"epoch", std::to_string(epoch)},
                      {"seed", std::to_string(o.seed)},
                      {"batch_size", std::to_string(o.batch_size)},
                      {"world_size", std::to_string(acc.num_processes())},
                      {"optimizer", o.optimizer},
                      {"amp", amp ? apps::amp_name(acc) : "off"}});
      if (main_rank) apps::remove_older_checkpoints(o.checkpoint_dir, "epoch", epoch);
      if (main_rank)
        apps::note_checkpoint_written(apps::checkpoint_path(o.checkpoint_dir, "epoch", epoch));
    }
    if (!o.plot.empty() && main_rank) apps::write_training_plot(o.plot, curves, o.app_name);
  }
  if (result.epochs_run == 0 && !result.interrupted) {  // resumed at the end: just evaluate
    EvalResult ev = evaluate(acc, *test_loader, o.model_outputs_logits);
    result.test_accuracy = ev.samples ? 100.0 * double(ev.correct) / double(ev.samples) : 0;
    result.test_loss = ev.loss, result.correct = ev.correct, result.test_samples = ev.samples;
  }
  // Rank 0 hosts the store: nobody tears the group down while a peer still needs it.
  if (!result.interrupted) acc.wait_for_everyone();
  result.peak_memory = acc.peak_memory_summary();
  result.ddp_features = apps::ddp_features_summary(o, acc, *optimizer);
  if (graph_step) {
    result.cuda_graph = true;
    result.graph_replays = graph_step->replays(), result.eager_steps = graph_step->eager_steps();
  }
  if (amp) {
    result.amp = apps::amp_name(acc) + apps::amp_suffix(acc);
    result.skipped_steps = apps::amp_skipped_steps(acc);
  }
  result.seconds = seconds_since(t_start);
  result.train_samples_per_s =
      train_seconds > 0 ? double(train_samples) * acc.num_processes() / train_seconds : 0;
  result.loader_wait_fraction = train_seconds > 0 ? loader_wait / train_seconds : 0;
  log.write({{"event", "summary"},
             {"epochs_run", result.epochs_run},
             {"test_accuracy", result.test_accuracy},
             {"test_loss", result.test_loss},
             {"layout", result.layout},
             {"seconds", result.seconds},
             {"train_samples_per_s", result.train_samples_per_s},
             {"loader_wait_fraction", result.loader_wait_fraction},
             {"peak_memory", result.peak_memory},
             {"cuda_graph", result.cuda_graph},
             {"amp", o.amp},
             {"skipped_steps", result.skipped_steps},
             {"interrupted", result.interrupted}});
  return result;
}

}  // namespace mnist
