// ZeroRedundancyOptimizer: the cross-rank parameter check, the size-balanced partition, the
// local step on this rank's shard, the owners' coalesced broadcasts, AMP's global skip decision,
// stats and the optimizer factories. State dicts: state_dict.cpp.
#include "parallel/zero/zero_redundancy_optimizer.h"

#include <algorithm>
#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "optim/adam.h"
#include "optim/fused.h"
#include "optim/sgd.h"
#include "parallel/distributed.h"
#include "tensor/error.h"

namespace minidl::dist {

namespace {

double opt_or(const optim::Options& o, const char* name, double fallback) {
  auto it = o.find(name);
  return it == o.end() ? fallback : it->second;
}

// Per parameter: group, dtype, ndim, then up to 8 sizes (a longer shape's extra sizes are
// folded into the last slot).
constexpr int64_t kDescSlots = 11;

std::string describe_desc(const int64_t* d) {
  std::ostringstream os;
  os << "[";
  for (int64_t k = 0; k < std::min<int64_t>(d[2], 8); ++k) os << (k ? ", " : "") << d[3 + k];
  if (d[2] > 8) os << ", ...";
  os << "] " << dtype_name(DType(d[1])) << " in param group " << d[0];
  return os.str();
}

}  // namespace

OptimizerFactory sgd_factory(double lr, double momentum, double dampening, double weight_decay,
                             bool nesterov) {
  return [=](std::vector<optim::ParamGroup> groups) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(std::move(groups), lr, momentum, dampening, weight_decay,
                                        nesterov);
  };
}

OptimizerFactory adam_factory(double lr, std::pair<double, double> betas, double eps,
                              double weight_decay, bool amsgrad) {
  return [=](std::vector<optim::ParamGroup> groups) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::Adam>(std::move(groups), lr, betas, eps, weight_decay, amsgrad);
  };
}

OptimizerFactory adamw_factory(double lr, std::pair<double, double> betas, double eps,
                               double weight_decay, bool amsgrad) {
  return [=](std::vector<optim::ParamGroup> groups) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(std::move(groups), lr, betas, eps, weight_decay, amsgrad);
  };
}

OptimizerFactory optimizer_factory(const std::string& kind, const optim::Options& o) {
  if (kind == "sgd") {
    MINIDL_CHECK(o.count("lr"), "optimizer_factory: SGD needs an `lr` option");
    return sgd_factory(o.at("lr"), opt_or(o, "momentum", 0), opt_or(o, "dampening", 0),
                       opt_or(o, "weight_decay", 0), opt_or(o, "nesterov", 0) != 0);
  }
  const std::pair<double, double> betas{opt_or(o, "beta1", 0.9), opt_or(o, "beta2", 0.999)};
  if (kind == "adam")
    return adam_factory(opt_or(o, "lr", 1e-3), betas, opt_or(o, "eps", 1e-8),
                        opt_or(o, "weight_decay", 0), opt_or(o, "amsgrad", 0) != 0);
  MINIDL_CHECK(kind == "adamw", "optimizer_factory: unknown optimizer `", kind,
               "` (sgd | adam | adamw)");
  return adamw_factory(opt_or(o, "lr", 1e-3), betas, opt_or(o, "eps", 1e-8),
                       opt_or(o, "weight_decay", 1e-2), opt_or(o, "amsgrad", 0) != 0);
}

int64_t optimizer_state_bytes(optim::Optimizer& opt) {
  int64_t bytes = 0;
  for (size_t i = 0; i < opt.num_params(); ++i)
    for (const auto& [name, t] : opt.state(i))
      if (t.defined()) bytes += int64_t(t.nbytes());
  return bytes;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params,
                                                 OptimizerFactory make_local,
                                                 std::shared_ptr<ProcessGroup> group)
    : ZeroRedundancyOptimizer(std::vector<optim::ParamGroup>{optim::ParamGroup(std::move(params))},
                              std::move(make_local), std::move(group)) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<optim::ParamGroup> groups,
                                                 OptimizerFactory make_local,
                                                 std::shared_ptr<ProcessGroup> group)
    : Optimizer(optim::Options{}), group_(group ? std::move(group) : default_group_ptr()) {
  MINIDL_CHECK(make_local, "ZeroRedundancyOptimizer: no optimizer factory given");
  rank_ = group_->rank();
  world_ = group_->size();
  // The wrapper's groups first (duplicates rejected); the options come from the local optimizer.
  for (optim::ParamGroup& g : groups)
    for (const Tensor& p : g.params)
      MINIDL_CHECK(p.defined(), "ZeroRedundancyOptimizer: undefined parameter tensor", where());
  std::vector<optim::Options> given;  // the groups' options as passed
  for (optim::ParamGroup& g : groups) {
    given.push_back(g.options);
    g.options.emplace("lr", 0.0);  // validated by the local optimizer below
    add_param_group(std::move(g));
  }
  check_same_parameters();
  partition();
  // The shard: every group (possibly empty) with the options it was given and this rank's
  // parameters (global index -> position in its group).
  std::vector<optim::ParamGroup> shard;
  for (const optim::Options& o : given) shard.emplace_back(std::vector<Tensor>{}, o);
  size_t idx0 = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i : local_index_[g]) shard[g].params.push_back(groups_[g].params[i - idx0]);
    idx0 += groups_[g].params.size();
  }
  local_ = make_local(std::move(shard));
  MINIDL_CHECK(local_, "ZeroRedundancyOptimizer: the optimizer factory returned null", where());
  MINIDL_CHECK(local_->param_groups().size() == groups_.size(),
               "ZeroRedundancyOptimizer: the local optimizer has ", local_->param_groups().size(),
               " param group(s), expected ", groups_.size(),
               " (the factory must keep the groups it is given)", where());
  for (size_t g = 0; g < groups_.size(); ++g) {
    MINIDL_CHECK(local_->param_groups()[g].params.size() == local_index_[g].size(),
                 "ZeroRedundancyOptimizer: the local optimizer's param group ", g, " has ",
                 local_->param_groups()[g].params.size(), " parameter(s), expected ",
                 local_index_[g].size(), " (the factory must keep the groups it is given)",
                 where());
    groups_[g].options = local_->param_groups()[g].options;
  }
  defaults_ = local_->defaults();
}

std::string ZeroRedundancyOptimizer::where() const {
  return " (rank " + std::to_string(rank_) + " of " + std::to_string(world_) + ")";
}

Device ZeroRedundancyOptimizer::comm_device() const {
  if (group_->backend() == "nccl")
    for (const optim::ParamGroup& g : groups_)
      for (const Tensor& p : g.params)
        if (p.is_cuda()) return p.device();
  return kCPU;
}

// Every rank allgathers (group, dtype, shape) of each parameter and compares them with rank 0's,
// so a mismatch is reported on every rank naming the parameter and both ranks' views.
void ZeroRedundancyOptimizer::check_same_parameters() {
  if (world_ == 1) return;
  std::vector<int64_t> desc;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const Tensor& p : groups_[g].params) {
      int64_t d[kDescSlots] = {int64_t(g), int64_t(p.dtype()), p.dim()};
      for (int64_t k = 0; k < p.dim(); ++k) {
        if (k < 8)
          d[3 + k] = p.size(k);
        else
          d[kDescSlots - 1] = d[kDescSlots - 1] * 1000003 + p.size(k);
      }
      desc.insert(desc.end(), d, d + kDescSlots);
    }
  const Device dev = comm_device();
  const int64_t n = int64_t(desc.size()) / kDescSlots;
  std::vector<Tensor> counts(static_cast<size_t>(world_));
  for (Tensor& c : counts) c = empty({1}, kInt64, dev);
  group_->allgather(counts, full({1}, n, kInt64, dev))->wait();
  std::vector<int64_t> ns(static_cast<size_t>(world_));
  for (int r = 0; r < world_; ++r) ns[size_t(r)] = counts[size_t(r)].item<int64_t>();
  Tensor mine = empty({int64_t(desc.size())}, kInt64);
  std::copy(desc.begin(), desc.end(), mine.data_ptr<int64_t>());
  std::vector<Tensor> lists(static_cast<size_t>(world_));
  for (int r = 0; r < world_; ++r)
    lists[size_t(r)] = empty({ns[size_t(r)] * kDescSlots}, kInt64, dev);
  group_->allgather(lists, mine.to(dev))->wait();
  for (Tensor& l : lists) l = l.to(kCPU);
  const int64_t* d0 = lists[0].data_ptr<int64_t>();
  for (int r = 1; r < world_; ++r) {
    const int64_t* dr = lists[size_t(r)].data_ptr<int64_t>();
    for (int64_t i = 0; i < std::min(ns[0], ns[size_t(r)]); ++i)
      MINIDL_CHECK(std::equal(d0 + i * kDescSlots, d0 + (i + 1) * kDescSlots, dr + i * kDescSlots),
                   "ZeroRedundancyOptimizer: parameter ", i, " is ",
                   describe_desc(d0 + i * kDescSlots), " on rank 0 but ",
                   describe_desc(dr + i * kDescSlots), " on rank ", r,
                   "; every rank must pass the same parameters in the same order", where());
    MINIDL_CHECK(ns[0] == ns[size_t(r)], "ZeroRedundancyOptimizer: rank 0 has ", ns[0],
                 " parameters but rank ", r, " has ", ns[size_t(r)],
                 "; every rank must pass the same parameters", where());
  }
}

// PyTorch's _partition_parameters: per group, parameters by numel descending (stable), each to
// the rank with the smallest total so far (the lowest such rank); totals carry across groups.
void ZeroRedundancyOptimizer::partition() {
  std::vector<int64_t> totals(size_t(world_), 0);
  owner_.clear();
  local_index_.assign(groups_.size(), {});
  size_t idx0 = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<Tensor>& ps = groups_[g].params;
    std::vector<size_t> order(ps.size());
    for (size_t j = 0; j < ps.size(); ++j) order[j] = j;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return ps[a].numel() > ps[b].numel(); });
    owner_.resize(idx0 + ps.size(), 0);
    for (size_t j : order) {
      const int r = int(std::min_element(totals.begin(), totals.end()) - totals.begin());
      owner_[idx0 + j] = r;
      totals[size_t(r)] += ps[j].numel();
    }
    for (size_t j = 0; j < ps.size(); ++j)
      if (owner_[idx0 + j] == rank_) local_index_[g].push_back(idx0 + j);
    idx0 += ps.size();
  }
}

void ZeroRedundancyOptimizer::sync_local_groups() {
  MINIDL_CHECK(groups_.size() == local_index_.size(), "ZeroRedundancyOptimizer: the wrapper has ",
               groups_.size(), " param group(s) but was built with ", local_index_.size(),
               " (add_param_group after construction is not supported)", where());
  std::vector<optim::ParamGroup>& local = local_->param_groups();
  size_t idx0 = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    local[g].options = groups_[g].options;
    for (size_t k = 0; k < local_index_[g].size(); ++k) {
      Tensor& dst = local[g].params[k];
      const Tensor& src = groups_[g].params[local_index_[g][k] - idx0];
      if (!dst.is_same(src)) dst = src;  // e.g. AMP O2 re-pointed the wrapper to fp32 masters
    }
    idx0 += groups_[g].params.size();
  }
}

// One flat buffer per owner rank and (dtype, device), broadcast from the owner; the others copy
// it back into their parameters. All broadcasts are issued before waiting.
void ZeroRedundancyOptimizer::broadcast_params() {
  has_consolidated_ = false;
  consolidated_.clear();
  if (world_ == 1) return;
  NoGradGuard no_grad;
  struct Bucket {
    int owner;
    DType dtype;
    Device device;
    std::vector<Tensor> params;
    Tensor flat;
  };
  std::vector<Bucket> buckets;
  for (int r = 0; r < world_; ++r) {
    size_t i = 0;
    const size_t first = buckets.size();
    for (optim::ParamGroup& g : groups_)
      for (Tensor& p : g.params) {
        if (owner_[i++] != r) continue;
        auto it = std::find_if(buckets.begin() + long(first), buckets.end(), [&](const Bucket& b) {
          return b.dtype == p.dtype() && b.device == p.device();
        });
        if (it == buckets.end())
          it = buckets.insert(buckets.end(), Bucket{r, p.dtype(), p.device(), {}, {}});
        it->params.push_back(p);
      }
  }
  const Device comm = comm_device();
  std::vector<std::shared_ptr<Work>> works;
  for (Bucket& b : buckets) {
    if (b.owner == rank_) {
      std::vector<Tensor> parts;
      for (const Tensor& p : b.params) parts.push_back(p.detach().reshape({-1}));
      b.flat = cat(parts, 0);
      if (comm.is_cuda() && !(b.flat.device() == comm)) b.flat = b.flat.to(comm);
    } else {
      int64_t n = 0;
      for (const Tensor& p : b.params) n += p.numel();
      b.flat = empty({n}, b.dtype, comm.is_cuda() ? comm : b.device);
    }
    works.push_back(group_->broadcast(b.flat, b.owner));
  }
  for (auto& w : works) w->wait();
  for (Bucket& b : buckets) {
    if (b.owner == rank_) continue;
    int64_t off = 0;
    for (Tensor& p : b.params) {
      p.copy_(b.flat.narrow(0, off, p.numel()).view(p.shape()));
      off += p.numel();
    }
  }
}

void ZeroRedundancyOptimizer::step() {
  NoGradGuard no_grad;
  sync_local_groups();
  local_->step();
  broadcast_params();
}

void ZeroRedundancyOptimizer::step_with_scaling(const Tensor& grad_scale, const Tensor& found_inf) {
  NoGradGuard no_grad;
  MINIDL_CHECK(found_inf.defined() && found_inf.numel() == 1,
               "ZeroRedundancyOptimizer.step_with_scaling: found_inf must be a one-element tensor",
               where());
  if (world_ > 1) {
    // In place: GradScaler keeps this tensor and reads it for its decision and update().
    Tensor f = found_inf.reshape({1});
    MINIDL_CHECK(f.shares_storage(found_inf), "ZeroRedundancyOptimizer: found_inf is not a view");
    const Device comm = comm_device();
    if (f.device() == comm || !comm.is_cuda()) {
      group_->allreduce(f, ReduceOp::max)->wait();
    } else {
      Tensor staged = f.to(comm);
      group_->allreduce(staged, ReduceOp::max)->wait();
      f.copy_(staged);
    }
  }
  if (found_inf.item<double>() != 0) return;  // every rank skips: parameters and state unchanged
  sync_local_groups();
  if (local_->supports_amp_scaling()) {
    local_->step_with_scaling(grad_scale, found_inf);  // unscales its shard's grads on the device
  } else {
    if (grad_scale.defined()) {  // GradScaler::unscale_'s arithmetic, over every parameter's grad
      const Tensor inv =
          div(ones({}, kFloat64, grad_scale.device()), grad_scale.to(kFloat64)).to(kFloat32);
      std::vector<std::pair<Device, std::vector<Tensor>>> grads;  // by device
      for (const optim::ParamGroup& g : groups_)
        for (const Tensor& p : g.params) {
          if (!p.grad().defined()) continue;
          auto it = std::find_if(grads.begin(), grads.end(),
                                 [&](const auto& e) { return e.first == p.grad().device(); });
          if (it == grads.end())
            it = grads.insert(grads.end(), std::pair{p.grad().device(), std::vector<Tensor>{}});
          it->second.push_back(p.grad());
        }
      for (auto& [dev, gs] : grads) {
        Tensor unused = zeros({}, kFloat32, dev);
        amp::non_finite_check_and_unscale_(gs, unused, dev == inv.device() ? inv : inv.to(dev));
      }
    }
    local_->step();
  }
  broadcast_params();
}

ZeroStats ZeroRedundancyOptimizer::stats() const {
  ZeroStats s;
  s.rank = rank_;
  s.world_size = world_;
  s.state_bytes = optimizer_state_bytes(*local_);
  size_t i = 0;
  std::vector<std::pair<int, std::pair<DType, Device>>> keys;
  for (const optim::ParamGroup& g : groups_)
    for (const Tensor& p : g.params) {
      const int r = owner_[i++];
      const int64_t bytes = int64_t(p.nbytes());
      s.params_total += 1;
      s.param_bytes_total += bytes;
      if (r == rank_) {
        s.params_owned += 1;
        s.param_bytes_owned += bytes;
      }
      std::pair<int, std::pair<DType, Device>> key{r, {p.dtype(), p.device()}};
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
  if (world_ > 1) {
    s.broadcast_bytes_per_step = s.param_bytes_total;
    s.broadcasts_per_step = int64_t(keys.size());
  }
  return s;
}

}  // namespace minidl::dist
