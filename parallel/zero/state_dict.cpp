// ZeroRedundancyOptimizer's state dicts: this rank's shard keyed by global parameter index,
// consolidation onto one rank (metadata allgather, then one broadcast per owner and dtype), and
// loading a consolidated dict or a set of shards saved at any world size.
#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "parallel/zero/zero_redundancy_optimizer.h"
#include "tensor/error.h"

namespace minidl::dist {

namespace {

struct Key {
  std::string kind, name;
  size_t index = 0;
};

// "<kind>.<index>.<name>" (false when the key has another form).
bool parse_key(const std::string& key, Key& out) {
  const size_t dot1 = key.find('.');
  if (dot1 == std::string::npos) return false;
  const size_t dot2 = key.find('.', dot1 + 1);
  if (dot2 == std::string::npos || dot2 == dot1 + 1) return false;
  const std::string num = key.substr(dot1 + 1, dot2 - dot1 - 1);
  if (num.find_first_not_of("0123456789") != std::string::npos || num.size() > 18) return false;
  out.kind = key.substr(0, dot1);
  out.index = std::stoul(num);
  out.name = key.substr(dot2 + 1);
  return true;
}

struct Entry {  // one state tensor of a rank's shard, as described in its metadata
  std::string key;
  DType dtype;
  Shape shape;
  int64_t numel = 1;
};

std::string encode(const std::vector<std::pair<std::string, Tensor>>& entries) {
  std::ostringstream os;
  for (const auto& [key, t] : entries) {
    os << key << ' ' << int(t.dtype()) << ' ' << t.dim();
    for (int64_t s : t.shape()) os << ' ' << s;
    os << '\n';
  }
  return os.str();
}

std::vector<Entry> decode(const std::string& text) {
  std::vector<Entry> out;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    std::istringstream ls(line);
    Entry e;
    int dtype = 0;
    int64_t dim = 0;
    ls >> e.key >> dtype >> dim;
    e.dtype = DType(dtype);
    e.shape.resize(size_t(dim));
    for (int64_t& s : e.shape) ls >> s;
    for (int64_t s : e.shape) e.numel *= s;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

std::map<std::string, Tensor> ZeroRedundancyOptimizer::local_state_dict() const {
  std::map<std::string, Tensor> sd;
  int64_t idx0 = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string pre = "param_groups." + std::to_string(g) + ".";
    const int64_t n = int64_t(groups_[g].params.size());
    sd[pre + "params"] = arange(idx0, idx0 + n, 1, kInt64);
    for (const auto& [k, v] : groups_[g].options) sd[pre + k] = scalar_tensor(v, kFloat64);
    idx0 += n;
  }
  std::vector<size_t> global;  // local index (across local groups) -> global index
  for (const std::vector<size_t>& ids : local_index_)
    global.insert(global.end(), ids.begin(), ids.end());
  for (auto& [key, t] : local_->state_dict()) {
    Key k;
    if (!parse_key(key, k) || k.kind != "state") continue;
    MINIDL_CHECK(k.index < global.size(), "ZeroRedundancyOptimizer: the local optimizer's key `",
                 key, "` is out of range", where());
    sd["state." + std::to_string(global[k.index]) + "." + k.name] = t;
  }
  return sd;
}

void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  MINIDL_CHECK(to >= 0 && to < world_, "ZeroRedundancyOptimizer.consolidate_state_dict: rank ", to,
               " is not in the group", where());
  NoGradGuard no_grad;
  std::map<std::string, Tensor> mine = local_state_dict();
  has_consolidated_ = false;
  consolidated_.clear();
  if (world_ == 1) {
    consolidated_ = std::move(mine);
    has_consolidated_ = true;
    return;
  }
  std::vector<std::pair<std::string, Tensor>> entries;  // this rank's state tensors, key order
  for (const auto& [key, t] : mine)
    if (key.rfind("state.", 0) == 0) entries.emplace_back(key, t);
  // Every rank learns every shard's keys, dtypes and shapes.
  const Device comm = comm_device();
  const std::string text = encode(entries);
  std::vector<Tensor> lengths(static_cast<size_t>(world_));
  for (Tensor& l : lengths) l = empty({1}, kInt64, comm);
  group_->allgather(lengths, full({1}, int64_t(text.size()), kInt64, comm))->wait();
  Tensor bytes = empty({int64_t(text.size())}, kUInt8);
  if (!text.empty()) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  std::vector<Tensor> texts(static_cast<size_t>(world_));
  for (int r = 0; r < world_; ++r)
    texts[size_t(r)] = empty({lengths[size_t(r)].item<int64_t>()}, kUInt8, comm);
  group_->allgather(texts, bytes.to(comm))->wait();
  std::vector<const Tensor*> params;
  for (const optim::ParamGroup& g : groups_)
    for (const Tensor& p : g.params) params.push_back(&p);
  std::map<std::string, Tensor> result;
  if (rank_ == to) result = mine;
  for (int r = 0; r < world_; ++r) {
    if (r == to) continue;
    const Tensor t = texts[size_t(r)].to(kCPU);
    const std::vector<Entry> meta =
        decode(std::string(static_cast<const char*>(t.data_ptr()), size_t(t.numel())));
    std::vector<DType> dtypes;
    for (const Entry& e : meta)
      if (std::find(dtypes.begin(), dtypes.end(), e.dtype) == dtypes.end())
        dtypes.push_back(e.dtype);
    for (DType dt : dtypes) {
      int64_t n = 0;
      for (const Entry& e : meta)
        if (e.dtype == dt) n += e.numel;
      if (n == 0) continue;
      Tensor buf;
      if (rank_ == r) {
        std::vector<Tensor> parts;
        for (const auto& [key, v] : entries)
          if (v.dtype() == dt) parts.push_back(v.detach().reshape({-1}).to(comm));
        buf = cat(parts, 0);
      } else {
        buf = empty({n}, dt, comm);
      }
      group_->broadcast(buf, r)->wait();
      if (rank_ != to) continue;
      int64_t off = 0;
      for (const Entry& e : meta) {
        if (e.dtype != dt) continue;
        Tensor v = buf.narrow(0, off, e.numel).reshape(e.shape);
        off += e.numel;
        Key k;
        MINIDL_CHECK(parse_key(e.key, k) && k.index < params.size(),
                     "ZeroRedundancyOptimizer.consolidate_state_dict: rank ", r,
                     " sent an unexpected key `", e.key, "`", where());
        result[e.key] = k.name == "step" ? v.to(kCPU, kFloat64).reshape({}).clone()
                                         : v.to(params[k.index]->device()).clone();
      }
    }
  }
  if (rank_ == to) {
    consolidated_ = std::move(result);
    has_consolidated_ = true;
  }
}

std::map<std::string, Tensor> ZeroRedundancyOptimizer::state_dict() const {
  if (world_ == 1 && !has_consolidated_) return local_state_dict();
  MINIDL_CHECK(has_consolidated_,
               "ZeroRedundancyOptimizer.state_dict: the optimizer state has not been consolidated "
               "on this rank; call consolidate_state_dict(to) on every rank (after the last "
               "step), then state_dict() on rank `to`",
               where());
  return consolidated_;
}

void ZeroRedundancyOptimizer::load_state_dict(const std::map<std::string, Tensor>& sd) {
  const std::string op = "ZeroRedundancyOptimizer load_state_dict: ";
  std::vector<const Tensor*> params;
  for (const optim::ParamGroup& g : groups_)
    for (const Tensor& p : g.params) params.push_back(&p);
  std::vector<int64_t> local_of(params.size(), -1);  // global index -> local index
  int64_t li = 0;
  for (const std::vector<size_t>& ids : local_index_)
    for (size_t i : ids) local_of[i] = li++;
  std::map<std::string, Tensor> local_sd;
  std::set<size_t> groups_seen;
  for (const auto& [key, t] : sd) {
    MINIDL_CHECK(t.defined(), op, "key `", key, "` holds an undefined tensor", where());
    Key k;
    MINIDL_CHECK(parse_key(key, k), op, "unexpected key `", key, "`", where());
    if (k.kind == "param_groups") {
      MINIDL_CHECK(k.index < groups_.size(), op, "key `", key, "` refers to param group ", k.index,
                   " but the optimizer has ", groups_.size(), " group(s)", where());
      if (k.name == "params") {
        MINIDL_CHECK(t.numel() == int64_t(groups_[k.index].params.size()), op, "key `", key,
                     "` lists ", t.numel(), " parameter(s) (shape ", t.shape_str(),
                     ") but param group ", k.index, " has ", groups_[k.index].params.size(),
                     where());
        groups_seen.insert(k.index);
        local_sd[key] = arange(int64_t(local_index_[k.index].size()), kInt64);
      } else {
        MINIDL_CHECK(t.numel() == 1, op, "key `", key, "` must be a scalar, got shape ",
                     t.shape_str(), where());
        local_sd[key] = t;
      }
    } else if (k.kind == "state") {
      MINIDL_CHECK(k.index < params.size(), op, "key `", key, "` refers to parameter ", k.index,
                   " but the optimizer has ", params.size(), " parameter(s)", where());
      const Tensor& p = *params[k.index];
      if (k.name == "step")
        MINIDL_CHECK(t.numel() == 1, op, "key `", key, "` must be a scalar, got shape ",
                     t.shape_str(), where());
      else
        MINIDL_CHECK(t.shape() == p.shape(), op, "key `", key, "` has shape ", t.shape_str(),
                     " but parameter ", k.index, " has shape ", p.shape_str(), where());
      if (local_of[k.index] >= 0)
        local_sd["state." + std::to_string(local_of[k.index]) + "." + k.name] = t;
    } else {
      MINIDL_CHECK(false, op, "unexpected key `", key, "`", where());
    }
  }
  MINIDL_CHECK(groups_seen.size() == groups_.size(), op, "the state dict has ", groups_seen.size(),
               " param group(s) but the optimizer has ", groups_.size(), where());
  sync_local_groups();
  local_->load_state_dict(local_sd);
  for (size_t g = 0; g < groups_.size(); ++g)
    groups_[g].options = local_->param_groups()[g].options;
  has_consolidated_ = false;
  consolidated_.clear();
}

void ZeroRedundancyOptimizer::load_sharded_state_dicts(
    const std::vector<std::map<std::string, Tensor>>& shards) {
  MINIDL_CHECK(!shards.empty(), "ZeroRedundancyOptimizer.load_sharded_state_dicts: no shards",
               where());
  std::map<std::string, Tensor> merged;
  std::map<std::string, size_t> from;  // state key -> shard
  for (size_t s = 0; s < shards.size(); ++s)
    for (const auto& [key, t] : shards[s]) {
      if (key.rfind("state.", 0) == 0) {
        auto it = from.find(key);
        MINIDL_CHECK(it == from.end(), "ZeroRedundancyOptimizer.load_sharded_state_dicts: key `",
                     key, "` is in shard ", it == from.end() ? 0 : it->second, " and shard ", s,
                     " (shards of one checkpoint hold disjoint parameters)", where());
        from[key] = s;
      }
      merged.emplace(key, t);  // param_groups entries: the first shard's
    }
  load_state_dict(merged);
}

}  // namespace minidl::dist
