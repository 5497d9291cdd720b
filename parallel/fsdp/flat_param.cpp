// FlatParamUnit: building the flat parameter from a unit's originals, the all-gather into
// views for a forward (an autograd node whose backward reduce-scatters), freeing and
// re-gathering the memory around the backward, and no_sync's unsharded accumulation.
#include "parallel/fsdp/flat_param.h"

#include <chrono>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "tensor/dispatch.h"

namespace minidl::dist {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

std::string sharding_strategy_name(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::FULL_SHARD:
      return "FULL_SHARD";
    case ShardingStrategy::SHARD_GRAD_OP:
      return "SHARD_GRAD_OP";
    case ShardingStrategy::NO_SHARD:
      break;
  }
  return "NO_SHARD";
}

FlatParamUnit::FlatParamUnit(std::string name, std::vector<Param> params,
                             std::shared_ptr<ProcessGroup> group, ShardingStrategy strategy,
                             std::optional<DType> param_dtype, std::optional<DType> reduce_dtype)
    : name_(std::move(name)),
      params_(std::move(params)),
      group_(std::move(group)),
      strategy_(strategy) {
  MINIDL_CHECK(!params_.empty(), "FSDP unit '", name_, "': no parameters");
  rank_ = group_ ? group_->rank() : 0;
  world_ = group_ ? group_->size() : 1;
  const Tensor& first = params_[0].slots[0].module->parameter_slot(params_[0].slots[0].name);
  const DType dtype = first.dtype();
  const Device device = first.device();
  compute_dtype_ = param_dtype.value_or(dtype);
  reduce_dtype_ = reduce_dtype.value_or(compute_dtype_);
  for (Param& p : params_) {
    const Tensor& t = p.slots[0].module->parameter_slot(p.slots[0].name);
    MINIDL_CHECK(t.dtype() == dtype && t.device() == device, "FSDP unit '", name_,
                 "': parameters must share one dtype and device to be flattened, but '",
                 p.slots[0].fqn, "' is ", t.dtype(), " on ", t.device(), " and '",
                 params_[0].slots[0].fqn, "' is ", dtype, " on ", device);
    p.shape = t.shape();
    p.numel = t.numel();
    p.offset = numel_;
    numel_ += p.numel;
  }
  const int64_t k =
      strategy_ == ShardingStrategy::NO_SHARD ? numel_ : (numel_ + world_ - 1) / world_;
  padded_ = strategy_ == ShardingStrategy::NO_SHARD ? numel_ : k * int64_t(world_);
  NoGradGuard no_grad;
  Tensor full = zeros({padded_}, dtype, device);  // the padding stays zero
  for (const Param& p : params_) {
    const Tensor& t = p.slots[0].module->parameter_slot(p.slots[0].name);
    full.narrow(0, p.offset, p.numel).copy_(t.reshape({-1}));
  }
  flat_param =
      strategy_ == ShardingStrategy::NO_SHARD ? full : full.narrow(0, rank_ * k, k).clone();
  register_parameter("flat_param", &flat_param);
  // Until the first forward the slots hold views without memory (a use outside the unit's
  // forward is an error that says so, not a read of stale values).
  if (strategy_ != ShardingStrategy::NO_SHARD) {
    full_ = compute_dtype_ == dtype ? full : empty({padded_}, compute_dtype_, device);
    set_views(full_);
    full_.storage()->release_data();
  } else {
    set_views(flat_param.detach().to(compute_dtype_));
  }
  if (strategy_ == ShardingStrategy::NO_SHARD && world_ > 1) {
    // DDP's reduction: pre-divide, then sum over the ranks, once the backward filled .grad.
    flat_param.register_post_accumulate_grad_hook([this](Tensor& grad) {
      if (!require_sync) return;
      Tensor wire = grad.dtype() == reduce_dtype_ ? grad : grad.to(reduce_dtype_);
      mul_(wire, 1.0 / world_);
      const auto t0 = std::chrono::steady_clock::now();
      group_->allreduce(wire, ReduceOp::sum)->wait();
      backward_wait_seconds += seconds_since(t0);
      if (!wire.is_same(grad)) grad.copy_(wire);
      ++reductions;
    });
  }
}

void FlatParamUnit::set_views(const Tensor& full) {
  for (const Param& p : params_) {
    Tensor view = full.narrow(0, p.offset, p.numel).view(p.shape);
    for (const Slot& s : p.slots) s.module->parameter_slot(s.name) = view;
  }
}

void FlatParamUnit::prefetch() {
  if (strategy_ == ShardingStrategy::NO_SHARD || world_ == 1) return;
  const int64_t now = epoch ? *epoch : 0;
  if (gather_.work && gather_.epoch == now) return;  // already on the way
  if (gather_.work) gather_.work->wait();            // a stale one: let it finish, drop it
  const int64_t k = flat_param.numel();
  gather_.data = empty({padded_}, compute_dtype_, flat_param.device());
  std::vector<Tensor> outs;
  for (int r = 0; r < world_; ++r) outs.push_back(gather_.data.narrow(0, r * k, k));
  // MixedPrecision: the shard is cast before it travels (half the bytes in bf16).
  gather_.work = group_->allgather(outs, flat_param.detach().to(compute_dtype_));
  gather_.epoch = now;
}

Tensor FlatParamUnit::wait_gathered(double& waited) {
  const bool ready = gather_.work && gather_.epoch == (epoch ? *epoch : 0);
  if (ready) ++prefetched;
  if (!ready) prefetch();
  const auto t0 = std::chrono::steady_clock::now();
  gather_.work->wait();
  waited += seconds_since(t0);
  Tensor all = std::move(gather_.data);
  gather_ = Pending{};
  ++gathers;
  return all;
}

void FlatParamUnit::gather_into(const Tensor& dst, double& waited) {
  // Gathered into a new tensor, then copied by the copy kernel: the destination's version
  // counter must not move (the backward re-gathers into memory its saved views point at).
  Tensor d = dst;
  if (world_ == 1) {  // nothing to gather: the shard is everything
    kernel<Op::copy>(dst.device())(flat_param.detach().to(dst.dtype()), d);
    ++gathers;
    return;
  }
  kernel<Op::copy>(dst.device())(wait_gathered(waited), d);
}

Tensor FlatParamUnit::gather_full() {
  NoGradGuard no_grad;
  if (strategy_ == ShardingStrategy::NO_SHARD) return flat_param.detach().clone();
  if (gather_.work) {  // a prefetch that no backward used may predate an optimizer step
    gather_.work->wait();
    gather_ = Pending{};
  }
  // In the shard's own dtype (MixedPrecision gathers for compute in param_dtype).
  const int64_t k = flat_param.numel();
  Tensor full = empty({padded_}, flat_param.dtype(), flat_param.device());
  if (world_ == 1) return flat_param.detach().clone();
  std::vector<Tensor> outs;
  for (int r = 0; r < world_; ++r) outs.push_back(full.narrow(0, r * k, k));
  group_->allgather(outs, flat_param.detach())->wait();
  ++gathers;
  return full;
}

void FlatParamUnit::unshard_for_forward() {
  if (strategy_ == ShardingStrategy::NO_SHARD) {
    // Differentiable views of the leaf (through a cast under MixedPrecision): gradients land
    // in its .grad.
    set_views(compute_dtype_ == flat_param.dtype() ? flat_param : flat_param.to(compute_dtype_));
    return;
  }
  if (gathered()) full_.storage()->release_data();  // a forward that no backward followed
  Tensor full;
  {
    NoGradGuard no_grad;
    if (world_ > 1) {  // the gathered buffer itself: nothing saved it yet
      full = wait_gathered(forward_wait_seconds);
    } else {
      full = empty({padded_}, compute_dtype_, flat_param.device());
      gather_into(full, forward_wait_seconds);
    }
  }
  std::weak_ptr<Module> weak = weak_from_this();
  autograd::record("FsdpAllGatherBackward", {flat_param}, {&full}, {},
                   [weak](const std::vector<Tensor>& g, const std::vector<Tensor>&) {
                     auto self = std::static_pointer_cast<FlatParamUnit>(weak.lock());
                     MINIDL_CHECK(self != nullptr,
                                  "FSDP: a backward ran after its FullyShardedDataParallel "
                                  "was destroyed");
                     return std::vector<Tensor>{self->reduce_grad(g[0])};
                   });
  full_ = full;
  set_views(full_);
}

void FlatParamUnit::after_forward(const Tensor& output, bool reshard_after_forward) {
  if (strategy_ == ShardingStrategy::NO_SHARD) return;
  const bool backward_comes = output.defined() && output.requires_grad();
  if (!backward_comes) {
    reshard();  // no backward will need them (evaluation, no_grad)
    return;
  }
  if (!reshard_after_forward) return;
  full_.storage()->release_data();
  std::weak_ptr<Module> weak = weak_from_this();
  Tensor out = output;
  out.register_hook([weak](const Tensor&) {
    if (auto self = std::static_pointer_cast<FlatParamUnit>(weak.lock())) self->regather();
    return Tensor();
  });
}

void FlatParamUnit::regather() {
  if (gathered() || !full_.defined()) return;
  full_.storage()->restore_data();
  gather_into(full_, backward_wait_seconds);
  // The unit whose backward comes next gathers meanwhile.
  if (auto next = next_in_backward.lock())
    if (!next->gathered()) next->prefetch();
}

void FlatParamUnit::reshard() {
  if (strategy_ != ShardingStrategy::NO_SHARD && gathered()) full_.storage()->release_data();
}

Tensor FlatParamUnit::reduce_grad(const Tensor& full_grad) {
  Tensor g = full_grad.contiguous();
  if (g.dtype() != reduce_dtype_) g = g.to(reduce_dtype_);  // MixedPrecision's wire dtype
  reshard();  // the backward of this unit is done with the gathered parameters
  if (!require_sync) {
    unsharded_grad_ = unsharded_grad_.defined() ? add(unsharded_grad_, g) : g.clone();
    return Tensor();  // nothing reaches the shard until a synced backward
  }
  if (unsharded_grad_.defined()) {
    g = add(g, unsharded_grad_);
    unsharded_grad_ = Tensor();
  }
  // DDP's averaging: pre-divide, then sum over the ranks (here scattered: each rank gets the
  // sum of its own piece). Dividing the shard after the sum instead rounds differently on 3
  // ranks, and Adam amplifies that past DDP's results.
  g = mul(g, Scalar(1.0 / world_));
  const int64_t k = flat_param.numel();
  std::vector<Tensor> pieces;
  for (int r = 0; r < world_; ++r) pieces.push_back(g.narrow(0, r * k, k).contiguous());
  // Asynchronous: the rest of the backward runs while it communicates; the end-of-backward
  // callback waits and accumulates (the engine gets no gradient for the shard here).
  if (reduce_.work) finish_backward();  // a second backward of one graph (retain_graph)
  reduce_.data = empty({k}, g.dtype(), g.device());
  reduce_.work = group_->reduce_scatter(reduce_.data, pieces, ReduceOp::sum);
  ++reductions;
  std::weak_ptr<Module> weak = weak_from_this();
  autograd::queue_callback([weak] {
    if (auto self = std::static_pointer_cast<FlatParamUnit>(weak.lock())) self->finish_backward();
  });
  return Tensor();
}

void FlatParamUnit::finish_backward() {
  if (!reduce_.work) return;
  const auto t0 = std::chrono::steady_clock::now();
  reduce_.work->wait();
  backward_wait_seconds += seconds_since(t0);
  Tensor out = std::move(reduce_.data);
  reduce_ = Pending{};
  NoGradGuard no_grad;
  if (out.dtype() != flat_param.dtype()) out = out.to(flat_param.dtype());  // into the f32 master
  Tensor& grad = flat_param.mutable_grad();
  if (!grad.defined())
    grad = out;
  else
    add_(grad, out);
}

}  // namespace minidl::dist
