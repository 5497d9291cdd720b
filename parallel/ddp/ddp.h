// DistributedDataParallel (torch.nn.parallel.DistributedDataParallel): one process per rank,
// parameters and buffers broadcast from rank 0 at construction, gradients averaged across
// ranks by the Reducer (bucketed async allreduce overlapping backward), no_sync() for
// gradient accumulation, and Join for ranks with uneven numbers of batches.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "parallel/ddp/comm_hooks.h"
#include "parallel/module_wrapper.h"
#include "parallel/process_group/process_group.h"
#include "parallel/ddp/reducer.h"

namespace minidl::dist {

class StepPublisher;  // ddp.cpp

struct DDPOptions {
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;
  bool broadcast_buffers = true;  // rank 0's buffers before every forward
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;  // .grad aliases the bucket (no copy back)
  // Where each rank publishes its step count (key "ddp/<instance>/steps/<rank>", set by a
  // background thread, off the training loop) so that uneven inputs fail with every rank's
  // count. Null: the default group's rendezvous store when the DDP uses the default group,
  // else no counts (a group built by hand with make_process_group passes its store here).
  // Counts are kept only when rank 0 has a store.
  std::shared_ptr<Store> store = nullptr;
  // The first forward with grad enabled checks that every tensor requiring grad it used is a
  // registered parameter of the module (nn::assert_registered): an unregistered one would get no
  // averaged gradient and the ranks would silently diverge. false: skip (a forward that uses
  // another module's parameters on purpose).
  bool check_registration = true;
};

// Communication statistics for speedup reports (minidl-compare): totals since construction or
// reset_stats(), over synchronised steps (forward + backward that allreduced gradients).
// no_sync() backwards and a joined rank's stand-in steps are not counted. At world size 1
// nothing is communicated: steps are counted, everything else stays 0 (no buckets reported).
struct DDPStats {
  int64_t steps = 0;                  // synchronised backward passes
  int num_buckets = 0;                // current bucket layout
  std::vector<int64_t> bucket_bytes;  // bytes of each bucket, in bucket order
  // Gradient payload per synchronised step: measured in the last one (a comm hook's compressed
  // bytes), before the first step the buckets' size.
  int64_t bytes_per_step = 0;
  int64_t total_bytes = 0;        // gradient payload over the steps
  int64_t buffer_broadcasts = 0;  // broadcasts the forwards' buffer syncs issued (coalesced)
  double comm_seconds = 0;        // sum over steps: first bucket launched -> all allreduces done
  double exposed_seconds = 0;     // sum over steps: backward compute done -> allreduces done
  double broadcast_seconds = 0;   // forwards' buffer broadcasts (broadcast_buffers)
  // Share of the allreduce time hidden behind backward compute.
  double hidden_fraction() const {
    return comm_seconds > 0 ? 1.0 - exposed_seconds / comm_seconds : 0.0;
  }
};

// Usage (every rank):
//   auto ddp = std::make_shared<dist::DistributedDataParallel>(model);  // default group
//   loss = f(ddp->forward(x)); loss.backward(); opt.step();   // grads are the global mean
// The wrapper's named_parameters()/state_dict() are the model's own names (no "module."
// prefix). Every rank must run the same number of synchronised forward+backward steps, or
// use Join; otherwise the rank left waiting fails with the group's collective timeout, and
// (with a store, see DDPOptions::store) the error names every rank's step count:
//   "DDP: ranks ran different numbers of steps: rank 0 reached step 3, rank 1 stopped after 2
//    (uneven inputs: ...). Underlying error: gloo allreduce #9 (rank 0 of 2) failed: ..."
// A step is a forward that talks to the other ranks (synchronised, or broadcasting buffers).
// An unused parameter (no gradient in a synchronised backward) fails the next forward with
// its name unless find_unused_parameters. The first forward with grad enabled fails naming any
// tensor requiring grad that the forward used but the module does not register (shapes, dtypes,
// the fix; DDPOptions::check_registration). At world size 1 gradients are left in place (no
// bucket copies; gradient_as_bucket_view has no effect). Parameters keep an inert hook after
// the DDP object is destroyed (hooks cannot be removed).

class DistributedDataParallel : public ModuleWrapper {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module,
                          std::shared_ptr<ProcessGroup> group = nullptr, DDPOptions opts = {});
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& x) override;
  // A model with several tensor inputs: `ddp(x, mask)` (see nn::Module::forward_inputs).
  Tensor forward_inputs(const std::vector<Tensor>& inputs) override;

  // RAII: inside, backward only accumulates local gradients; the first synchronised backward
  // after it averages the accumulated gradients (torch's `with ddp.no_sync():`).
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp), prev_(ddp.require_sync_) {
      ddp.require_sync_ = false;
    }
    ~NoSync() { ddp_.require_sync_ = prev_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  ProcessGroup& process_group() const { return *group_; }
  const DDPOptions& options() const { return opts_; }
  // torch's register_comm_hook: `hook` reduces each gradient bucket instead of the allreduce
  // (parallel/ddp/comm_hooks.h: allreduce_hook, fp16/bf16_compress_hook, powersgd_hook or your
  // own). Once, before or between steps; every rank registers the same kind of hook.
  void register_comm_hook(CommHook hook) { reducer_->set_comm_hook(std::move(hook)); }
  const ReducerStats& reducer_stats() const { return reducer_->stats(); }
  DDPStats stats() const;
  void reset_stats();
  std::vector<std::vector<size_t>> bucket_indices() const { return reducer_->bucket_indices(); }

 private:
  friend class Join;
  void before_forward();  // join notice, step count, reducer preparation, buffer broadcast
  // The registration check on the first forward with grad (DDPOptions::check_registration).
  Tensor after_forward(Tensor out, const std::vector<Tensor>& inputs);
  void check_same_parameters();
  void broadcast_state(int root);  // parameters and buffers
  void broadcast_buffers();
  Tensor exchange_join_state(bool active, bool sync);
  void setup_step_counts();
  void publish_step();
  // Runs a collective step; a failure is rethrown naming the ranks' step counts when they
  // differ (see explain_failure).
  void guard_collective(const std::function<void()>& f);
  void explain_failure(const std::exception& e) const;  // throws when the counts differ

  std::shared_ptr<ProcessGroup> group_;
  DDPOptions opts_;
  std::shared_ptr<Reducer> reducer_;
  bool require_sync_ = true;
  bool registration_checked_ = false;  // DDPOptions::check_registration ran (first forward)
  bool join_enabled_ = false;
  int64_t join_iterations_ = 0;  // forwards run since the Join began
  int buffer_root_ = 0;          // rank whose buffers forward broadcasts
  bool has_buffers_ = false;
  int64_t steps_ = 0;                         // forwards that talked to the other ranks
  double broadcast_seconds_ = 0;              // DDPStats::broadcast_seconds
  int64_t buffer_broadcasts_ = 0;             // DDPStats::buffer_broadcasts
  std::shared_ptr<Store> store_;              // where steps_ is published (null: nowhere)
  std::string step_prefix_;                   // "ddp/<instance>/steps/"
  std::unique_ptr<StepPublisher> publisher_;  // sets store_ key step_prefix_ + rank
};

// Uneven inputs (torch.distributed.algorithms.Join): construct before the training loop on
// every rank; a rank that runs out of batches calls join(), which stands in for its peers'
// collectives with zero gradient contributions until every rank has joined. Gradients are
// still divided by the full world size. Then every rank takes the parameters and buffers of
// the rank that ran the most iterations. Under a Join every synchronised forward must be
// followed by a backward.
class Join {
 public:
  explicit Join(DistributedDataParallel& ddp);
  ~Join();  // calls join() if it was not called (errors are printed, not thrown)
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;
  void join();

 private:
  DistributedDataParallel& ddp_;
  bool joined_ = false;
};

}  // namespace minidl::dist
