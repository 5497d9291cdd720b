// DistributedDataParallel: construction checks and broadcasts, forward (join notification,
// buffer broadcast, reducer arming), step counts published to the store so that uneven
// inputs fail naming every rank's count, and the Join algorithm for uneven inputs.
#include "parallel/ddp/ddp.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <iostream>
#include <mutex>
#include <thread>
#include <utility>

#include "autograd/grad_mode.h"
#include "nn/registration_check.h"
#include "parallel/ddp/broadcast_coalesced.h"
#include "parallel/distributed.h"
#include "autograd/ops.h"

namespace minidl::dist {
namespace {

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string describe(const std::string& name, const Tensor& p) {
  return "'" + name + "' " + p.shape_str() + " " + std::string(dtype_name(p.dtype()));
}

}  // namespace

// Publishes the latest step count to the store from a background thread: the training loop
// only hands over a number (no store round trip per step); counts that arrive while a set is
// in flight are coalesced. A rank stuck or finished has long published its last count by the
// time a peer's collective times out.
class StepPublisher {
 public:
  StepPublisher(std::shared_ptr<Store> store, std::string key)
      : store_(std::move(store)), key_(std::move(key)), thread_([this] { loop(); }) {}
  ~StepPublisher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();  // after publishing a pending count
  }
  void publish(int64_t steps) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_ = steps;
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || pending_ >= 0; });
      if (pending_ < 0) return;  // stopping, nothing left
      const int64_t n = std::exchange(pending_, -1);
      lock.unlock();
      try {
        store_->set(key_, std::to_string(n));
      } catch (const std::exception& e) {  // the counts are only a diagnostic
        std::cerr << "DistributedDataParallel: stopped publishing step counts: " << e.what()
                  << "\n";
        return;
      }
      lock.lock();
    }
  }

  std::shared_ptr<Store> store_;
  std::string key_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t pending_ = -1;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

DistributedDataParallel::~DistributedDataParallel() = default;

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 DDPOptions opts)
    : ModuleWrapper(std::move(module), "DistributedDataParallel"),
      group_(group ? std::move(group) : default_group_ptr()),
      opts_(opts) {
  MINIDL_CHECK(opts_.bucket_cap_mb > 0 && opts_.first_bucket_mb > 0,
               "DistributedDataParallel: bucket sizes must be positive (bucket_cap_mb=",
               opts_.bucket_cap_mb, ", first_bucket_mb=", opts_.first_bucket_mb, ")");
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (auto& [name, p] : named_parameters())
    if (p.requires_grad()) {
      MINIDL_CHECK(p.is_contiguous(), "DistributedDataParallel: parameter '", name,
                   "' is not contiguous");
      params.push_back(p);
      names.push_back(name);
    }
  check_same_parameters();
  broadcast_state(0);
  has_buffers_ = !named_buffers().empty();
  setup_step_counts();
  ReducerOptions ro;
  ro.bucket_cap_bytes = int64_t(opts_.bucket_cap_mb * 1024 * 1024);
  ro.first_bucket_bytes = int64_t(opts_.first_bucket_mb * 1024 * 1024);
  ro.find_unused_parameters = opts_.find_unused_parameters;
  ro.gradient_as_bucket_view = opts_.gradient_as_bucket_view;
  reducer_ = Reducer::create(std::move(params), std::move(names), group_, ro);
  reducer_->set_failure_handler([this](const std::exception& e) { explain_failure(e); });
}

// Every rank hashes (name, shape, dtype) of each parameter; the lists are allgathered and
// compared with rank 0's, so a mismatch is reported on every rank naming the parameter.
void DistributedDataParallel::check_same_parameters() {
  const int world = group_->size(), rank = group_->rank();
  if (world == 1) return;
  auto named = named_parameters();
  Tensor mine = empty({int64_t(named.size())}, kInt64);
  for (size_t i = 0; i < named.size(); ++i)
    mine.data_ptr<int64_t>()[i] = int64_t(fnv1a(describe(named[i].first, named[i].second)) >> 2);
  Tensor count = full({1}, int64_t(named.size()), kInt64);
  std::vector<Tensor> counts(world);
  for (auto& c : counts) c = empty({1}, kInt64);
  group_->allgather(counts, count)->wait();
  std::vector<Tensor> lists(world);
  for (int r = 0; r < world; ++r) lists[r] = empty({counts[r].data_ptr<int64_t>()[0]}, kInt64);
  group_->allgather(lists, mine)->wait();
  for (int r = 1; r < world; ++r) {
    const int64_t n0 = lists[0].numel(), nr = lists[r].numel();
    for (int64_t i = 0; i < std::min(n0, nr); ++i)
      MINIDL_CHECK(lists[0].data_ptr<int64_t>()[i] == lists[r].data_ptr<int64_t>()[i],
                   "DistributedDataParallel: parameter ", i, " differs between rank 0 and rank ", r,
                   " (name, shape or dtype); this rank (", rank, ") has ",
                   describe(named[size_t(i)].first, named[size_t(i)].second),
                   ". Every rank must wrap the same model");
    MINIDL_CHECK(n0 == nr, "DistributedDataParallel: rank 0 has ", n0, " parameters but rank ", r,
                 " has ", nr, "; every rank must wrap the same model");
  }
}

// Parameters and buffers in coalesced buckets (one broadcast per dtype and 250 MiB).
void DistributedDataParallel::broadcast_state(int root) {
  if (group_->size() == 1) return;
  std::vector<Tensor> state;
  for (auto& [name, p] : named_parameters()) state.push_back(p);
  for (auto& [name, b] : named_buffers()) state.push_back(b);
  broadcast_coalesced(*group_, state, root);
}

// PyTorch coalesces the buffers too: a ResNet's 15 BatchNorm buffers go as two broadcasts
// (the f32 running stats and the int64 counters), not fifteen.
void DistributedDataParallel::broadcast_buffers() {
  if (!opts_.broadcast_buffers || group_->size() == 1) return;
  std::vector<Tensor> buffers;
  for (auto& [name, b] : named_buffers()) buffers.push_back(b);
  buffer_broadcasts_ += broadcast_coalesced(*group_, buffers, buffer_root_);
}

// Under a Join, every forward tells the joined ranks whether a synchronised backward follows
// and which ranks are still active: t = [active ranks, ranks that will sync, one-hot of the
// active ranks]. Buffers then come from the lowest active rank (rank 0 may have joined).
// Returns t after the allreduce; `active` is false on a joined rank.
Tensor DistributedDataParallel::exchange_join_state(bool active, bool sync) {
  Tensor t = zeros({2 + int64_t(group_->size())}, kFloat64);
  double* d = t.data_ptr<double>();
  if (active) {
    d[0] = 1;
    d[1] = sync ? 1 : 0;
    d[2 + group_->rank()] = 1;
  }
  group_->allreduce(t, ReduceOp::sum)->wait();
  buffer_root_ = 0;
  for (int r = group_->size() - 1; r >= 0; --r)
    if (d[2 + r] > 0) buffer_root_ = r;
  return t;
}

// Rank 0 draws a store-wide instance number (so DDPs sharing a store never share keys) and
// broadcasts it; -1 when it has no store. Always one broadcast, whatever the stores.
void DistributedDataParallel::setup_step_counts() {
  if (group_->size() == 1) return;
  store_ = opts_.store;
  if (!store_ && is_initialized() && group_ == default_group_ptr())
    store_ = rendezvous_info().store;
  Tensor id = full({1}, int64_t(-1), kInt64);
  if (group_->rank() == 0 && store_) {
    try {
      id.data_ptr<int64_t>()[0] = store_->add("ddp/instances", 1);
    } catch (const std::exception& e) {  // no counts, but the broadcast below still happens
      std::cerr << "DistributedDataParallel: no step counts (store add failed): " << e.what()
                << "\n";
    }
  }
  group_->broadcast(id, 0)->wait();
  const int64_t instance = id.data_ptr<int64_t>()[0];
  if (instance < 0) store_.reset();
  if (!store_) return;
  step_prefix_ = "ddp/" + std::to_string(instance) + "/steps/";
  publisher_ =
      std::make_unique<StepPublisher>(store_, step_prefix_ + std::to_string(group_->rank()));
}

void DistributedDataParallel::publish_step() {
  ++steps_;
  if (publisher_) publisher_->publish(steps_);
}

void DistributedDataParallel::guard_collective(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    explain_failure(e);
    throw;
  }
}

// After a failed collective: reads every rank's published step count and, when they differ,
// throws an error naming them (uneven inputs, or ranks that died) around the original one.
void DistributedDataParallel::explain_failure(const std::exception& e) const {
  if (!store_ || join_enabled_) return;  // under a Join uneven counts are expected
  const int world = group_->size();
  std::vector<int64_t> steps(size_t(world), 0);  // a rank that never published ran 0 steps
  try {
    for (int r = 0; r < world; ++r) {
      const std::string key = step_prefix_ + std::to_string(r);
      if (store_->check({key})) steps[size_t(r)] = std::stoll(store_->get_string(key));
    }
  } catch (const std::exception&) {
    return;  // the store is unreachable (its host may have exited): keep the original error
  }
  steps[size_t(group_->rank())] = steps_;
  const auto [lo, hi] = std::minmax_element(steps.begin(), steps.end());
  if (*lo == *hi) return;
  const int64_t most = *hi;
  std::string who;
  auto add = [&](const std::string& part) { who += (who.empty() ? "" : ", ") + part; };
  int shown = 0, hidden_ahead = 0, hidden_behind = 0;
  for (int r = 0; r < world; ++r) {
    const int64_t n = steps[size_t(r)];
    if (world <= 8 || (n != most && shown < 8)) {
      add("rank " + std::to_string(r) + (n == most ? " reached step " : " stopped after ") +
          std::to_string(n));
      ++shown;
    } else {
      ++(n == most ? hidden_ahead : hidden_behind);
    }
  }
  if (hidden_behind > 0) add(std::to_string(hidden_behind) + " more ranks stopped earlier");
  if (hidden_ahead > 0)
    add("the other " + std::to_string(hidden_ahead) + " ranks reached step " +
        std::to_string(most));
  // A rank killed between two steps leaves the same trace as one that ran out of batches.
  MINIDL_FAIL("DDP: ranks ran different numbers of steps: ", who,
              ". Either the ranks behind ran out of batches (uneven inputs: give every rank the "
              "same number of batches, e.g. with DistributedSampler, or wrap the loop in "
              "dist::Join), or they exited or died before their next step (a crash or a kill: "
              "see their own logs). Underlying error: ",
              e.what());
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  before_forward();
  return after_forward((*module_)(x), {x});
}

Tensor DistributedDataParallel::forward_inputs(const std::vector<Tensor>& inputs) {
  before_forward();
  // The module's hooks run, as in torch's self.module(*inputs).
  return after_forward(module_->call(inputs), inputs);
}

Tensor DistributedDataParallel::after_forward(Tensor out, const std::vector<Tensor>& inputs) {
  if (!registration_checked_ && GradMode::is_enabled()) {
    registration_checked_ = true;  // once: one walk over the first graph
    if (opts_.check_registration)
      nn::assert_registered(*module_, out, inputs, "DistributedDataParallel (first forward)");
  }
  return out;
}

void DistributedDataParallel::before_forward() {
  const bool sync = require_sync_ && GradMode::is_enabled();
  const bool multi = group_->size() > 1;
  if (multi && (sync || join_enabled_ || (opts_.broadcast_buffers && has_buffers_)))
    publish_step();  // this forward talks to the other ranks
  if (join_enabled_ && multi) {
    exchange_join_state(true, sync);
    ++join_iterations_;
  }
  reducer_->prepare_for_forward(sync);
  if (multi && opts_.broadcast_buffers && has_buffers_) {
    const auto t0 = std::chrono::steady_clock::now();
    guard_collective([this] { broadcast_buffers(); });
    broadcast_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
}

DDPStats DistributedDataParallel::stats() const {
  const ReducerStats& r = reducer_->stats();
  DDPStats s;
  s.steps = r.steps;
  if (group_->size() > 1) {
    s.bucket_bytes = reducer_->bucket_bytes();
    s.num_buckets = int(s.bucket_bytes.size());
    for (int64_t b : s.bucket_bytes) s.bytes_per_step += b;
  }
  if (group_->size() > 1 && r.steps > 0) s.bytes_per_step = r.bytes;
  s.total_bytes = r.total_bytes;
  s.buffer_broadcasts = buffer_broadcasts_;
  s.comm_seconds = r.total_comm_seconds;
  s.exposed_seconds = r.total_exposed_seconds;
  s.broadcast_seconds = broadcast_seconds_;
  return s;
}

void DistributedDataParallel::reset_stats() {
  reducer_->reset_totals();
  broadcast_seconds_ = 0;
  buffer_broadcasts_ = 0;
}

Join::Join(DistributedDataParallel& ddp) : ddp_(ddp) {
  // A joined rank shadows DDP's collectives only: a SyncBatchNorm's statistics allgather in the
  // active ranks' forward would wait for it until the timeout (torch needs
  // throw_on_early_termination there).
  for (const auto& [name, m] : ddp_.module().named_modules())
    MINIDL_CHECK(m->name() != "SyncBatchNorm", "dist::Join: the model has a SyncBatchNorm ('",
                 name.empty() ? std::string("the root") : name,
                 "'), whose collectives a joined rank cannot stand in for; give every rank the "
                 "same number of batches (DistributedSampler with drop_last) instead of Join");
  ddp_.join_enabled_ = true;
  ddp_.join_iterations_ = 0;
}

Join::~Join() {
  if (!joined_ && std::uncaught_exceptions() == 0) {
    try {
      join();
    } catch (const std::exception& e) {
      std::cerr << "dist::Join: join() failed in the destructor: " << e.what() << "\n";
    }
  }
  ddp_.join_enabled_ = false;
}

void Join::join() {
  MINIDL_CHECK(!joined_, "Join::join: already joined");
  joined_ = true;
  ProcessGroup& g = *ddp_.group_;
  if (g.size() > 1) {
    NoGradGuard no_grad;
    for (;;) {  // shadow the collectives of one forward+backward of the active ranks
      Tensor t = ddp_.exchange_join_state(false, false);
      if (t.data_ptr<double>()[0] == 0) break;  // everybody joined
      ddp_.reducer_->prepare_for_forward(false);
      ddp_.broadcast_buffers();
      if (t.data_ptr<double>()[1] > 0) ddp_.reducer_->shadow_backward();
    }
    // The rank that ran the most iterations (the highest such rank) has the final model.
    Tensor iters = full({1}, double(ddp_.join_iterations_), kFloat64);
    g.allreduce(iters, ReduceOp::max)->wait();
    const bool most = double(ddp_.join_iterations_) == iters.data_ptr<double>()[0];
    Tensor who = full({1}, most ? double(g.rank()) : -1.0, kFloat64);
    g.allreduce(who, ReduceOp::max)->wait();
    ddp_.broadcast_state(int(who.data_ptr<double>()[0]));
  }
  ddp_.join_enabled_ = false;
  ddp_.buffer_root_ = 0;
}

}  // namespace minidl::dist
