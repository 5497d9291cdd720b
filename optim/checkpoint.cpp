// Training checkpoints (see checkpoint.h): one safetensors file with prefixed sections, loaded
// all-or-nothing (validated in memory, applied with rollback on failure).
#include "optim/checkpoint.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <exception>
#include <utility>

#include "autograd/grad_mode.h"
#include "tensor/safetensors.h"
#include "autograd/ops.h"
#include "tensor/random.h"

namespace minidl::nn {
namespace {

const std::string kFormat = "minidl-checkpoint";
const std::string kVersion = "1";

using TensorMap = std::map<std::string, Tensor>;

std::string quoted(const std::string& s) {
  std::string q;
  q.reserve(s.size() + 2);
  q.push_back('"');
  q.append(s);
  q.push_back('"');
  return q;
}

void add_prefixed(TensorMap& out, const std::string& prefix, const TensorMap& in) {
  for (const auto& [k, v] : in) {
    std::string key;
    key.reserve(prefix.size() + k.size());
    key.append(prefix).append(k);
    out.emplace(std::move(key), v);
  }
}

// Deep copies (the live objects may mutate their tensors in place later).
TensorMap snapshot(const TensorMap& in) {
  NoGradGuard guard;
  TensorMap out;
  for (const auto& [k, v] : in) out[k] = v.detach().clone();
  return out;
}

uint64_t read_u64(const TensorMap& sd, const std::string& key, const std::string& path) {
  const Tensor& t = sd.at(key);
  MINIDL_CHECK(t.dtype() == kInt64 && t.numel() == 1, "load_checkpoint: '", path, "': key `", key,
               "` must be a 0-d int64 tensor, got ", dtype_name(t.dtype()), " ", t.shape_str());
  return std::bit_cast<uint64_t>(t.contiguous().data_ptr<int64_t>()[0]);
}

// The scheduler turns these into integers: they must be finite integral values (a corrupt
// file would otherwise make an out-of-range float-to-integer conversion).
void check_scheduler_counters(const TensorMap& sd, const std::string& path) {
  for (const char* key : {"last_epoch", "step_count"}) {
    auto it = sd.find(key);
    if (it == sd.end() || it->second.numel() != 1) continue;  // the scheduler names these
    const double v = it->second.to(kFloat64).contiguous().data_ptr<double>()[0];
    MINIDL_CHECK(std::isfinite(v) && v == std::trunc(v) && std::fabs(v) <= 0x1p53,
                 "load_checkpoint: '", path, "': scheduler.", key, " is ", v,
                 "; expected an integer (corrupt checkpoint?)");
  }
}

}  // namespace

void save_checkpoint(const std::string& path, Module& model, optim::Optimizer* opt,
                     optim::LRScheduler* sched, const std::map<std::string, std::string>& extra,
                     const TensorMap* amp) {
  save_checkpoint(path, model.state_dict(), opt, sched, extra, amp);
}

void save_checkpoint(const std::string& path, const StateDict& model_state, optim::Optimizer* opt,
                     optim::LRScheduler* sched, const std::map<std::string, std::string>& extra,
                     const TensorMap* amp) {
  SafetensorsMetadata meta;
  for (const auto& [k, v] : extra) {
    MINIDL_CHECK(k != "format" && k != "version", "save_checkpoint: '", path,
                 "': extra metadata may not redefine the reserved key \"", k, "\"");
    meta[k] = v;
  }
  meta["format"] = kFormat;
  meta["version"] = kVersion;
  TensorMap all;
  add_prefixed(all, "model.", model_state);
  if (opt) add_prefixed(all, "optimizer.", opt->state_dict());
  if (sched) add_prefixed(all, "scheduler.", sched->state_dict());
  if (amp) add_prefixed(all, "amp.", *amp);
  Generator& gen = default_generator();
  all["rng.seed"] = scalar_tensor(std::bit_cast<int64_t>(gen.seed()), kInt64);
  all["rng.offset"] = scalar_tensor(std::bit_cast<int64_t>(gen.offset()), kInt64);
  save_safetensors(all, path, meta);
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, Module& model,
                                                   optim::Optimizer* opt, optim::LRScheduler* sched,
                                                   bool strict, TensorMap* amp) {
  // 1. Read and validate the whole file into memory.
  SafetensorsMetadata meta;
  TensorMap all;
  try {
    all = load_safetensors(path, &meta);
  } catch (const std::exception& e) {
    MINIDL_FAIL("load_checkpoint: cannot read checkpoint '", path, "': ", e.what());
  }
  auto fmt = meta.find("format");
  MINIDL_CHECK(fmt != meta.end() && fmt->second == kFormat, "load_checkpoint: '", path,
               "' is not a minidl checkpoint (metadata \"format\" is ",
               fmt == meta.end() ? std::string("missing") : quoted(fmt->second), ", expected \"",
               kFormat, "\"); use load_weights for plain weight files");
  auto ver = meta.find("version");
  MINIDL_CHECK(ver != meta.end() && ver->second == kVersion, "load_checkpoint: '", path,
               "': unsupported checkpoint version ",
               ver == meta.end() ? std::string("(missing)") : ver->second, " (this build reads ",
               kVersion, ")");
  TensorMap model_sd, opt_sd, sched_sd, rng, amp_sd;
  std::vector<std::string> unknown;
  for (const auto& kv : all) {
    const std::string& k = kv.first;  // not a structured binding: clang 14 cannot capture one
    const Tensor& v = kv.second;
    auto take = [&](const char* prefix, TensorMap& dst) {
      size_t n = std::char_traits<char>::length(prefix);
      if (k.compare(0, n, prefix) != 0) return false;
      dst[k.substr(n)] = v;
      return true;
    };
    if (!take("model.", model_sd) && !take("optimizer.", opt_sd) && !take("scheduler.", sched_sd) &&
        !take("rng.", rng) && !take("amp.", amp_sd))
      unknown.push_back(k);
  }
  if (strict && !unknown.empty()) {
    std::string list;
    for (const auto& k : unknown) {
      if (!list.empty()) list.append(", ");
      list.append("\"").append(k).append("\"");
    }
    MINIDL_FAIL("load_checkpoint: '", path, "': unexpected key(s): ", list);
  }
  MINIDL_CHECK(!opt || !opt_sd.empty(), "load_checkpoint: '", path,
               "' holds no optimizer state (it was saved without an optimizer)");
  MINIDL_CHECK(!sched || !sched_sd.empty(), "load_checkpoint: '", path,
               "' holds no scheduler state (it was saved without a scheduler)");
  bool has_rng = rng.count("seed") && rng.count("offset");
  MINIDL_CHECK(has_rng || !strict, "load_checkpoint: '", path,
               "': missing the RNG state (rng.seed / rng.offset)");
  check_scheduler_counters(sched_sd, path);
  uint64_t seed = 0, offset = 0;
  if (has_rng) {
    seed = read_u64(rng, "seed", path);
    offset = read_u64(rng, "offset", path);
  }

  // 2. Snapshot the current state, then apply; on any failure restore the snapshot.
  TensorMap model_old = snapshot(model.state_dict());
  TensorMap opt_old = opt ? snapshot(opt->rollback_state()) : TensorMap{};
  std::vector<optim::Options> opt_options_old;  // load_state_dict(opt_old) keeps added options
  if (opt)
    for (const optim::ParamGroup& g : opt->param_groups()) opt_options_old.push_back(g.options);
  TensorMap sched_old = sched ? snapshot(sched->state_dict()) : TensorMap{};
  Generator& gen = default_generator();
  uint64_t seed_old = gen.seed(), offset_old = gen.offset();
  bool model_touched = false, opt_touched = false, sched_touched = false;
  try {
    model_touched = true;
    model.load_state_dict(model_sd, strict);
    if (opt) {
      opt_touched = true;
      opt->load_state_dict(opt_sd);
    }
    if (sched) {
      sched_touched = true;
      sched->load_state_dict(sched_sd);
    }
  } catch (const std::exception& e) {
    // Rollback (each load validates before modifying, so these cannot fail on shapes).
    if (model_touched) model.load_state_dict(model_old, /*strict=*/false);
    if (opt_touched) {
      opt->restore_rollback_state(opt_old);
      for (size_t g = 0; g < opt_options_old.size(); ++g)
        opt->param_groups()[g].options = opt_options_old[g];
    }
    if (sched_touched) sched->load_state_dict(sched_old);
    gen.set_state(seed_old, offset_old);
    MINIDL_FAIL("load_checkpoint: '", path, "': ", e.what());
  }
  if (has_rng) gen.set_state(seed, offset);
  if (amp) *amp = std::move(amp_sd);
  return meta;
}

void save_weights(const std::string& path, const Module& model) {
  save_safetensors(model.state_dict(), path, {{"format", "pt"}});
}

LoadStateDictResult load_weights(const std::string& path, Module& model, bool strict) {
  SafetensorsMetadata meta;
  TensorMap sd;
  try {
    sd = load_safetensors(path, &meta);
  } catch (const std::exception& e) {
    MINIDL_FAIL("load_weights: cannot read '", path, "': ", e.what());
  }
  auto fmt = meta.find("format");
  MINIDL_CHECK(fmt == meta.end() || fmt->second != kFormat, "load_weights: '", path,
               "' is a minidl training checkpoint; use load_checkpoint");
  try {
    return model.load_state_dict(sd, strict);
  } catch (const std::exception& e) {
    MINIDL_FAIL("load_weights: '", path, "': ", e.what());
  }
}

}  // namespace minidl::nn
