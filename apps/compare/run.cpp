// One mode's timed training run for minidl-compare, written once against the Accelerator: the
// same model, initial weights and global batch in every mode (see run.h).
#include "apps/compare/run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <numeric>
#include <optional>

#include "apps/gpt/model.h"
#include "apps/gpt/text_data.h"
#include "apps/mnist/model.h"
#include "apps/mnist/resnet_mini.h"
#include "data/mnist.h"
#include "minidl.h"
#include "parallel/accelerator/accelerator.h"
#include "parallel/ddp/comm_hooks.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/sync_batchnorm/sync_batchnorm.h"
#include "parallel/zero/zero_redundancy_optimizer.h"
#include "tensor/cuda_api.h"

namespace minidl::compare {

namespace {

double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Fixed windows of the text for the gpt model: sample i is the window drawn from a generator
// seeded by (seed, i), so every mode's global step s sees the same windows whatever the split.
class TextWindows : public data::Dataset {
 public:
  TextWindows(std::shared_ptr<const gpt::TextDataset> text, int64_t n, uint64_t seed)
      : text_(std::move(text)), n_(n), seed_(seed) {}
  int64_t size() const override { return n_; }
  data::Example get(int64_t index, Generator& /*gen*/) const override {
    Generator g(seed_ * 1000003ull + uint64_t(index));
    gpt::Batch b = text_->get_batch("train", 1, g);
    return {b.x.squeeze(0), b.y.squeeze(0)};  // [T] each
  }

 private:
  std::shared_ptr<const gpt::TextDataset> text_;
  int64_t n_;
  uint64_t seed_;
};

struct Task {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::shared_ptr<const data::Dataset> dataset;
  int64_t vocab = 0;  // gpt: logits' last dim
};

// The optimizer of the task: `plain` over every parameter, or ZeRO-1 over `factory`'s shards.
std::unique_ptr<optim::Optimizer> task_optimizer(
    const ModeSpec& m, nn::Module& model,
    const std::function<std::unique_ptr<optim::Optimizer>()>& plain,
    const dist::OptimizerFactory& factory) {
  if (!m.zero1) return plain();
  return std::make_unique<dist::ZeroRedundancyOptimizer>(model.parameters(), factory);
}

// The model (identical initial weights in every mode and rank), its optimizer and data.
Task build_task(const RunConfig& c, const ModeSpec& m) {
  Task t;
  const int64_t samples = (c.warmup + c.steps) * c.global_batch;
  if (c.model == "mnist-cnn" || c.model == "resnet-mini") {
    auto ds = std::make_shared<data::MnistDataset>(c.data, data::MnistSplit::train);
    MINIDL_CHECK(ds->size() >= samples, "minidl-compare: ", c.warmup + c.steps, " steps of ",
                 c.global_batch, " samples need ", samples, " MNIST images, the data has ",
                 ds->size());
    t.dataset = ds;
    manual_seed(c.seed);
    t.model = mnist::make_model(c.model);
    // mnist-cnn: dropout off, so every mode (and rank) computes the same function for the loss
    // check. resnet-mini trains its BatchNorm layers (batch statistics, running buffers): dp
    // and ddp normalise each replica's share of the batch (see row_tolerance).
    if (c.model == "mnist-cnn") t.model->eval();
    if (m.sync_bn) t.model = nn::convert_sync_batchnorm(t.model);
    t.opt = task_optimizer(
        m, *t.model, [&] { return std::make_unique<optim::SGD>(t.model->parameters(), 0.01, 0.5); },
        dist::sgd_factory(0.01, 0.5));
  } else if (c.model == "gpt") {
    gpt::GPTConfig cfg;  // the app's defaults: block 64, 4 layers, 4 heads, 128 wide
    auto text = std::make_shared<gpt::TextDataset>(c.data, cfg.block_size);
    cfg.vocab_size = text->vocab().size();
    cfg.dropout = 0.0;
    t.vocab = cfg.vocab_size;
    t.dataset = std::make_shared<TextWindows>(text, samples, c.seed);
    manual_seed(c.seed);
    t.model = std::make_shared<gpt::GPT>(cfg);
    t.opt = task_optimizer(
        m, *t.model, [&] { return std::make_unique<optim::AdamW>(t.model->parameters(), 1e-3); },
        dist::adamw_factory(1e-3));
  } else {
    MINIDL_FAIL("minidl-compare: unknown model '", c.model, "' (mnist-cnn | resnet-mini | gpt)");
  }
  return t;
}

Tensor loss_of(const Task& t, const Tensor& out, const Tensor& target) {
  if (t.vocab == 0) return nn::functional::nll_loss(out, target);
  return nn::functional::cross_entropy(out.reshape({-1, t.vocab}), target.reshape({-1}));
}

// Times allreduces of several sizes around the gradient size (medians of 9 after 2 warm-ups).
void allreduce_sweep(dist::ProcessGroup& pg, Device device, int64_t grad_bytes, RunResult& r) {
  const int64_t base = std::max<int64_t>(grad_bytes, 1 << 20);
  for (double f : {1.0 / 16, 1.0 / 4, 1.0, 2.0}) {
    const int64_t n = std::max<int64_t>(int64_t(double(base) * f) / 4, 1024);
    Tensor buf = ones({n}, kFloat32, device);
    std::vector<double> times;
    for (int i = 0; i < 11; ++i) {
      pg.barrier()->wait();
      const double t0 = now_s();
      pg.allreduce(buf)->wait();
      if (device.is_cuda()) cuda::synchronize(device.index);
      if (i >= 2) times.push_back(now_s() - t0);
    }
    r.sweep_bytes.push_back(double(n * 4));
    r.sweep_s.push_back(median(times));
  }
}

}  // namespace

RunResult run_mode(const RunConfig& c) {
  MINIDL_CHECK(c.global_batch % c.devices == 0, "minidl-compare: --global-batch ", c.global_batch,
               " is not divisible by --devices ", c.devices);
  const ModeSpec spec = parse_mode(c.mode, c.powersgd_rank);
  AcceleratorOptions ao;
  ao.mode = spec.base;
  ao.device = c.device;
  ao.devices = c.mode == "dp" ? c.devices : 0;
  ao.threads = c.threads;
  ao.amp = c.amp;
  ao.seed = c.seed;
  ao.verbose = false;
  ao.fsdp = spec.fsdp;
  // fsdp: mnist's layers or the GPT's blocks are the units (the rest in the root's).
  if (c.model == "gpt")
    ao.fsdp_auto_wrap_policy = dist::module_wrap_policy<nn::TransformerBlock>();
  else
    ao.fsdp_auto_wrap_policy = dist::module_wrap_policy<nn::Conv2d, nn::Linear>();
  Accelerator acc(ao);
  MINIDL_CHECK(acc.mode() != "ddp" || acc.num_processes() == c.devices,
               "minidl-compare: ", acc.num_processes(), " DDP processes started, expected ",
               c.devices);
  Task task = build_task(c, spec);
  acc.prepare(task.model, *task.opt);
  if (!spec.comm_hook.empty()) acc.ddp()->register_comm_hook(dist::make_comm_hook(spec.comm_hook));
  const int64_t per_process = spec.base == "ddp" ? c.global_batch / c.devices : c.global_batch;
  auto loader = acc.prepare_data_loader(
      task.dataset, {.batch_size = per_process, .num_workers = c.num_workers}, /*shuffle=*/true);

  const Device dev = acc.device();
  const bool cuda = dev.is_cuda();
  auto sync = [&] {
    if (cuda)
      for (const Device& d : acc.devices()) cuda::synchronize(d.index);
  };
  RunResult r;
  r.mode = c.mode;
  r.device = c.device;
  r.devices = c.devices;
  r.threads = c.threads;
  r.global_batch = c.global_batch;
  r.per_rank_batch = c.global_batch / c.devices;

  dist::DistributedDataParallel* ddp = acc.ddp();
  dist::DataParallel* dp = acc.data_parallel();
  // CPU DataParallel with c.threads > 1: the replicas' forwards run on their own threads with
  // 1 intra-op thread each (more would oversubscribe the cores), while the joint backward of
  // every replica, which the calling thread runs alone, and the optimizer use c.threads.
  const bool split_threads = dp && !cuda && c.threads > 1;
  auto phase_threads = [&](int n) {
    if (split_threads) set_num_threads(n);
  };
  std::vector<Tensor> losses;
  double fwd = 0, bwd = 0, opt = 0, wait = 0;
  std::optional<PreparedLoader::Iterator> it;
  const int64_t total = c.warmup + c.steps;
  dist::CollectiveCounts counts0;
  for (int64_t s = 0; s < total; ++s) {
    if (s == c.warmup) {
      if (ddp) ddp->reset_stats();
      if (dp) dp->reset_stats();
      if (acc.fsdp()) acc.fsdp()->reset_stats();
      acc.wait_for_everyone();
      if (ddp) counts0 = ddp->process_group().collective_counts();
      if (acc.fsdp()) counts0 = acc.fsdp()->process_group().collective_counts();
    }
    sync();
    const double t0 = now_s();
    if (!it)
      it.emplace(loader->begin());
    else
      ++*it;
    MINIDL_CHECK(*it != loader->end(), "minidl-compare: the data ran out at step ", s);
    data::Example& b = **it;
    const double t1 = now_s();
    acc.zero_grad();
    phase_threads(1);
    Tensor loss;
    {
      auto ac = acc.autocast();
      loss = loss_of(task, acc.forward(b.data), b.target);
    }
    phase_threads(c.threads);
    sync();
    const double t2 = now_s();
    // The test hook: three times the gradient, while the recorded loss stays the true one.
    acc.backward(c.perturb ? mul(loss, 3.0) : loss);
    sync();
    const double t3 = now_s();
    acc.step();
    sync();
    const double t4 = now_s();
    losses.push_back(loss.detach().to(kFloat32));
    if (s >= c.warmup) {
      wait += t1 - t0, fwd += t2 - t1, bwd += t3 - t2, opt += t4 - t3;
      r.step_s.push_back(t4 - t0);
    }
  }
  const double n = double(c.steps);
  if (ddp || acc.fsdp()) {
    const dist::CollectiveCounts counts1 = ddp ? ddp->process_group().collective_counts()
                                               : acc.fsdp()->process_group().collective_counts();
    r.collectives_per_step = double(counts1.collectives - counts0.collectives) / n;
    r.payload_bytes_per_step = double(counts1.bytes - counts0.bytes) / n;
  }
  Breakdown& bd = r.breakdown;
  bd.data_wait = wait / n, bd.optimizer = opt / n;
  bd.forward = fwd / n, bd.backward = bwd / n;
  if (ddp) {
    const dist::DDPStats st = ddp->stats();
    const double steps = double(std::max<int64_t>(st.steps, 1));
    r.bucket_bytes = st.bucket_bytes;
    r.comm_s = st.comm_seconds / steps;
    r.exposed_s = st.exposed_seconds / steps;
    r.hidden_fraction = st.hidden_fraction();
    bd.reduce_exposed = r.exposed_s;
    bd.reduce_hidden = std::max(0.0, r.comm_s - r.exposed_s);
    bd.backward = std::max(0.0, bd.backward - r.exposed_s);
    bd.ddp_broadcast = st.broadcast_seconds / steps;
    bd.forward = std::max(0.0, bd.forward - bd.ddp_broadcast);
    r.grad_bytes_per_step = st.bytes_per_step;
    r.broadcasts_per_step = double(st.buffer_broadcasts) / steps;
    r.messages_per_bucket = 1;
    for (const Tensor& b : task.model->buffers()) r.buffer_bytes += b.nbytes();
  }
  if (const dist::FullyShardedDataParallel* fsdp = acc.fsdp()) {
    // Exposed communication: the waits on all-gathers and reduce-scatters, taken out of the
    // phase they happened in (the rest of forward and backward is compute).
    const dist::FSDPStats st = fsdp->stats();
    r.exposed_s = (st.forward_wait_seconds + st.backward_wait_seconds) / n;
    bd.reduce_exposed = r.exposed_s;
    bd.forward = std::max(0.0, bd.forward - st.forward_wait_seconds / n);
    bd.backward = std::max(0.0, bd.backward - st.backward_wait_seconds / n);
  }
  if (auto* zero = dynamic_cast<dist::ZeroRedundancyOptimizer*>(task.opt.get())) {
    const dist::ZeroStats zs = zero->stats();
    r.zero_broadcast_bytes = zs.broadcast_bytes_per_step;
    r.zero_broadcasts = zs.broadcasts_per_step;
  }
  // Gradient collectives per bucket, measured: what rank 0 issued less the buffer and ZeRO
  // broadcasts (PowerSGD: P, Q and the uncompressed tensors; SyncBatchNorm's statistics would
  // count too, so ddp-syncbn keeps 1).
  if (ddp && !r.bucket_bytes.empty() && !spec.sync_bn) {
    const double grad = r.collectives_per_step - r.broadcasts_per_step - double(r.zero_broadcasts);
    r.messages_per_bucket = std::max(1, int(std::lround(grad / double(r.bucket_bytes.size()))));
  }
  if (dp) {
    const dist::DataParallelStats st = dp->stats();
    bd.dp_replicate = st.replicate_seconds / n;
    bd.dp_scatter = st.scatter_seconds / n;
    bd.dp_gather = st.gather_seconds / n;
    bd.dp_reduce = st.reduce_seconds / n;
    bd.forward = std::max(0.0, bd.forward - bd.dp_replicate - bd.dp_scatter - bd.dp_gather);
    bd.backward = std::max(0.0, bd.backward - bd.dp_reduce);
  }

  // The global batch's mean loss per step (equal per-rank batches: the mean of rank means).
  Tensor all = acc.reduce(stack(losses).cpu(), "mean").contiguous();
  r.losses.assign(all.data_ptr<float>(), all.data_ptr<float>() + all.numel());

  // The largest rank's peak and optimizer state (ZeRO-1: its shard; else every parameter's).
  int64_t peak = 0;
  for (const Device& d : acc.devices()) peak = std::max(peak, memory_stats(d).peak);
  auto* zero = dynamic_cast<dist::ZeroRedundancyOptimizer*>(task.opt.get());
  const int64_t state = zero ? zero->stats().state_bytes : dist::optimizer_state_bytes(*task.opt);
  // Parameters and gradients this rank holds: FSDP's shards, else the model's whole tensors.
  int64_t held = 0;
  if (const dist::FullyShardedDataParallel* fsdp = acc.fsdp()) {
    held = fsdp->sharded_state_bytes();
  } else {
    for (const Tensor& p : task.model->parameters())
      held += int64_t(p.nbytes()) + (p.grad().defined() ? int64_t(p.grad().nbytes()) : 0);
  }
  Tensor mine = tensor(std::vector<double>{double(peak), double(state), double(held + state)});
  Tensor ranks = acc.gather(mine.to(dev).reshape({1, 3})).cpu().contiguous();  // [ranks, 3]
  for (int64_t i = 0; i < ranks.size(0); ++i) {
    const double* v = ranks.data_ptr<double>() + 3 * i;
    r.peak_memory_bytes = std::max(r.peak_memory_bytes, int64_t(v[0]));
    r.optimizer_state_bytes = std::max(r.optimizer_state_bytes, int64_t(v[1]));
    r.optimizer_state_total += int64_t(v[1]);
    r.state_bytes = std::max(r.state_bytes, int64_t(v[2]));
  }

  if (ddp && c.allreduce_sweep && c.devices > 1 && spec.comm_hook.empty() && !spec.zero1 &&
      !spec.sync_bn) {
    int64_t bytes = 0;
    for (int64_t b : r.bucket_bytes) bytes += b;
    allreduce_sweep(ddp->process_group(), dev, bytes, r);
  }

  if (c.compute_batch > 0) {
    // One device's step at the per-rank batch: the cost model's compute time.
    auto small = acc.prepare_data_loader(task.dataset, {.batch_size = c.compute_batch}, true);
    std::vector<double> steps, backs;
    int64_t k = 0;
    for (data::Example& b : *small) {
      if (k++ >= 2 + std::max<int64_t>(c.steps / 2, 5)) break;
      sync();
      const double t0 = now_s();
      acc.zero_grad();
      Tensor loss;
      {
        auto ac = acc.autocast();
        loss = loss_of(task, acc.forward(b.data), b.target);
      }
      sync();
      const double t1 = now_s();
      acc.backward(loss);
      sync();
      const double t2 = now_s();
      acc.step();
      sync();
      if (k > 2) steps.push_back(now_s() - t0), backs.push_back(t2 - t1);
    }
    r.compute_batch = c.compute_batch;
    r.compute_step_s = median(steps);
    r.compute_backward_s = median(backs);
  }
  return r;
}

}  // namespace minidl::compare
