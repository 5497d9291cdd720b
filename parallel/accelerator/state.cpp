// Accelerator (see accelerator.h): collectives that are identities outside ddp, rank-0 printing,
// save_state / load_state with every rank's RNG stream, and the prepared data loader.
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <filesystem>

#include "optim/amp.h"
#include "parallel/accelerator/accelerator.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/distributed.h"
#include "parallel/fsdp/checkpoint.h"
#include "tensor/safetensors.h"
#include "parallel/zero/zero_redundancy_optimizer.h"
#include "autograd/grad_mode.h"
#include "optim/checkpoint.h"
#include "autograd/ops.h"

namespace minidl {

namespace {

// Every rank's shape of t (collective): [world][dim].
std::vector<Shape> all_shapes(const Tensor& t) {
  dist::ProcessGroup& pg = dist::default_group();
  const int world = pg.size();
  Tensor dims = tensor(std::vector<int64_t>{t.dim()});
  std::vector<Tensor> all_dims;
  for (int r = 0; r < world; ++r) all_dims.push_back(empty({1}, kInt64));
  pg.allgather(all_dims, dims)->wait();
  for (int r = 0; r < world; ++r)
    MINIDL_CHECK(all_dims[size_t(r)].item<int64_t>() == t.dim(), "Accelerator: rank ",
                 dist::get_rank(), " has a ", t.dim(), "-d tensor but rank ", r, " has a ",
                 all_dims[size_t(r)].item<int64_t>(), "-d one");
  Tensor mine = tensor(std::vector<int64_t>(t.shape().begin(), t.shape().end()));
  if (t.dim() == 0) return std::vector<Shape>(size_t(world));
  std::vector<Tensor> shapes;
  for (int r = 0; r < world; ++r) shapes.push_back(empty({t.dim()}, kInt64));
  pg.allgather(shapes, mine)->wait();
  std::vector<Shape> out;
  for (const Tensor& s : shapes) {
    const int64_t* v = s.data_ptr<int64_t>();
    out.emplace_back(v, v + t.dim());
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- collectives

Tensor Accelerator::gather(const Tensor& t) const {
  MINIDL_CHECK(t.defined() && t.dim() >= 1,
               "Accelerator::gather: expected a tensor with a "
               "batch dimension");
  if (!distributed()) return t;
  NoGradGuard no_grad;
  if (t.dtype() == kBool) return gather(t.to(kUInt8)).to(kBool);  // as gather_for_metrics
  std::vector<Shape> shapes = all_shapes(t);
  for (size_t r = 0; r < shapes.size(); ++r)
    MINIDL_CHECK(shapes[r] == t.shape(), "Accelerator::gather: rank ", rank_, " has shape ",
                 shape_str(t.shape()), " but rank ", r, " has ", shape_str(shapes[r]),
                 " (pad_across_processes first, or use gather_for_metrics)");
  std::vector<Tensor> parts;
  for (int r = 0; r < world_size_; ++r) parts.push_back(empty(t.shape(), t.dtype(), t.device()));
  dist::default_group().allgather(parts, t.contiguous())->wait();
  return cat(parts, 0);
}

Tensor Accelerator::gather_for_metrics(const Tensor& t, int64_t dataset_size) const {
  if (!distributed()) {
    MINIDL_CHECK(t.defined() && t.dim() >= 1,
                 "Accelerator::gather_for_metrics: expected a "
                 "tensor with a batch dimension");
    return t.narrow(0, 0, std::min(dataset_size, t.size(0)));
  }
  return dist::gather_for_metrics(t, dataset_size);
}

Tensor Accelerator::pad_across_processes(const Tensor& t, int64_t dim, double pad_value,
                                         bool pad_first) const {
  MINIDL_CHECK(t.defined() && t.dim() >= 1,
               "Accelerator::pad_across_processes: expected a "
               "tensor with at least one dimension");
  const int64_t d = dim < 0 ? dim + t.dim() : dim;
  MINIDL_CHECK(d >= 0 && d < t.dim(), "Accelerator::pad_across_processes: dim ", dim,
               " out of range for shape ", shape_str(t.shape()));
  if (!distributed()) return t;
  NoGradGuard no_grad;
  int64_t longest = 0;
  for (const Shape& s : all_shapes(t)) longest = std::max(longest, s[size_t(d)]);
  if (longest == t.size(d)) return t;
  Shape pad_shape = t.shape();
  pad_shape[size_t(d)] = longest - t.size(d);
  Tensor pad = full(pad_shape, pad_value, t.dtype(), t.device());
  return pad_first ? cat({pad, t}, d) : cat({t, pad}, d);
}

Tensor Accelerator::reduce(const Tensor& t, const std::string& op) const {
  MINIDL_CHECK(op == "sum" || op == "mean", "Accelerator::reduce: op must be sum or mean, got '",
               op, "'");
  NoGradGuard no_grad;
  Tensor out = t.detach().clone();
  if (!distributed()) return out;
  dist::default_group().allreduce(out)->wait();
  if (op == "mean") out = div(out, double(world_size_));
  return out;
}

double Accelerator::reduce(double value, const std::string& op) const {
  MINIDL_CHECK(op == "sum" || op == "mean", "Accelerator::reduce: op must be sum or mean, got '",
               op, "'");
  if (!distributed()) return value;
  return op == "sum" ? dist::all_reduce_sum(value) : dist::all_reduce_mean(value);
}

void Accelerator::wait_for_everyone() const {
  if (distributed()) dist::barrier();
}

void Accelerator::print(const std::string& text) const {
  dist::print_main(text);
}

void Accelerator::printf(const char* fmt, ...) const {
  va_list args;
  va_start(args, fmt);
  dist::vprintf_main(fmt, args);
  va_end(args);
}

std::string Accelerator::peak_memory_summary() const {
  auto per_device =
      dp_ ? dp_->memory_per_device() : std::vector{std::pair{device_, memory_stats(device_)}};
  std::string out;
  for (const auto& [dev, stats] : per_device) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s %.1f MiB", out.empty() ? "" : ", ", dev.str().c_str(),
                  double(stats.peak) / (1 << 20));
    out += buf;
  }
  return out;
}

// ---------------------------------------------------------------- state

void Accelerator::save_state(const std::string& path, std::map<std::string, std::string> meta) {
  MINIDL_CHECK(model_, "Accelerator::save_state: prepare() has not been called");
  // Every rank's default-generator state, gathered onto rank 0 (collective).
  Generator& g = default_generator();
  Tensor mine = tensor(std::vector<int64_t>{int64_t(g.seed()), int64_t(g.offset())});
  std::vector<Tensor> all{mine};
  if (distributed()) {
    all.clear();
    for (int r = 0; r < world_size_; ++r) all.push_back(zeros({2}, kInt64));
    dist::default_group().allgather(all, mine)->wait();
  }
  for (size_t r = 0; r < all.size(); ++r) {
    const int64_t* v = all[r].data_ptr<int64_t>();
    meta["rng.rank." + std::to_string(r)] =
        std::to_string(uint64_t(v[0])) + ":" + std::to_string(uint64_t(v[1]));
  }
  for (size_t i = 0; i < loaders_.size(); ++i)
    meta["accelerator.loader." + std::to_string(i) + ".epoch"] =
        std::to_string(loaders_[i]->epoch());
  meta["accelerator.optimizer_steps"] = std::to_string(optimizer_steps_);
  meta["accelerator.mode"] = mode_;
  meta["accelerator.world_size"] = std::to_string(world_size_);
  meta["accelerator.amp"] =
      amp_ ? opts_.amp + " " + std::string(amp::opt_level_name(amp_->opt_level()))
           : std::string("off");
  if (fsdp_) {
    // The shards (model and optimizer) first, each rank its own file; then rank 0's file with
    // the rest, whose presence marks the checkpoint complete.
    const std::string shards = path + ".shards";
    dist::save_sharded_checkpoint(shards, *fsdp_, opt_);
    meta["accelerator.fsdp"] = opts_.fsdp;
    meta["fsdp.shards"] = std::filesystem::path(shards).filename().string();
    // The full weights too (gathered, collective), under the plain model's names: the file
    // loads into a plain model (sampling, evaluation, PyTorch) like any other checkpoint.
    const nn::StateDict full = fsdp_->full_state_dict();
    dist::save_on_main([&] {
      std::map<std::string, Tensor> amp_state;
      if (amp_) amp_state = amp_->state_dict();
      nn::save_checkpoint(path, full, nullptr, scheduler_, meta, amp_ ? &amp_state : nullptr);
    });
    return;
  }
  // A sharded optimizer's state comes together on rank 0 first (collective).
  if (auto* zero = dynamic_cast<dist::ZeroRedundancyOptimizer*>(opt_))
    zero->consolidate_state_dict(0);
  // Rank 0 writes; every rank waits for the complete file and fails if the write failed.
  dist::save_on_main([&] {
    std::map<std::string, Tensor> amp_state;
    if (amp_) amp_state = amp_->state_dict();
    nn::save_checkpoint(path, *model_, opt_, scheduler_, meta, amp_ ? &amp_state : nullptr);
  });
}

std::map<std::string, std::string> Accelerator::load_state(const std::string& path) {
  MINIDL_CHECK(model_, "Accelerator::load_state: prepare() has not been called");
  std::map<std::string, Tensor> amp_state;
  // Whether an FSDP run wrote it decides where the model and optimizer are (the header only).
  const SafetensorsMetadata head = SafetensorsFile(path).metadata();
  const auto shards = head.find("fsdp.shards");
  std::map<std::string, std::string> meta;
  if (fsdp_) {
    MINIDL_CHECK(shards != head.end(), "checkpoint '", path,
                 "' was written without FSDP (its model and optimizer are whole): resume it "
                 "without fsdp, or load its weights with dist::load_full_state_dict");
    const std::string dir = (std::filesystem::path(path).parent_path() / shards->second).string();
    dist::load_sharded_checkpoint(dir, *fsdp_, opt_);  // any earlier world size
    // The rest from rank 0's file; its full weights are for plain-model readers (not strict:
    // no module here takes them).
    nn::Sequential no_model;
    meta = nn::load_checkpoint(path, no_model, nullptr, scheduler_, /*strict=*/false,
                               amp_ ? &amp_state : nullptr);
  } else {
    MINIDL_CHECK(
        shards == head.end(), "checkpoint '", path, "' was written by an FSDP run (",
        head.count("accelerator.fsdp") ? head.at("accelerator.fsdp") : std::string("?"),
        "; model and optimizer sharded in ", shards->second, "): resume it with fsdp (e.g. --fsdp ",
        head.count("accelerator.fsdp") ? head.at("accelerator.fsdp") : std::string("full"), ")");
    meta = nn::load_checkpoint(path, *model_, opt_, scheduler_, true, amp_ ? &amp_state : nullptr);
  }
  if (amp_) {
    if (amp_state.empty()) {
      if (is_main_process())
        std::fprintf(stderr,
                     "warning: checkpoint '%s' has no AMP state; starting --amp %s with a fresh "
                     "loss scaler\n",
                     path.c_str(), opts_.amp.c_str());
      amp_->reset_masters_from_model();
    } else {
      amp_->load_state_dict(amp_state);
    }
  }
  // load_checkpoint restored the writer's (rank 0's) generator: take this rank's own stream.
  auto it = meta.find("rng.rank." + std::to_string(rank_));
  if (it != meta.end()) {
    uint64_t seed = 0, offset = 0;
    MINIDL_CHECK(std::sscanf(it->second.c_str(), "%" SCNu64 ":%" SCNu64, &seed, &offset) == 2,
                 "checkpoint '", path, "': metadata ", it->first, "='", it->second,
                 "' is not <seed>:<offset>");
    default_generator().set_state(seed, offset);
  } else if (rank_ != 0) {
    std::fprintf(stderr,
                 "warning: rank %d: checkpoint '%s' has no RNG state for this rank; dropout "
                 "masks will differ from an uninterrupted run\n",
                 rank_, path.c_str());
  }
  for (size_t i = 0; i < loaders_.size(); ++i) {
    auto e = meta.find("accelerator.loader." + std::to_string(i) + ".epoch");
    if (e != meta.end()) loaders_[i]->epoch_ = std::stoll(e->second);
  }
  if (auto s = meta.find("accelerator.optimizer_steps"); s != meta.end())
    optimizer_steps_ = std::stoll(s->second);
  micro_ = 0, backward_done_ = false;
  return meta;
}

// ---------------------------------------------------------------- prepared loader

PreparedLoader::~PreparedLoader() {
  if (!acc_) return;
  auto& v = acc_->loaders_;
  v.erase(std::remove(v.begin(), v.end(), this), v.end());
}

PreparedLoader::Iterator PreparedLoader::begin() {
  ++epoch_;
  loader_->start_epoch(epoch_);  // sampler order = f(seed, epoch, rank)
  if (acc_) acc_->end_of_epoch_ = false;
  return Iterator(this, false);
}

PreparedLoader::Iterator::Iterator(PreparedLoader* owner, bool end)
    : owner_(end ? nullptr : owner) {
  if (owner_) fetch();
}

PreparedLoader::Iterator& PreparedLoader::Iterator::operator++() {
  fetch();
  return *this;
}

void PreparedLoader::Iterator::fetch() {
  if (!owner_->loader_->next(batch_)) {
    owner_ = nullptr;
    return;
  }
  Accelerator* acc = owner_->acc_;
  if (acc) {
    const Device d = acc->device();
    if (batch_.data.defined() && batch_.data.device() != d) batch_.data = batch_.data.to(d);
    if (batch_.target.defined() && batch_.target.device() != d) batch_.target = batch_.target.to(d);
    // The epoch's last batch closes an accumulation window early.
    acc->end_of_epoch_ = ++index_ == owner_->loader_->size();
  }
}

}  // namespace minidl
