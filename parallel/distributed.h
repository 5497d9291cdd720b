// torch.distributed-style global state and helpers: init_process_group / destroy, the default
// group, rank-0-only printing and saving helpers, metric reductions that count every sample once.
#pragma once
#include <chrono>
#include <cstdarg>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallel/process_group/process_group.h"
#include "parallel/rendezvous/rendezvous.h"

namespace minidl::dist {

struct InitOptions {
  std::string backend = "auto";        // gloo | nccl | auto (nccl when CUDA is available)
  std::string init_method = "env://";  // env:// | tcp://host:port | file:///path
  int rank = -1, world_size = -1;      // -1: from init_method / environment
  std::chrono::milliseconds timeout = std::chrono::minutes(5);  // rendezvous and collectives
  bool debug = false;
  // Stall inspector warning time (see ProcessGroupOptions::stall_warn; 0: off; unset:
  // MINIDL_STALL_WARN seconds, else 60 s).
  std::optional<std::chrono::milliseconds> stall_warn = std::nullopt;
};

// Creates a group of backend "gloo" or "nccl" over `store` (all ranks call it together).
std::shared_ptr<ProcessGroup> make_process_group(const std::string& backend,
                                                 std::shared_ptr<Store> store, int rank,
                                                 int world_size,
                                                 const ProcessGroupOptions& options = {});

// Rendezvous + default process group. Throws on a second call without destroy_process_group().
void init_process_group(const InitOptions& options = {});
void destroy_process_group();
bool is_initialized();
// The default group (throws when not initialised).
ProcessGroup& default_group();
std::shared_ptr<ProcessGroup> default_group_ptr();
const RendezvousInfo& rendezvous_info();

// Without an initialised group these act as a single process: rank 0 of 1.
int get_rank();
int get_world_size();
int get_local_rank();
bool is_main_process();  // global rank 0
// Waits for every rank of the default group (a no-op without one, unlike the collectives).
void barrier();

// torch.distributed's collectives on the default group (or `group`), in place as in PyTorch.
// async_op = false waits and returns the finished Work; true returns it to wait() on. They
// throw when no group is initialised (PyTorch: "Default process group has not been
// initialized"). Tensors must be contiguous and on the group's device (CPU for gloo).
std::shared_ptr<Work> all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::sum,
                                 ProcessGroup* group = nullptr, bool async_op = false);
// tensor = rank src's tensor.
std::shared_ptr<Work> broadcast(Tensor& tensor, int src, ProcessGroup* group = nullptr,
                                bool async_op = false);
// tensor_list[r] = rank r's tensor; an empty tensor_list is filled with world_size tensors
// shaped like `tensor`.
std::shared_ptr<Work> all_gather(std::vector<Tensor>& tensor_list, const Tensor& tensor,
                                 ProcessGroup* group = nullptr, bool async_op = false);
// output = op over ranks of input_list[rank] (input_list.size() == world_size).
std::shared_ptr<Work> reduce_scatter(Tensor& output, const std::vector<Tensor>& input_list,
                                     ReduceOp op = ReduceOp::sum, ProcessGroup* group = nullptr,
                                     bool async_op = false);

// Print on global rank 0 only, then flush stdout (print_main adds a newline, like Python's
// print; printf_main prints exactly its format). Not collective: other ranks return at once.
void print_main(const std::string& text);
void printf_main(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void vprintf_main(const char* fmt, va_list args);
// Rank 0 runs `write` (e.g. saving a checkpoint); then, collectively, every rank learns
// whether it succeeded. On failure every rank throws: rank 0 rethrows its own exception, the
// others a minidl::Error quoting it. On success all ranks return after rank 0's write has
// finished (a barrier: the file is complete before anyone goes on). Without an initialised
// group it just runs `write`. Every rank must call it.
void save_on_main(const std::function<void()>& write);

// Mean of `value` over ranks weighted by `count` (e.g. a loss averaged over `count` samples
// on each rank): sum(value*count) / sum(count). Returns value on a single process.
double all_reduce_mean(double value, double count = 1);
// Sum of a scalar over ranks.
double all_reduce_sum(double value);

// Gathers every rank's t (dim 0 may differ) onto all ranks, concatenated in DistributedSampler
// order (sample i of the dataset at position i), dropping the sampler's padding so each of the
// dataset's `dataset_size` samples counts exactly once. t:[n_r, ...] -> [dataset_size, ...].
Tensor gather_for_metrics(const Tensor& t, int64_t dataset_size);

// Per-rank seed for (seed, rank, worker): distinct streams, reproducible for a given layout.
uint64_t rank_seed(uint64_t seed, int rank, int worker = 0);

}  // namespace minidl::dist
