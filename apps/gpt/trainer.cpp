// The gpt training loop (trainer.h): nanoGPT's recipe on minidl, written once on the
// Accelerator (single, dp, ddp; AMP), with checkpoints, progress bar and JSON-lines metrics
// (the options, preset, data choice and model config: options.cpp).
#include "apps/gpt/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numbers>

#include "apps/common/shared_cores.h"
#include "apps/common/accelerate.h"
#include "apps/common/ddp_features.h"
#include "apps/common/checkpoints.h"
#include "tensor/profiler.h"
#include "tensor/variants.h"
#include "apps/common/metrics.h"
#include "apps/common/progress.h"
#include "apps/gpt/bpe_data.h"
#include "apps/gpt/checkpoint.h"
#include "apps/gpt/hf_weights.h"
#include "parallel/distributed.h"
#include "tensor/cpu_isa.h"
#include "tensor/cuda_api.h"

namespace gpt {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Next-token cross-entropy of logits [B,T,V] against targets [B,T], computed in f32. With a
// padded vocabulary the logits are a strided view of the real columns: the f32 conversion (or,
// in f32, the reshape) makes the one contiguous [B·T,V] copy.
Tensor lm_loss(const Tensor& logits, const Tensor& targets) {
  const int64_t V = logits.size(-1);
  return nn::functional::cross_entropy(logits.to(kFloat32).reshape({-1, V}), targets.reshape({-1}));
}

// Mean loss of eval_iters random batches of each split (averaged over ranks under DDP).
std::pair<double, double> estimate_loss(const Accelerator& acc, const TokenData& data,
                                        const Options& o) {
  NoGradGuard no_grad;
  nn::Module& model = acc.unwrap_model();
  model.eval();
  double out[2] = {0, 0};
  const char* splits[2] = {"train", "val"};
  for (int s = 0; s < 2; ++s) {
    double sum = 0;
    for (int64_t k = 0; k < o.eval_iters; ++k) {
      Batch b = data.get_batch(splits[s], o.batch_size, default_generator());
      Tensor x = b.x.to(acc.device()), y = b.y.to(acc.device());
      sum += lm_loss(apps::eval_forward(acc, x), y).item<double>();
    }
    out[s] = acc.reduce(sum / double(o.eval_iters), "mean");
  }
  model.train();
  return {out[0], out[1]};
}

// Peak dense matmul FLOP/s of the device for the training dtype, or 0 when unknown.
double peak_flops(const Device& d, const std::string& amp) {
  if (!d.is_cuda()) return 0;
  const std::string name = cuda::get_device_properties(d.index).name;
  const bool half = amp == "bf16" || amp == "fp16";
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos)
    return half ? 989e12 : 67e12;  // SXM dense tensor-core bf16 / fp32 FMA
  if (name.find("A100") != std::string::npos) return half ? 312e12 : 19.5e12;
  return 0;
}

}  // namespace

Result run_training(const Options& o) {
  o.validate();
  AcceleratorOptions acc_options = apps::accelerator_options(o);
  // --fsdp: each transformer block is a unit, with its matrices and its biases / LayerNorm
  // weights in two flat parameters, so AdamW's two groups (decay, no decay) step whole shards.
  acc_options.fsdp_auto_wrap_policy = dist::module_wrap_policy<nn::TransformerBlock>();
  acc_options.fsdp_flat_param_split = [](const std::string&, const Tensor& p) {
    return p.dim() >= 2 ? 0 : 1;  // optim::weight_decay_groups' rule
  };
  Accelerator acc(acc_options);
  const bool main_rank = acc.is_main_process(), verbose = main_rank && !o.quiet;

  const std::unique_ptr<TokenData> data_ptr = open_data(o);
  const TokenData& data = *data_ptr;
  const GPTConfig cfg = model_config(o, data.vocab_size());

  // The same initial weights on every rank; prepare() then gives each rank its own data and
  // dropout stream, sets up --amp and wraps the model for the mode.
  apps::check_ddp_layout(o, acc);
  manual_seed(o.seed);
  auto model = std::make_shared<GPT>(cfg);
  if (o.residual_dtype == "bf16") model->residual_dtype = kBFloat16;
  if (!o.init_from.empty()) {  // GPT-2's weights (HF's model.safetensors) to fine-tune
    load_hf_weights(*model, o.init_from);
    if (verbose) std::printf("initialized from %s\n", o.init_from.c_str());
  }
  // --sync-bn: the GPT has no BatchNorm (LayerNorm only): a note says nothing was converted.
  apps::apply_sync_bn(o, acc, model);
  model->to(acc.device());
  auto groups = optim::weight_decay_groups(*model, o.weight_decay);
  // AdamW over nanoGPT's two groups; with --zero1 each rank keeps the state of its shard.
  auto optimizer = apps::make_optimizer(
      o, groups, dist::adamw_factory(o.lr, {o.beta1, o.beta2}, 1e-8, o.weight_decay));
  const std::shared_ptr<nn::Module> train_module = acc.prepare(model, *optimizer);
  apps::apply_comm_hook(o, acc);
  const bool amp = acc.amp() != nullptr;

  int64_t first_iter = 0;
  std::string path, fresh_note;
  if (!o.resume.empty())
    path = apps::resolve_resume(o.resume, o.checkpoint_dir, "iter", &fresh_note);
  if (!fresh_note.empty() && main_rank) std::fprintf(stderr, "gpt: %s\n", fresh_note.c_str());
  if (!path.empty()) {
    auto meta = load_training_checkpoint(acc, path, data);
    first_iter = std::stoll(meta.at("iter"));
    if (verbose)
      std::printf("resumed from %s (iteration %lld done)\n", path.c_str(), (long long)first_iter);
  }

  if (!o.checkpoint_dir.empty() && main_rank) fs::create_directories(o.checkpoint_dir);
  apps::JsonLinesLog log;
  if (const std::string log_path = apps::rank_log_path(o.log_json, acc.process_index());
      !log_path.empty())
    log = apps::JsonLinesLog(log_path, !path.empty());
  apps::TrainingCurves curves;
  curves.x_label = "iteration", curves.eval_label = "val";
  const int64_t tokens_per_iter = o.batch_size * o.sequence_length() * acc.num_processes();
  // The count llm.c prints (tied head once, padded rows included), from the config as the MFU
  // uses it, checked against the model built.
  const int64_t n_params = cfg.num_parameters();
  MINIDL_CHECK(n_params == model->num_parameters(), "GPT ", cfg.describe(), ": the config counts ",
               n_params, " parameters, the model has ", model->num_parameters());
  if (verbose)
    std::printf(
        "gpt: %s; GPT %s, %lld parameters; %s; batch %lld x %lld tokens per process; AdamW lr %g; "
        "%d thread(s); CPU kernels %s%s%s\n",
        data.describe().c_str(), cfg.describe().c_str(), (long long)n_params,
        acc.describe().c_str(), (long long)o.batch_size, (long long)o.sequence_length(), o.lr,
        get_num_threads(), cpu_isa_summary().c_str(), amp ? "; " : "",
        apps::amp_describe(acc).c_str());
  if (const std::string note = apps::shared_cores_note(get_num_threads()); verbose && !note.empty())
    std::printf("%s\n", note.c_str());

  Result result;
  result.main_rank = main_rank;
  result.layout = acc.describe();
  double train_seconds = 0;
  auto save = [&](int64_t iter) {
    if (o.checkpoint_dir.empty()) return;
    // Collective: rank 0 writes atomically; every rank fails if the write failed (--zero1:
    // the Accelerator gathers the optimizer's shards onto rank 0 first).
    acc.save_state(apps::checkpoint_path(o.checkpoint_dir, "iter", iter),
                   checkpoint_metadata(cfg, data, iter, o, acc));
    if (main_rank) apps::remove_older_checkpoints(o.checkpoint_dir, "iter", iter);
    if (main_rank)
      apps::note_checkpoint_written(apps::checkpoint_path(o.checkpoint_dir, "iter", iter));
  };
  auto evaluate = [&](int64_t iter) {
    auto [train_loss, val_loss] = estimate_loss(acc, data, o);
    result.train_loss = train_loss, result.val_loss = val_loss;
    if (verbose)
      std::printf("iter %lld: train loss %.4f, val loss %.4f%s\n", (long long)iter, train_loss,
                  val_loss, apps::amp_suffix(acc).c_str());
    curves.epoch.push_back(double(iter));
    curves.test_loss.push_back(val_loss);
    log.write({{"event", "eval"},
               {"iter", iter},
               {"train_loss", train_loss},
               {"val_loss", val_loss},
               {"lr", optimizer->param_groups()[0].lr()}});
  };

  apps::ProgressBar bar("train", o.max_iters - first_iter, verbose, o.log_interval);
  train_module->train();
  bool nonfinite_reported = false;
  int64_t it = first_iter;
  // The step reads nothing back: the losses add up on the device and are read, with the last
  // gradient norm, every log_interval iterations (and before an evaluation, a checkpoint or
  // the end), so the host queues the next steps while the device works. train_seconds counts
  // the windows between two reads, each ended by the read that waits for the device.
  Tensor window_loss, window_norm;  // 0-d, on the device
  // --cuda-graph: 3 eager steps, then the step captured once (its inputs, loss sum and grad norm
  // are the graph's static tensors) and replayed.
  struct Graph {
    cuda::CUDAGraph graph;
    Tensor x, y, loss_sum, norm;
    int64_t eager_left = 3;
  };
  std::unique_ptr<Graph> graph;
  if (o.cuda_graph) {
    MINIDL_CHECK(acc.device().is_cuda() && acc.num_processes() == 1 && acc.mode() == "single",
                 "--cuda-graph needs one process on one CUDA device, got ", acc.describe());
    graph = std::make_unique<Graph>();
    graph->loss_sum = zeros({}, kFloat32, acc.device());
  }
  int64_t window_first = first_iter;
  Clock::time_point window_start = Clock::now();
  double last_loss = 0;
  auto read_window = [&](int64_t next_iter) {
    if (next_iter == window_first) return;
    double loss_sum = window_loss.defined() ? window_loss.item<double>() : 0.0;  // waits
    if (graph) {
      loss_sum += graph->loss_sum.item<double>();
      graph->loss_sum.zero_();
    }
    const double grad_norm = window_norm.defined() ? window_norm.item<double>() : 0.0;
    train_seconds += seconds_since(window_start);
    const double mean = loss_sum / double(next_iter - window_first);
    last_loss = mean;
    if (!nonfinite_reported && !std::isfinite(mean)) {
      nonfinite_reported = true;
      std::fprintf(stderr,
                   "gpt: warning: the training loss became inf/NaN between iterations %lld and "
                   "%lld (rank %d)\n",
                   (long long)window_first, (long long)next_iter, acc.process_index());
    }
    curves.train_x.push_back(double(next_iter));
    curves.train_loss.push_back(mean);
    log.write({{"event", "train"},
               {"iter", next_iter},
               {"loss", mean},
               {"lr", optimizer->param_groups()[0].lr()},
               {"grad_norm", grad_norm}});
    bar.update(next_iter - first_iter, mean);
    window_loss = Tensor(), window_norm = Tensor();
    window_first = next_iter;
  };
  for (; it < o.max_iters; ++it) {
    if (it % o.eval_interval == 0 && it > first_iter) {
      read_window(it);
      evaluate(it);
      save(it);
    }
    if (it == window_first) window_start = Clock::now();
    const double lr = lr_at(o, it);
    for (auto& g : optimizer->param_groups()) g.lr() = lr;
    Batch b = data.get_batch("train", o.batch_size, default_generator());
    Tensor x = b.x.to(acc.device()), y = b.y.to(acc.device());
    const int64_t dispatches0 = profiler::dispatch_count();
    const int64_t reads0 = profiler::host_read_count();
    // zero_grad, forward and loss, backward, clipping, the optimizer step: returns the loss
    auto train_step = [&](const Tensor& xs, const Tensor& ys) {
      acc.zero_grad();
      Tensor l;
      {
        auto region = acc.autocast();
        // llm.c's fused classifier: GPT::forward(idx, targets) takes the loss over the padded
        // logits and writes their gradient in place (dp gathers outputs: it keeps the logits).
        l = acc.mode() != "dp" && variants::fused("classifier_loss") ? acc.forward(xs, ys)
                                                                     : lm_loss(acc.forward(xs), ys);
      }
      acc.backward(l);
      if (o.grad_clip > 0) window_norm = acc.clip_grad_norm_(o.grad_clip);
      acc.step();
      return l;
    };
    Tensor loss;
    if (!graph || graph->eager_left > 0) {
      if (graph) --graph->eager_left;
      loss = train_step(x, y);
    } else {
      if (!graph->graph.captured()) {
        // Recorded once, not run: the replay below runs this batch. The captured step's inputs
        // and outputs stay put; its gradients live in the graph's pool.
        graph->x = x.clone(), graph->y = y.clone();
        optimizer->zero_grad(/*set_to_none=*/true);
        cuda::DeviceGuard guard(acc.device());
        graph->graph.capture_begin();
        try {
          Tensor l = train_step(graph->x, graph->y);
          graph->loss_sum.add_(l.detach().to(kFloat32));
          graph->norm = window_norm;
        } catch (...) {
          try {
            graph->graph.capture_end();
          } catch (...) {  // the first error is the one to report
          }
          throw;
        }
        graph->graph.capture_end();
      } else {
        graph->x.copy_(x), graph->y.copy_(y);  // stream-ordered after the previous replay
      }
      graph->graph.replay();
      window_norm = graph->norm;
    }
    if (profiler::enabled()) {
      result.dispatches_per_step = profiler::dispatch_count() - dispatches0;
      result.host_reads_per_step = profiler::host_read_count() - reads0;
      if (result.dispatches_first_step < 0)
        result.dispatches_first_step = result.dispatches_per_step;
    }
    if (loss.defined()) {  // (a replayed step adds its loss inside the graph)
      const Tensor step_loss = loss.detach();
      window_loss = window_loss.defined() ? add(window_loss, step_loss) : step_loss;
    }
    ++result.iters_run;
    if ((it + 1) % o.log_interval == 0)
      read_window(it + 1);
    else
      bar.update(it - first_iter + 1, last_loss);
    if (apps::stop_requested()) {
      ++it;
      break;
    }
  }
  read_window(it);
  result.iter = it;
  if (apps::stop_requested()) {
    bar.close("(interrupted)");
    result.interrupted = true;
  } else {
    bar.close();
    evaluate(it);
    if (it > first_iter) save(it);
    if (!o.plot.empty() && main_rank) apps::write_training_plot(o.plot, curves, "gpt");
  }
  if (!result.interrupted) acc.wait_for_everyone();
  result.peak_memory = acc.peak_memory_summary();
  result.ddp_features = apps::ddp_features_summary(o, acc, *optimizer);
  if (result.iters_run > 0 && train_seconds > 0) {
    result.step_ms = 1e3 * train_seconds / double(result.iters_run);
    result.tokens_per_s = double(tokens_per_iter) * double(result.iters_run) / train_seconds;
    const double peak = peak_flops(acc.device(), o.amp);
    if (peak > 0)
      result.mfu = result.tokens_per_s / double(acc.num_processes()) *
                   cfg.flops_per_token(o.sequence_length()) / peak;
  }
  if (amp) {
    result.amp = apps::amp_name(acc) + apps::amp_suffix(acc);
    result.skipped_steps = apps::amp_skipped_steps(acc);
  }
  log.write({{"event", "summary"},
             {"iter", result.iter},
             {"val_loss", result.val_loss},
             {"train_loss", result.train_loss},
             {"tokens_per_s", result.tokens_per_s},
             {"step_ms", result.step_ms},
             {"mfu", result.mfu},
             {"layout", result.layout},
             {"peak_memory", result.peak_memory},
             {"amp", o.amp},
             {"interrupted", result.interrupted}});
  return result;
}

}  // namespace gpt
