// FSDP checkpoints: per-rank shard files with the layout in their metadata, resharding to any
// world size on load (parameters and the optimizer's per-parameter state), and loading a
// plain model's full state dict into the shards.
#include "parallel/fsdp/checkpoint.h"

#include <filesystem>
#include <regex>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "tensor/safetensors.h"

namespace minidl::dist {
namespace {

std::string shard_file(const std::string& dir, int rank, int world) {
  return dir + "/shard-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".safetensors";
}

// This rank's piece [rank*k, (rank+1)*k) of `full` ([numel]), zero-padded past numel.
Tensor cut_shard(const Tensor& full, int64_t k, int rank) {
  Tensor out = zeros({k}, full.dtype(), full.device());
  const int64_t begin = std::min<int64_t>(int64_t(rank) * k, full.numel());
  const int64_t end = std::min<int64_t>(begin + k, full.numel());
  if (end > begin) out.narrow(0, 0, end - begin).copy_(full.narrow(0, begin, end - begin));
  return out;
}

// The optimizer's global index of each unit's flat parameter (it must hold all of them).
std::vector<size_t> optimizer_indices(const optim::Optimizer& opt, FullyShardedDataParallel& fsdp,
                                      const char* op) {
  std::vector<size_t> idx;
  for (const auto& u : fsdp.units()) {
    size_t i = 0;
    bool found = false;
    for (const auto& g : opt.param_groups()) {
      for (const Tensor& p : g.params) {
        if (p.is_same(u->flat_param)) {
          found = true;
          break;
        }
        ++i;
      }
      if (found) break;
    }
    MINIDL_CHECK(found, op, ": the optimizer does not hold the flat parameter of unit '",
                 u->unit_name(), "'; build it over fsdp.parameters()");
    idx.push_back(i);
  }
  return idx;
}

int64_t meta_int(const SafetensorsMetadata& m, const std::string& key, const std::string& file) {
  auto it = m.find(key);
  MINIDL_CHECK(it != m.end(), "load_sharded_checkpoint: ", file, " has no metadata '", key,
               "' (not an FSDP sharded checkpoint?)");
  return std::stoll(it->second);
}

}  // namespace

void save_sharded_checkpoint(const std::string& dir, FullyShardedDataParallel& fsdp,
                             const optim::Optimizer* opt) {
  NoGradGuard no_grad;
  ProcessGroup& pg = fsdp.process_group();
  const auto& units = fsdp.units();
  std::map<std::string, Tensor> out;
  SafetensorsMetadata meta{{"format", "minidl-fsdp-sharded"},
                           {"world_size", std::to_string(pg.size())},
                           {"rank", std::to_string(pg.rank())},
                           {"strategy", sharding_strategy_name(fsdp.sharding_strategy())},
                           {"units", std::to_string(units.size())}};
  for (size_t i = 0; i < units.size(); ++i) {
    const std::string u = "units." + std::to_string(i);
    out[u + ".flat_param"] = units[i]->flat_param.detach().to(kCPU);
    meta[u + ".name"] = units[i]->unit_name();
    meta[u + ".numel"] = std::to_string(units[i]->numel());
  }
  if (opt != nullptr) {
    const std::vector<size_t> idx = optimizer_indices(*opt, fsdp, "save_sharded_checkpoint");
    for (size_t i = 0; i < idx.size(); ++i)
      meta["units." + std::to_string(i) + ".optimizer_index"] = std::to_string(idx[i]);
    for (const auto& [key, t] : opt->state_dict()) out["optimizer." + key] = t.to(kCPU);
  }
  std::filesystem::create_directories(dir);
  save_safetensors(out, shard_file(dir, pg.rank(), pg.size()), meta);
  pg.barrier()->wait();  // every file complete before anyone goes on
}

void load_sharded_checkpoint(const std::string& dir, FullyShardedDataParallel& fsdp,
                             optim::Optimizer* opt) {
  NoGradGuard no_grad;
  ProcessGroup& pg = fsdp.process_group();
  const auto& units = fsdp.units();
  // The saved world size: from the files present (exactly one complete set).
  int saved_world = -1;
  const std::regex name_re(R"(shard-0-of-(\d+)\.safetensors)");
  MINIDL_CHECK(std::filesystem::is_directory(dir), "load_sharded_checkpoint: ", dir,
               " is not a directory");
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::smatch m;
    const std::string n = e.path().filename().string();
    if (std::regex_match(n, m, name_re)) {
      MINIDL_CHECK(saved_world < 0, "load_sharded_checkpoint: ", dir,
                   " holds checkpoints of two world sizes");
      saved_world = std::stoi(m[1]);
    }
  }
  MINIDL_CHECK(saved_world > 0, "load_sharded_checkpoint: no shard-0-of-N.safetensors in ", dir);
  std::vector<std::map<std::string, Tensor>> files(static_cast<size_t>(saved_world));
  SafetensorsMetadata meta;
  for (int r = 0; r < saved_world; ++r) {
    const std::string path = shard_file(dir, r, saved_world);
    MINIDL_CHECK(std::filesystem::exists(path), "load_sharded_checkpoint: ", path,
                 " is missing (the checkpoint of ", saved_world, " ranks is incomplete)");
    SafetensorsMetadata m;
    files[size_t(r)] = load_safetensors(path, &m);
    if (r == 0) meta = m;
    MINIDL_CHECK(meta_int(m, "units", path) == int64_t(units.size()),
                 "load_sharded_checkpoint: ", path, " has ", meta_int(m, "units", path),
                 " units, this model ", units.size());
  }
  const std::string file0 = shard_file(dir, 0, saved_world);
  const bool saved_unsharded = meta.at("strategy") == "NO_SHARD";
  // The piece this rank keeps: its own, or everything under NO_SHARD.
  const int cut_rank = fsdp.sharding_strategy() != ShardingStrategy::NO_SHARD ? pg.rank() : 0;
  // The whole flat tensor of unit i from the saved pieces of `key`.
  auto gather_saved = [&](const std::string& key, int64_t numel) {
    if (saved_unsharded) return files[0].at(key).narrow(0, 0, numel);
    std::vector<Tensor> pieces;
    for (auto& f : files) {
      auto it = f.find(key);
      MINIDL_CHECK(it != f.end(), "load_sharded_checkpoint: a shard file lacks '", key, "'");
      pieces.push_back(it->second.reshape({-1}));
    }
    return cat(pieces, 0).narrow(0, 0, numel);
  };
  // Everything is computed before anything changes.
  std::vector<Tensor> shards;
  for (size_t i = 0; i < units.size(); ++i) {
    const std::string u = "units." + std::to_string(i);
    const int64_t numel = meta_int(meta, u + ".numel", file0);
    MINIDL_CHECK(numel == units[i]->numel() && meta.at(u + ".name") == units[i]->unit_name(),
                 "load_sharded_checkpoint: unit ", i, " of ", dir, " is '", meta.at(u + ".name"),
                 "' with ", numel, " parameters, but this model's is '", units[i]->unit_name(),
                 "' with ", units[i]->numel());
    const Tensor full = gather_saved(u + ".flat_param", numel);
    shards.push_back(cut_shard(full, units[i]->shard_numel(), cut_rank));
  }
  std::map<std::string, Tensor> opt_state;
  if (opt != nullptr) {
    const std::vector<size_t> now = optimizer_indices(*opt, fsdp, "load_sharded_checkpoint");
    std::map<std::string, size_t> unit_of_index;  // the saved optimizer index -> unit
    for (size_t i = 0; i < units.size(); ++i) {
      const std::string k = "units." + std::to_string(i) + ".optimizer_index";
      MINIDL_CHECK(meta.count(k), "load_sharded_checkpoint: ", dir,
                   " was saved without optimizer state");
      unit_of_index[meta.at(k)] = i;
    }
    const std::regex state_re(R"(state\.(\d+)\.(.+))");
    for (const auto& [key, t] : files[0]) {
      if (key.rfind("optimizer.", 0) != 0) continue;
      const std::string k = key.substr(10);
      std::smatch m;
      if (std::regex_match(k, m, state_re) && t.dim() == 1) {
        const size_t unit = unit_of_index.at(m[1]);
        const Tensor full = gather_saved(key, units[unit]->numel());
        opt_state["state." + std::to_string(now[unit]) + "." + std::string(m[2])] =
            cut_shard(full, units[unit]->shard_numel(), cut_rank);
      } else if (std::regex_match(k, m, state_re)) {
        const size_t unit = unit_of_index.at(m[1]);
        opt_state["state." + std::to_string(now[unit]) + "." + std::string(m[2])] = t;
      } else {
        opt_state[k] = t;  // param groups: their options and parameter indices
      }
    }
  }
  for (size_t i = 0; i < units.size(); ++i) units[i]->flat_param.copy_(shards[i]);
  if (opt != nullptr) opt->load_state_dict(opt_state);
  pg.barrier()->wait();
}

void load_full_state_dict(FullyShardedDataParallel& fsdp, const nn::StateDict& state) {
  NoGradGuard no_grad;
  const bool sharded = fsdp.sharding_strategy() != ShardingStrategy::NO_SHARD;
  const int rank = fsdp.process_group().rank();
  std::vector<Tensor> shards;
  for (const auto& u : fsdp.units()) {
    Tensor full = zeros({u->numel()}, u->flat_param.dtype());
    for (const auto& p : u->params()) {
      const std::string& name = p.slots[0].fqn;
      auto it = state.find(name);
      MINIDL_CHECK(it != state.end(), "FSDP load_full_state_dict: missing key '", name, "'");
      MINIDL_CHECK(it->second.shape() == p.shape, "FSDP load_full_state_dict: '", name,
                   "' has shape ", it->second.shape_str(), ", the model's is ", shape_str(p.shape));
      full.narrow(0, p.offset, p.numel).copy_(it->second.reshape({-1}));
    }
    shards.push_back(cut_shard(full, u->shard_numel(), sharded ? rank : 0));
  }
  for (const auto& [name, b] : fsdp.module().named_buffers()) {
    if (!b.defined()) continue;
    auto it = state.find(name);
    MINIDL_CHECK(it != state.end(), "FSDP load_full_state_dict: missing buffer '", name, "'");
  }
  for (size_t i = 0; i < shards.size(); ++i) fsdp.units()[i]->flat_param.copy_(shards[i]);
  for (auto& [name, b] : fsdp.module().named_buffers())
    if (b.defined()) Tensor(b).copy_(state.at(name));
}

}  // namespace minidl::dist
