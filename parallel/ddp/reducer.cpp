// The DDP Reducer: bucket layout and rebuild, per-parameter hooks that fill buckets and launch
// their allreduces in index order while backward runs, and the end-of-backward finalisation
// (unused parameters, waiting, writing the averaged gradients back).
#include "parallel/ddp/reducer.h"

#include <algorithm>
#include <map>
#include <utility>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace minidl::dist {

std::shared_ptr<Reducer> Reducer::create(std::vector<Tensor> params, std::vector<std::string> names,
                                         std::shared_ptr<ProcessGroup> group,
                                         const ReducerOptions& options) {
  std::shared_ptr<Reducer> r(
      new Reducer(std::move(params), std::move(names), std::move(group), options));
  r->install_hooks();
  return r;
}

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names,
                 std::shared_ptr<ProcessGroup> group, const ReducerOptions& options)
    : params_(std::move(params)),
      names_(std::move(names)),
      group_(std::move(group)),
      opts_(options) {
  MINIDL_CHECK(group_ != nullptr, "Reducer: no process group");
  MINIDL_CHECK(params_.size() == names_.size(), "Reducer: ", params_.size(), " parameters but ",
               names_.size(), " names");
  ready_.assign(params_.size(), 0);
  used_.assign(params_.size(), 0);
  std::vector<size_t> order(params_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;  // reverse order
  build_buckets(order);
}

void Reducer::install_hooks() {
  std::weak_ptr<Reducer> weak = weak_from_this();
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].register_post_accumulate_grad_hook([weak, i](Tensor&) {
      if (auto self = weak.lock()) self->autograd_hook(i);  // a dead DDP leaves grads alone
    });
}

// Parameters in `order` go into per-(dtype, device) buckets; a bucket closes once it reaches
// its cap (first_bucket_bytes for the first of its kind, then bucket_cap_bytes). Parameters
// are never split, so buckets may overshoot their cap.
void Reducer::build_buckets(const std::vector<size_t>& order) {
  struct Open {
    std::vector<size_t> params;
    int64_t bytes = 0;
    int closed = 0;
  };
  std::map<std::pair<int, std::string>, Open> open;
  std::vector<std::vector<size_t>> layout;
  for (size_t i : order) {
    const Tensor& p = params_[i];
    Open& o = open[{int(p.dtype()), p.device().str()}];
    o.params.push_back(i);
    o.bytes += p.numel() * int64_t(itemsize(p.dtype()));
    if (o.bytes >= (o.closed == 0 ? opts_.first_bucket_bytes : opts_.bucket_cap_bytes)) {
      layout.push_back(std::move(o.params));
      o = Open{{}, 0, o.closed + 1};
    }
  }
  for (auto& [key, o] : open)
    if (!o.params.empty()) layout.push_back(std::move(o.params));
  buckets_.clear();
  bucket_of_.assign(params_.size(), 0);
  pos_in_bucket_.assign(params_.size(), 0);
  for (auto& ids : layout) {
    Bucket b;
    int64_t total = 0;
    for (size_t k = 0; k < ids.size(); ++k) {
      bucket_of_[ids[k]] = buckets_.size();
      pos_in_bucket_[ids[k]] = k;
      b.offsets.push_back(total);
      total += params_[ids[k]].numel();
    }
    const Tensor& p0 = params_[ids[0]];
    b.flat = zeros({total}, p0.dtype(), p0.device());
    b.params = std::move(ids);
    buckets_.push_back(std::move(b));
  }
  stats_.num_buckets = int(buckets_.size());
}

std::vector<std::vector<size_t>> Reducer::bucket_indices() const {
  std::vector<std::vector<size_t>> out;
  for (const Bucket& b : buckets_) out.push_back(b.params);
  return out;
}

std::vector<int64_t> Reducer::bucket_bytes() const {
  std::vector<int64_t> out;
  for (const Bucket& b : buckets_) out.push_back(int64_t(b.flat.nbytes()));
  return out;
}

void Reducer::reset_totals() {
  stats_.steps = 0;
  stats_.total_comm_seconds = stats_.total_exposed_seconds = 0;
  stats_.total_bytes = 0;
}

Tensor Reducer::slot(size_t i) const {
  const Bucket& b = buckets_[bucket_of_[i]];
  return b.flat.narrow(0, b.offsets[pos_in_bucket_[i]], params_[i].numel())
      .view(params_[i].shape());
}

// Rebuilds the buckets once, in rank 0's observed gradient order (parameters that never got a
// gradient go last), so that buckets fill in the order backward produces gradients.
void Reducer::maybe_rebuild() {
  if (!rebuild_due_ || rebuilt_) return;
  std::vector<size_t> order = grad_order_;
  std::vector<char> seen(params_.size(), 0);
  for (size_t i : order) seen[i] = 1;
  for (size_t i = params_.size(); i-- > 0;)
    if (!seen[i]) order.push_back(i);
  if (group_->size() > 1) {
    Tensor t = empty({int64_t(order.size())}, kInt64);
    int64_t* d = t.data_ptr<int64_t>();
    for (size_t k = 0; k < order.size(); ++k) d[k] = int64_t(order[k]);
    wait(*group_->broadcast(t, 0));
    for (size_t k = 0; k < order.size(); ++k) {
      MINIDL_CHECK(d[k] >= 0 && size_t(d[k]) < params_.size(), "DDP rank ", group_->rank(),
                   ": rank 0 sent a bad bucket order (index ", d[k], ")");
      order[k] = size_t(d[k]);
    }
  }
  build_buckets(order);
  rebuilt_ = true;
}

void Reducer::prepare_for_forward(bool sync) {
  in_iteration_ = false;
  if (unfinished_) {
    unfinished_ = false;
    MINIDL_FAIL(unfinished_msg_);
  }
  maybe_rebuild();
  expect_hooks_ = sync && GradMode::is_enabled();
}

void Reducer::autograd_hook(size_t i) {
  if (!expect_hooks_) return;  // no_sync(), or backward of a forward not run through DDP
  if (!in_iteration_) {
    in_iteration_ = true;
    std::fill(ready_.begin(), ready_.end(), 0);
    std::fill(used_.begin(), used_.end(), 0);
    for (Bucket& b : buckets_) {
      b.pending = b.params.size();
      b.future.reset();
    }
    next_bucket_ = 0;
    step_bytes_ = 0;
    std::weak_ptr<Reducer> weak = weak_from_this();
    autograd::queue_callback([weak] {
      if (auto self = weak.lock()) self->finalize_backward();
    });
  }
  MINIDL_CHECK(!ready_[i], "DDP rank ", group_->rank(), ": parameter '", names_[i],
               "' got a gradient twice in one backward (a second backward through the same "
               "forward, or reentrant backward); DDP reduces each parameter once per forward");
  used_[i] = 1;
  if (!rebuilt_ && !rebuild_due_) grad_order_.push_back(i);
  if (group_->size() > 1) {
    Tensor s = slot(i);
    Tensor& g = params_[i].mutable_grad();
    if (!(opts_.gradient_as_bucket_view && g.data_ptr() == s.data_ptr())) s.copy_(g);
    if (!comm_hook_) mul_(s, 1.0 / group_->size());  // pre-divide, then SUM-allreduce = mean
    if (opts_.gradient_as_bucket_view) params_[i].set_grad(s);
  }
  mark_ready(i);
}

void Reducer::mark_ready(size_t i) {
  ready_[i] = 1;
  --buckets_[bucket_of_[i]].pending;
  launch_ready_buckets();
}

// Launches full buckets strictly in index order, so every rank issues the same sequence.
void Reducer::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    if (next_bucket_ == 0) first_launch_ = Clock::now();
    const size_t index = next_bucket_++;
    if (group_->size() > 1) launch(index);
  }
}

void Reducer::set_comm_hook(CommHook hook) {
  MINIDL_CHECK(hook != nullptr, "DDP register_comm_hook: the hook is empty");
  MINIDL_CHECK(!comm_hook_,
               "DDP register_comm_hook: a comm hook is already registered (one "
               "per DistributedDataParallel, as in PyTorch)");
  MINIDL_CHECK(!in_iteration_, "DDP register_comm_hook: called during a backward pass");
  comm_hook_ = std::move(hook);
}

void Reducer::launch(size_t index) {
  Bucket& b = buckets_[index];
  const uint64_t before = sent_bytes();
  if (comm_hook_) {
    std::vector<Tensor> params;
    for (size_t i : b.params) params.push_back(params_[i]);
    GradBucket gb(index, index + 1 == buckets_.size(), b.flat, std::move(params), b.offsets,
                  *group_);
    b.future.emplace(comm_hook_(gb));
  } else {
    b.future.emplace(group_->allreduce(b.flat, ReduceOp::sum), b.flat);
  }
  step_bytes_ += int64_t(sent_bytes() - before);
}

void Reducer::wait_bucket(Bucket& b) {
  if (!b.future) return;
  const uint64_t before = sent_bytes();
  Tensor result;
  try {
    result = b.future->wait();
  } catch (const std::exception& e) {
    b.future.reset();
    if (on_failure_) on_failure_(e);
    throw;
  }
  b.future.reset();
  step_bytes_ += int64_t(sent_bytes() - before);
  MINIDL_CHECK(result.defined() && result.numel() == b.flat.numel(), "DDP rank ", group_->rank(),
               ": the comm hook returned ",
               result.defined() ? result.shape_str() : std::string("an undefined tensor"),
               " for a bucket of ", b.flat.numel(), " elements");
  if (result.data_ptr() != b.flat.data_ptr()) {
    NoGradGuard no_grad;
    b.flat.copy_(result.reshape({-1}));
  }
}

void Reducer::wait(Work& work) const {
  try {
    work.wait();
  } catch (const std::exception& e) {
    if (on_failure_) on_failure_(e);
    throw;
  }
}

std::string Reducer::unready_names() const {
  std::string s;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) s += (s.empty() ? "" : ", ") + names_[i];
  return s;
}

void Reducer::finalize_backward() {
  in_iteration_ = false;
  expect_hooks_ = false;
  const auto t_end = Clock::now();
  const bool multi = group_->size() > 1;
  Tensor used_map;
  if (opts_.find_unused_parameters) {
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) {
        if (multi) slot(i).zero_();  // contributes zero to the mean
        mark_ready(i);
      }
    used_map = empty({int64_t(params_.size())}, kInt32);
    for (size_t i = 0; i < params_.size(); ++i) used_map.data_ptr<int32_t>()[i] = used_[i];
    if (multi) wait(*group_->allreduce(used_map, ReduceOp::sum));
  } else if (next_bucket_ < buckets_.size()) {
    for (Bucket& b : buckets_) wait_bucket(b);
    unfinished_ = true;
    unfinished_msg_ = "DistributedDataParallel (rank " + std::to_string(group_->rank()) +
                      "): the previous backward finished without reducing all gradients; "
                      "parameters that got no gradient: " +
                      unready_names() +
                      ". Pass find_unused_parameters=true in DDPOptions if forward does not use "
                      "every parameter, or make the loss depend on all of them";
    return;
  }
  for (Bucket& b : buckets_) wait_bucket(b);
  const auto t_done = Clock::now();
  stats_.comm_seconds = std::chrono::duration<double>(t_done - first_launch_).count();
  // A first bucket launched only here (find_unused_parameters) hides nothing: exposed = comm.
  stats_.exposed_seconds =
      std::chrono::duration<double>(t_done - std::max(t_end, first_launch_)).count();
  ++stats_.steps;
  if (multi) {  // at world size 1 nothing was communicated
    stats_.total_comm_seconds += stats_.comm_seconds;
    stats_.total_exposed_seconds += stats_.exposed_seconds;
    stats_.bytes = step_bytes_;
    stats_.total_bytes += step_bytes_;
  }
  if (multi)
    for (size_t i = 0; i < params_.size(); ++i) {
      if (used_map.defined() && used_map.data_ptr<int32_t>()[i] == 0)
        continue;  // unused everywhere
      Tensor s = slot(i);
      Tensor& g = params_[i].mutable_grad();
      if (opts_.gradient_as_bucket_view)
        params_[i].set_grad(s);
      else if (g.defined())
        g.copy_(s);
      else
        params_[i].set_grad(s.clone());
    }
  if (!rebuilt_) rebuild_due_ = true;
}

void Reducer::shadow_backward() {
  if (group_->size() > 1) {
    // The same collectives as a synchronised backward: a comm hook runs on zero gradients.
    for (size_t k = 0; k < buckets_.size(); ++k) {
      buckets_[k].flat.zero_();
      launch(k);
    }
    if (opts_.find_unused_parameters) {
      Tensor used_map = zeros({int64_t(params_.size())}, kInt32);
      group_->allreduce(used_map, ReduceOp::sum)->wait();
    }
    for (Bucket& b : buckets_) wait_bucket(b);
  }
  if (!rebuilt_) rebuild_due_ = true;
}

}  // namespace minidl::dist
