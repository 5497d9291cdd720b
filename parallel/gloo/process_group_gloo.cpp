// Gloo backend: a full-mesh gloo context per group and one communication thread that runs the
// group's collectives in issue order (FIFO). f16/bf16 travel as themselves (reduced in f32, see
// transport.cpp); CUDA tensors go through pinned memory. Errors name op, sequence and rank.
#include "parallel/gloo/process_group_gloo.h"

#include "parallel/store/socket.h"
#include "tensor/error.h"

#if MINIDL_WITH_GLOO
#include <gloo/allgatherv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/gather.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "autograd/grad_mode.h"
#include "parallel/gloo/transport.h"
#include "parallel/process_group/backend.h"
#include "autograd/ops.h"
#endif

namespace minidl::dist {

#if !MINIDL_WITH_GLOO
std::shared_ptr<ProcessGroup> make_gloo_process_group(std::shared_ptr<Store>, int, int,
                                                      const ProcessGroupOptions&) {
  MINIDL_FAIL(
      "the gloo backend is not available: minidl was built without Gloo "
      "(install libgloo-dev and reconfigure)");
}
#else

namespace {

using gloo_wire::allreduce_wire;
using gloo_wire::from_wire;
using gloo_wire::to_wire;
using gloo_wire::visit_wire;

// The tensors as one [sum of numels] view when they lie back to back in one CPU storage (FSDP's
// pieces of a flat buffer), else undefined: the collective then reads or writes them in place
// instead of through a concatenated copy.
Tensor back_to_back(const std::vector<Tensor>& ts) {
  if (ts.empty() || !ts[0].is_cpu()) return Tensor();
  int64_t next = ts[0].storage_offset(), total = 0;
  for (const Tensor& t : ts) {
    if (!t.is_cpu() || !t.is_contiguous() || t.dtype() != ts[0].dtype() ||
        !t.shares_storage(ts[0]) || t.storage_offset() != next)
      return Tensor();
    next += t.numel();
    total += t.numel();
  }
  return ts[0].detach().as_strided({total}, {1}, ts[0].storage_offset());
}

class GlooProcessGroup final : public detail::ProcessGroupBase {
 public:
  GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                   const ProcessGroupOptions& options)
      : ProcessGroupBase(std::move(store), rank, size, options) {
    context_ = connect_gloo_context(store_, rank, size, prefix_ + "gloo/", options.timeout);
    {
      net::SigpipeBlocked no_sigpipe;  // the communication thread writes to gloo's sockets
      thread_ = std::thread([this] { loop(); });
    }
    stall_.start("gloo");
  }

  ~GlooProcessGroup() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  std::string backend() const override { return "gloo"; }
  uint64_t sequence_number() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return seq_;
  }

  std::shared_ptr<Work> allreduce(Tensor& t, ReduceOp op) override {
    detail::check_tensor_arg(t, "allreduce");
    return enqueue("allreduce", detail::collective_desc("allreduce", t.dtype(), t.numel()),
                   t.nbytes(), [this, t, op](uint32_t tag) mutable {
                     Tensor wire = to_wire(t);
                     allreduce_wire(context_, wire, op, tag, options_.timeout);
                     from_wire(t, wire);
                   });
  }

  std::shared_ptr<Work> broadcast(Tensor& t, int root) override {
    detail::check_tensor_arg(t, "broadcast");
    check_root(root, "broadcast");
    return enqueue("broadcast", detail::collective_desc("broadcast", t.dtype(), t.numel()),
                   t.nbytes(), [this, t, root](uint32_t tag) mutable {
                     if (t.numel() == 0) return;
                     Tensor wire = to_wire(t);
                     gloo::BroadcastOptions opts(context_);
                     opts.setTag(tag);
                     opts.setTimeout(options_.timeout);
                     opts.setRoot(root);
                     visit_wire(wire.dtype(), [&]<typename T>() {
                       opts.setOutput(wire.data_ptr<T>(), size_t(wire.numel()));
                     });
                     gloo::broadcast(opts);
                     from_wire(t, wire);
                   });
  }

  std::shared_ptr<Work> allgather(std::vector<Tensor>& outputs, const Tensor& input) override {
    detail::check_tensor_arg(input, "allgather");
    MINIDL_CHECK(outputs.size() == size_t(size_), "allgather: expected ", size_,
                 " output tensors (one per rank), got ", outputs.size());
    std::vector<size_t> counts;
    for (int r = 0; r < size_; ++r) {
      const Tensor& o = outputs[size_t(r)];
      detail::check_tensor_arg(o, "allgather output " + std::to_string(r));
      MINIDL_CHECK(o.dtype() == input.dtype(), "allgather: output ", r, " has dtype ", o.dtype(),
                   " but the input has ", input.dtype());
      counts.push_back(size_t(o.numel()));
    }
    MINIDL_CHECK(outputs[size_t(rank_)].numel() == input.numel(), "allgather: rank ", rank_,
                 "'s output has ", outputs[size_t(rank_)].numel(), " elements but its input ",
                 input.numel());
    return enqueue("allgather", detail::collective_desc("allgather", input.dtype(), input.numel()),
                   input.nbytes(), [this, outputs, input, counts](uint32_t tag) mutable {
                     Tensor wire_in = to_wire(input);
                     int64_t total = 0;
                     for (size_t c : counts) total += int64_t(c);
                     // Outputs back to back (FSDP's gather buffer): gloo writes them directly.
                     Tensor span = back_to_back(outputs);
                     if (span.defined() && span.shares_storage(wire_in)) span = Tensor();
                     Tensor all = span.defined() ? span : empty({total}, wire_in.dtype());
                     if (total > 0) {
                       gloo::AllgathervOptions opts(context_);
                       opts.setTag(tag);
                       opts.setTimeout(options_.timeout);
                       visit_wire(wire_in.dtype(), [&]<typename T>() {
                         opts.setInput(wire_in.data_ptr<T>(), size_t(wire_in.numel()));
                         opts.setOutput(all.data_ptr<T>(), counts);
                       });
                       gloo::allgatherv(opts);
                     }
                     if (span.defined()) return;
                     int64_t at = 0;
                     for (size_t r = 0; r < outputs.size(); ++r) {
                       const int64_t n = int64_t(counts[r]);
                       outputs[r].copy_(all.narrow(0, at, n).view(outputs[r].shape()));
                       at += n;
                     }
                   });
  }

  std::shared_ptr<Work> reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                       ReduceOp op) override {
    detail::check_tensor_arg(output, "reduce_scatter");
    MINIDL_CHECK(inputs.size() == size_t(size_), "reduce_scatter: expected ", size_,
                 " input tensors (one per rank), got ", inputs.size());
    for (size_t r = 0; r < inputs.size(); ++r) {
      detail::check_tensor_arg(inputs[r], "reduce_scatter input " + std::to_string(r));
      MINIDL_CHECK(inputs[r].shape() == output.shape() && inputs[r].dtype() == output.dtype(),
                   "reduce_scatter: input ", r, " is ", inputs[r].shape_str(), " ",
                   inputs[r].dtype(), " but the output is ", output.shape_str(), " ",
                   output.dtype());
    }
    // The inputs side by side, exchanged by an alltoall and reduced here: a ring
    // reduce-scatter's (size-1)/size of the bytes per rank, half an allreduce's.
    return enqueue(
        "reduce_scatter", detail::collective_desc("reduce_scatter", output.dtype(), output.numel()),
        output.nbytes() * uint64_t(size_), [this, output, inputs, op](uint32_t tag) mutable {
          Tensor wire_in = back_to_back(inputs);  // FSDP's pieces of one gradient: no copy
          if (!wire_in.defined()) {
            std::vector<Tensor> flat;
            for (const Tensor& in : inputs) flat.push_back(to_wire(in).reshape({-1}));
            wire_in = cat(flat, 0);
          }
          Tensor wire_out = to_wire(output);
          if (!wire_out.is_contiguous()) wire_out = wire_out.contiguous();
          gloo_wire::reduce_scatter_wire(context_, wire_in, wire_out, op, tag, options_.timeout);
          from_wire(output, wire_out);
        });
  }

  std::shared_ptr<Work> gather(std::vector<Tensor>& outputs, const Tensor& input,
                               int root) override {
    detail::check_tensor_arg(input, "gather");
    check_root(root, "gather");
    if (rank_ == root) {
      MINIDL_CHECK(outputs.size() == size_t(size_), "gather: the root expects ", size_,
                   " output tensors, got ", outputs.size());
      for (size_t r = 0; r < outputs.size(); ++r) {
        detail::check_tensor_arg(outputs[r], "gather output " + std::to_string(r));
        MINIDL_CHECK(outputs[r].numel() == input.numel() && outputs[r].dtype() == input.dtype(),
                     "gather: output ", r, " is ", outputs[r].shape_str(), " ", outputs[r].dtype(),
                     " but the input is ", input.shape_str(), " ", input.dtype(),
                     " (gather needs equal sizes)");
      }
    }
    return enqueue("gather", detail::collective_desc("gather", input.dtype(), input.numel()),
                   input.nbytes(), [this, outputs, input, root](uint32_t tag) mutable {
                     if (input.numel() == 0) return;
                     Tensor wire_in = to_wire(input);
                     Tensor all;
                     gloo::GatherOptions opts(context_);
                     opts.setTag(tag);
                     opts.setTimeout(options_.timeout);
                     opts.setRoot(root);
                     visit_wire(wire_in.dtype(), [&]<typename T>() {
                       opts.setInput(wire_in.data_ptr<T>(), size_t(wire_in.numel()));
                       if (rank_ == root) {
                         all = empty({int64_t(size_) * wire_in.numel()}, wire_in.dtype());
                         opts.setOutput(all.data_ptr<T>(), size_t(all.numel()));
                       }
                     });
                     gloo::gather(opts);
                     const int64_t n = wire_in.numel();
                     for (size_t r = 0; r < outputs.size() && rank_ == root; ++r)
                       outputs[r].copy_(all.narrow(0, int64_t(r) * n, n).view(outputs[r].shape()));
                   });
  }

  std::shared_ptr<Work> barrier() override {
    return enqueue("barrier", "barrier()", 0, [this](uint32_t tag) {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::barrier(opts);
    });
  }

 private:
  using Job = std::function<void(uint32_t tag)>;
  struct Task {
    std::shared_ptr<detail::FutureWork> work;
    uint64_t seq;
    std::string op, desc;
    uint64_t bytes;  // this rank's contribution, for the stall inspector
    Job job;
  };

  std::shared_ptr<Work> enqueue(const std::string& op, std::string desc, uint64_t bytes, Job job) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t seq = ++seq_;
    count_collective(bytes);
    auto work = std::make_shared<detail::FutureWork>(seq);
    queue_.push_back(Task{work, seq, op, std::move(desc), bytes, std::move(job)});
    cv_.notify_all();
    return work;
  }

  void loop() {
    NoGradGuard no_grad;  // staging copies must not record history
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
        if (stop_) {
          lock.unlock();
          fail(task, "not run: the process group was destroyed first");
          continue;
        }
      }
      if (!broken_.empty()) {
        fail(task, "not run: the group is unusable after " + broken_);
        continue;
      }
      run(task);
    }
  }

  void fail(Task& task, const std::string& why) {
    task.work->complete(std::make_exception_ptr(Error(where(task.op, task.seq) + " " + why)));
  }

  void run(Task& task) {
    stall_.begin(task.seq, task.op, task.bytes);
    try {
      debug_check(task.seq, task.desc);
      task.job(uint32_t(task.seq));
      stall_.end(task.seq);
      task.work->complete();
    } catch (const gloo::Exception& e) {
      const std::string what = e.what();
      const bool timed_out = what.find("imed out") != std::string::npos;
      // A timeout names the missing ranks from their published state (bounded, never throws).
      std::string why = "a peer connection failed (a peer may have died)";
      if (timed_out) {
        const std::string missing = stall_.diagnose(task.seq);
        why = "timed out after " + format_seconds(options_.timeout) +
              (missing.empty() ? "; a peer may have died, be slow, or skipped this collective"
                               : missing);
      }
      stall_.end(task.seq, /*completed=*/false);
      // Later collectives repeat the reason: the one the caller sees may be a follow-up.
      broken_ = where(task.op, task.seq) + " failed: " + why;
      fail(task, "failed: " + why + " (gloo: " + what + ")");
    } catch (const std::exception& e) {
      stall_.end(task.seq, /*completed=*/false);
      broken_ = where(task.op, task.seq) + " failed: " + e.what();
      fail(task, std::string("failed: ") + e.what());
    }
  }

  std::shared_ptr<gloo::rendezvous::Context> context_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  uint64_t seq_ = 0;
  bool stop_ = false;
  std::string broken_;  // touched by the communication thread only
  std::thread thread_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_gloo_process_group(std::shared_ptr<Store> store, int rank,
                                                      int world_size,
                                                      const ProcessGroupOptions& options) {
  return std::make_shared<GlooProcessGroup>(std::move(store), rank, world_size, options);
}
#endif  // MINIDL_WITH_GLOO

}  // namespace minidl::dist
