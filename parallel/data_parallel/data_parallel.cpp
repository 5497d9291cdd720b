// DataParallel: replica synchronisation, scatter / parallel apply / gather, and the
// end-of-backward reduction of replica gradients into the source module.
#include "parallel/data_parallel/data_parallel.h"

#include <chrono>
#include <exception>
#include <thread>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "nn/registration_check.h"

namespace minidl::dist {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

thread_local bool t_in_replica = false;  // set while a replica's forward runs on this thread

}  // namespace

bool in_data_parallel_replica() {
  return t_in_replica;
}

// Shared with the replicas' gradient hooks (held weakly): replica k's parameter j maps to the
// source parameter j; one reduction is queued per backward. Also holds the statistics, which
// the reduction (run at the end of backward) adds to.
struct DataParallel::GradState {
  std::vector<Tensor> source;                // source parameters
  std::vector<std::vector<Tensor>> replica;  // [replica k >= 1][j]
  bool queued = false;
  DataParallelStats stats;

  void reduce() {
    const auto t0 = Clock::now();
    queued = false;
    NoGradGuard no_grad;
    for (size_t j = 0; j < source.size(); ++j) {
      Tensor total;
      for (auto& params : replica) {
        Tensor& g = params[j].mutable_grad();
        if (!g.defined()) continue;
        Tensor moved = g.to(source[j].device());
        total = total.defined() ? add(total, moved) : moved.clone();
        g = Tensor();  // consumed
      }
      if (!total.defined()) continue;
      Tensor& sg = source[j].mutable_grad();
      if (sg.defined())
        add_(sg, total);
      else
        source[j].set_grad(total);
    }
    ++stats.backwards;
    stats.reduce_seconds += seconds_since(t0);
  }
};

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> devices,
                           std::optional<Device> output_device)
    : ModuleWrapper(std::move(module), "DataParallel"),
      devices_(std::move(devices)),
      output_device_(output_device.value_or(devices_.empty() ? kCPU : devices_[0])) {
  MINIDL_CHECK(!devices_.empty(), "DataParallel: the device list is empty");
  for (auto& [name, p] : module_->named_parameters())
    MINIDL_CHECK(p.device() == devices_[0], "DataParallel: the module must live on devices[0] (",
                 devices_[0].str(), ") but parameter '", name, "' is on ", p.device().str());
  grad_state_ = std::make_shared<GradState>();
  replicas_.push_back(module_);
  for (auto& [name, p] : module_->named_parameters()) grad_state_->source.push_back(p);
  std::weak_ptr<GradState> weak = grad_state_;
  for (size_t k = 1; k < devices_.size(); ++k) {
    std::shared_ptr<nn::Module> r = module_->clone();
    r->to(devices_[k]);
    std::vector<Tensor> params;
    for (auto& [name, p] : r->named_parameters()) {
      if (p.requires_grad())
        p.register_post_accumulate_grad_hook([weak](Tensor&) {
          auto st = weak.lock();
          if (!st || st->queued) return;
          st->queued = true;
          autograd::queue_callback([weak] {
            if (auto s = weak.lock()) s->reduce();
          });
        });
      params.push_back(p);
    }
    grad_state_->replica.push_back(std::move(params));
    replicas_.push_back(std::move(r));
  }
}

// Copies the source parameters and buffers into replicas 1..n-1 (no re-clone).
// Also drops gradients a failed backward may have left on the replicas.
void DataParallel::sync_replicas(size_t n) {
  NoGradGuard no_grad;
  grad_state_->queued = false;
  for (auto& params : grad_state_->replica)
    for (Tensor& p : params) p.mutable_grad() = Tensor();
  auto src_p = module_->parameters();
  auto src_b = module_->buffers();
  for (size_t k = 1; k < n; ++k) {
    auto dst_p = replicas_[k]->parameters();
    auto dst_b = replicas_[k]->buffers();
    MINIDL_CHECK(dst_p.size() == src_p.size() && dst_b.size() == src_b.size(),
                 "DataParallel: the module's parameters or buffers changed after wrapping");
    for (size_t j = 0; j < src_p.size(); ++j) dst_p[j].copy_(src_p[j]);
    for (size_t j = 0; j < src_b.size(); ++j) dst_b[j].copy_(src_b[j]);
    replicas_[k]->train(module_->is_training());
  }
}

Tensor DataParallel::forward(const Tensor& x) {
  return forward_inputs({x});
}

Tensor DataParallel::forward_inputs(const std::vector<Tensor>& inputs) {
  MINIDL_CHECK(!inputs.empty(), "DataParallel: forward called without inputs");
  const Tensor& x = inputs[0];
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    MINIDL_CHECK(t.dim() >= 1, "DataParallel: input ", i,
                 " must have a batch dimension to scatter along, got shape ", t.shape_str());
    MINIDL_CHECK(t.size(0) == x.size(0),
                 "DataParallel: the inputs are scattered along dim 0 "
                 "and must have the same batch size: input 0 has shape ",
                 x.shape_str(), ", input ", i, " has shape ", t.shape_str());
  }
  const int64_t batch = x.size(0);
  MINIDL_CHECK(batch > 0, "DataParallel: empty batch (input shape ", x.shape_str(), ")");
  const int64_t chunk = (batch + int64_t(devices_.size()) - 1) / int64_t(devices_.size());
  const size_t n = size_t((batch + chunk - 1) / chunk);  // torch.chunk: may use fewer replicas
  DataParallelStats& st = grad_state_->stats;
  auto t0 = Clock::now();
  sync_replicas(n);
  st.replicate_seconds += seconds_since(t0);
  std::vector<Tensor> outputs(n);
  std::vector<std::exception_ptr> errors(n);
  const bool grad_mode = GradMode::is_enabled();
  const amp::AutocastState autocast = amp::autocast_state();  // the replicas inherit it
  t0 = Clock::now();
  // Scatter on this thread (the inputs' autograd state is not shared): parts[k][i] is input
  // i's chunk k on device k.
  std::vector<std::vector<Tensor>> parts(n);
  for (size_t k = 0; k < n; ++k) {
    const int64_t start = int64_t(k) * chunk;
    for (const Tensor& t : inputs)
      parts[k].push_back(t.narrow(0, start, std::min(chunk, batch - start)).to(devices_[k]));
  }
  st.scatter_seconds += seconds_since(t0);
  auto run = [&](size_t k) {
    try {
      AutoGradMode mode(grad_mode);
      amp::AutocastStateGuard autocast_mode(autocast);
      t_in_replica = true;
      outputs[k] = replicas_[k]->call(parts[k]);  // with its hooks, as torch's replica(*inputs)
      t_in_replica = false;
    } catch (...) {
      t_in_replica = false;
      errors[k] = std::current_exception();
    }
  };
  t0 = Clock::now();
  std::vector<std::thread> workers;
  for (size_t k = 1; k < n; ++k) workers.emplace_back(run, k);
  run(0);
  for (auto& w : workers) w.join();
  st.parallel_apply_seconds += seconds_since(t0);
  for (size_t k = 0; k < n; ++k)
    if (errors[k]) {
      try {
        std::rethrow_exception(errors[k]);
      } catch (const std::exception& e) {
        MINIDL_FAIL("DataParallel: replica ", k, " on ", devices_[k].str(), " failed: ", e.what());
      }
    }
  if (!registration_checked_ && grad_mode) {
    registration_checked_ = true;  // once: one walk over each replica's first graph
    for (size_t k = 0; k < n && check_registration; ++k)
      nn::assert_registered(*replicas_[k], outputs[k], parts[k],
                            "DataParallel (first forward, replica " + std::to_string(k) + " on " +
                                devices_[k].str() + ")");
  }
  t0 = Clock::now();
  for (auto& o : outputs) {
    o = o.to(output_device_);
    if (o.dim() == 0) o = o.unsqueeze(0);
  }
  Tensor out = n == 1 ? outputs[0] : cat(outputs, 0);
  st.gather_seconds += seconds_since(t0);
  ++st.forwards;
  st.replicas = int(n);
  return out;
}

DataParallelStats DataParallel::stats() const {
  return grad_state_->stats;
}

void DataParallel::reset_stats() {
  grad_state_->stats = DataParallelStats{};
}

std::vector<std::pair<Device, MemoryStats>> DataParallel::memory_per_device() const {
  std::vector<std::pair<Device, MemoryStats>> out;
  for (const Device& d : devices_) {
    bool seen = false;
    for (const auto& entry : out) seen = seen || entry.first == d;
    if (!seen) out.emplace_back(d, memory_stats(d));
  }
  return out;
}

}  // namespace minidl::dist
