// DistributedDataParallel: construction checks and broadcasts, forward (join notification,
// buffer broadcast, reducer arming) and the Join algorithm for uneven inputs.
#include "parallel/ddp.h"

#include <exception>
#include <iostream>

#include "autograd/grad_mode.h"
#include "parallel/distributed.h"
#include "tensor/ops.h"

namespace minidl::dist {
namespace {

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string describe(const std::string& name, const Tensor& p) {
  return "'" + name + "' " + p.shape_str() + " " + std::string(dtype_name(p.dtype()));
}

void wait_all(std::vector<std::shared_ptr<Work>>& works) {
  for (auto& w : works) w->wait();
  works.clear();
}

}  // namespace

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
  ReducerOptions ro;
  ro.bucket_cap_bytes = int64_t(opts_.bucket_cap_mb * 1024 * 1024);
  ro.first_bucket_bytes = int64_t(opts_.first_bucket_mb * 1024 * 1024);
  ro.find_unused_parameters = opts_.find_unused_parameters;
  ro.gradient_as_bucket_view = opts_.gradient_as_bucket_view;
  reducer_ = Reducer::create(std::move(params), std::move(names), group_, ro);
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

void DistributedDataParallel::broadcast_state(int root) {
  if (group_->size() == 1) return;
  NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> works;
  for (auto& [name, p] : named_parameters()) works.push_back(group_->broadcast(p, root));
  for (auto& [name, b] : named_buffers()) works.push_back(group_->broadcast(b, root));
  wait_all(works);
}

void DistributedDataParallel::broadcast_buffers() {
  if (!opts_.broadcast_buffers || group_->size() == 1) return;
  std::vector<std::shared_ptr<Work>> works;
  for (auto& [name, b] : named_buffers()) works.push_back(group_->broadcast(b, buffer_root_));
  wait_all(works);
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

Tensor DistributedDataParallel::forward(const Tensor& x) {
  const bool sync = require_sync_ && GradMode::is_enabled();
  if (join_enabled_ && group_->size() > 1) {
    exchange_join_state(true, sync);
    ++join_iterations_;
  }
  reducer_->prepare_for_forward(sync);
  broadcast_buffers();
  return module_->forward(x);
}

Join::Join(DistributedDataParallel& ddp) : ddp_(ddp) {
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
