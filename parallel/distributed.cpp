// torch.distributed-style global state: init_process_group / destroy_process_group, the
// default group, single-process fallbacks for rank queries, rank-0 printing and saving, and
// metric helpers (all_reduce_mean, gather_for_metrics) that count every sample exactly once.
#include "parallel/distributed.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>

#include "autograd/grad_mode.h"
#include "parallel/gloo/process_group_gloo.h"
#include "parallel/nccl/process_group_nccl.h"
#include "tensor/error.h"
#include "autograd/ops.h"

namespace minidl::dist {

namespace {

struct State {
  std::mutex mu;
  RendezvousInfo info;
  std::shared_ptr<ProcessGroup> group;
};

State& state() {
  static State s;
  return s;
}

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

std::shared_ptr<ProcessGroup> make_process_group(const std::string& backend,
                                                 std::shared_ptr<Store> store, int rank,
                                                 int world_size,
                                                 const ProcessGroupOptions& options) {
  MINIDL_CHECK(store != nullptr, "make_process_group: the store is null");
  MINIDL_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "make_process_group: rank ", rank,
               " is not in [0, ", world_size, ")");
  MINIDL_CHECK(options.timeout.count() > 0, "make_process_group: the timeout must be positive");
  if (backend == "gloo")
    return make_gloo_process_group(std::move(store), rank, world_size, options);
  if (backend == "nccl")
    return make_nccl_process_group(std::move(store), rank, world_size, options);
  MINIDL_FAIL("make_process_group: unknown backend '", backend, "' (expected gloo or nccl)");
}

void init_process_group(const InitOptions& options) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  MINIDL_CHECK(s.group == nullptr,
               "init_process_group: the default process group is already initialised "
               "(call destroy_process_group() first)");
  std::string backend = options.backend;
  if (backend == "auto") backend = (cuda_is_available() && nccl_available()) ? "nccl" : "gloo";
  MINIDL_CHECK(backend == "gloo" || backend == "nccl", "init_process_group: unknown backend '",
               backend, "' (expected gloo, nccl or auto)");
  RendezvousInfo info =
      rendezvous(options.init_method, RendezvousOptions{.rank = options.rank,
                                                        .world_size = options.world_size,
                                                        .timeout = options.timeout});
  ProcessGroupOptions pg_options;
  pg_options.timeout = options.timeout;
  pg_options.debug = options.debug;
  pg_options.stall_warn = options.stall_warn;
  s.group = make_process_group(backend, info.store, info.rank, info.world_size, pg_options);
  s.info = std::move(info);
}

void destroy_process_group() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.group.reset();  // joins the communication thread before the store goes away
  s.info = RendezvousInfo{};
}

bool is_initialized() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.group != nullptr;
}

std::shared_ptr<ProcessGroup> default_group_ptr() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  MINIDL_CHECK(s.group != nullptr,
               "the default process group is not initialised (call init_process_group() first)");
  return s.group;
}

ProcessGroup& default_group() {
  return *default_group_ptr();
}

const RendezvousInfo& rendezvous_info() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  MINIDL_CHECK(s.group != nullptr,
               "rendezvous_info: the default process group is not "
               "initialised (call init_process_group() first)");
  return s.info;
}

int get_rank() {
  return is_initialized() ? default_group().rank() : 0;
}

int get_world_size() {
  return is_initialized() ? default_group().size() : 1;
}

int get_local_rank() {
  if (is_initialized()) return rendezvous_info().local_rank;
  const int env = read_launch_env().local_rank;  // e.g. to pick a GPU before init
  return env >= 0 ? env : 0;
}

bool is_main_process() {
  return get_rank() == 0;
}

void barrier() {
  if (is_initialized()) default_group().barrier()->wait();
}

namespace {
ProcessGroup& group_or_default(ProcessGroup* group, const char* op) {
  if (group != nullptr) return *group;
  MINIDL_CHECK(is_initialized(), "dist::", op,
               ": Default process group has not been initialized, please make sure to call "
               "dist::init_process_group() (or pass a group)");
  return default_group();
}
std::shared_ptr<Work> finish(std::shared_ptr<Work> work, bool async_op) {
  if (!async_op) work->wait();
  return work;
}
}  // namespace

std::shared_ptr<Work> all_reduce(Tensor& tensor, ReduceOp op, ProcessGroup* group, bool async_op) {
  ProcessGroup& g = group_or_default(group, "all_reduce");
  return finish(g.allreduce(tensor, op), async_op);
}

std::shared_ptr<Work> broadcast(Tensor& tensor, int src, ProcessGroup* group, bool async_op) {
  ProcessGroup& g = group_or_default(group, "broadcast");
  MINIDL_CHECK(src >= 0 && src < g.size(), "dist::broadcast: src ", src,
               " is not a rank of the group (world size ", g.size(), ")");
  return finish(g.broadcast(tensor, src), async_op);
}

std::shared_ptr<Work> all_gather(std::vector<Tensor>& tensor_list, const Tensor& tensor,
                                 ProcessGroup* group, bool async_op) {
  ProcessGroup& g = group_or_default(group, "all_gather");
  if (tensor_list.empty())
    for (int r = 0; r < g.size(); ++r)
      tensor_list.push_back(empty(tensor.shape(), tensor.dtype(), tensor.device()));
  MINIDL_CHECK(int(tensor_list.size()) == g.size(), "dist::all_gather: tensor_list has ",
               tensor_list.size(), " tensors, but the group has ", g.size(), " ranks");
  return finish(g.allgather(tensor_list, tensor), async_op);
}

std::shared_ptr<Work> reduce_scatter(Tensor& output, const std::vector<Tensor>& input_list,
                                     ReduceOp op, ProcessGroup* group, bool async_op) {
  ProcessGroup& g = group_or_default(group, "reduce_scatter");
  MINIDL_CHECK(int(input_list.size()) == g.size(), "dist::reduce_scatter: input_list has ",
               input_list.size(), " tensors, but the group has ", g.size(), " ranks");
  return finish(g.reduce_scatter(output, input_list, op), async_op);
}

void print_main(const std::string& text) {
  if (!is_main_process()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void printf_main(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vprintf_main(fmt, args);
  va_end(args);
}

void vprintf_main(const char* fmt, va_list args) {
  if (!is_main_process()) return;
  std::vprintf(fmt, args);
  std::fflush(stdout);
}

// Rank 0 broadcasts the length of its error message (0: success), then the message itself.
void save_on_main(const std::function<void()>& write) {
  if (!is_initialized()) return write();
  std::shared_ptr<ProcessGroup> pg = default_group_ptr();
  std::string error;
  std::exception_ptr own;
  if (pg->rank() == 0) {
    try {
      write();
    } catch (const std::exception& e) {
      own = std::current_exception();
      error = *e.what() ? e.what() : "an exception with an empty message";
    } catch (...) {
      own = std::current_exception();
      error = "a non-standard exception";
    }
  }
  Tensor len = full({1}, int64_t(error.size()), kInt64);
  pg->broadcast(len, 0)->wait();
  const int64_t n = len.data_ptr<int64_t>()[0];
  if (n == 0) return;
  Tensor msg = empty({n}, kUInt8);
  if (pg->rank() == 0) std::memcpy(msg.data_ptr(), error.data(), error.size());
  pg->broadcast(msg, 0)->wait();
  if (own) std::rethrow_exception(own);
  MINIDL_FAIL("save_on_main: the write on rank 0 failed, so rank ", pg->rank(), " of ", pg->size(),
              " stops too: ", std::string(static_cast<const char*>(msg.data_ptr()), size_t(n)));
}

double all_reduce_mean(double value, double count) {
  MINIDL_CHECK(count >= 0, "all_reduce_mean: negative count ", count);
  if (!is_initialized()) return value;
  Tensor t = tensor(std::vector<double>{value * count, count});
  default_group().allreduce(t, ReduceOp::sum)->wait();
  const double total = t.at({1});
  MINIDL_CHECK(total > 0, "all_reduce_mean: the counts sum to ", total, " over ", get_world_size(),
               " ranks; nothing to average");
  return t.at({0}) / total;
}

double all_reduce_sum(double value) {
  if (!is_initialized()) return value;
  Tensor t = tensor(std::vector<double>{value});
  default_group().allreduce(t, ReduceOp::sum)->wait();
  return t.at({0});
}

Tensor gather_for_metrics(const Tensor& t, int64_t dataset_size) {
  MINIDL_CHECK(t.defined() && t.dim() >= 1,
               "gather_for_metrics: expected a tensor with a batch "
               "dimension");
  MINIDL_CHECK(dataset_size >= 0, "gather_for_metrics: negative dataset_size ", dataset_size);
  NoGradGuard no_grad;
  if (!is_initialized()) return t.narrow(0, 0, std::min(dataset_size, t.size(0))).contiguous();
  // The collectives move bytes, not bools: e.g. per-sample "correct" flags go as u8.
  if (t.dtype() == kBool) return gather_for_metrics(t.to(kUInt8), dataset_size).to(kBool);
  ProcessGroup& pg = default_group();
  const int world = pg.size();
  // Every rank's sample count first (uneven when the sampler drops or the last batch is short).
  Tensor mine = tensor(std::vector<int64_t>{t.size(0)});
  std::vector<Tensor> counts;
  for (int r = 0; r < world; ++r) counts.push_back(empty({1}, kInt64));
  pg.allgather(counts, mine)->wait();
  Tensor input = t.contiguous();
  std::vector<Tensor> parts;
  std::vector<int64_t> offset(size_t(world) + 1, 0);
  for (int r = 0; r < world; ++r) {
    Shape shape = t.shape();
    shape[0] = counts[size_t(r)].item<int64_t>();
    parts.push_back(empty(shape, t.dtype(), t.device()));
    offset[size_t(r) + 1] = offset[size_t(r)] + shape[0];
  }
  pg.allgather(parts, input)->wait();
  // DistributedSampler (shuffle=false): rank r's i-th sample is dataset index i*R + r; indices
  // past dataset_size are the sampler's padding.
  std::vector<int64_t> index(static_cast<size_t>(dataset_size));
  for (int64_t p = 0; p < dataset_size; ++p) {
    const int64_t r = p % world, i = p / world;
    const int64_t have = offset[size_t(r) + 1] - offset[size_t(r)];
    MINIDL_CHECK(i < have, "gather_for_metrics: dataset index ", p, " should be sample ", i,
                 " of rank ", r, ", which has only ", have, " samples (dataset_size ", dataset_size,
                 ", ", world, " ranks)");
    index[size_t(p)] = offset[size_t(r)] + i;
  }
  return index_select(cat(parts, 0), 0, tensor(index).to(t.device()));
}

uint64_t rank_seed(uint64_t seed, int rank, int worker) {
  uint64_t z = splitmix64(seed);
  z = splitmix64(z ^ (uint64_t(uint32_t(rank)) + 1));
  return splitmix64(z ^ ((uint64_t(uint32_t(worker)) + 1) << 32));
}

}  // namespace minidl::dist
