// The weight cast cache of autocast regions (autocast_cache.h): per outermost region, the f32
// leaf weights' 16-bit casts; the casts the last region used, made again in one foreach_copy_
// on entry; and the copies a fused optimizer step wrote of them, taken instead when current.
#include "autograd/autocast_cache.h"

#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "tensor/variants.h"

namespace minidl::amp {
namespace {

// A cached cast of a leaf parameter: valid while the source lives and keeps its version.
// batched: made ahead by the region's batched cast (counted as a cast at its first use).
struct CacheEntry {
  std::weak_ptr<TensorImpl> src;
  uint64_t version = 0;
  Tensor casted;
  bool batched = false;
};
struct CacheKey {
  const TensorImpl* impl;
  DType dtype;
  bool operator==(const CacheKey&) const = default;
};
struct CacheKeyHash {
  size_t operator()(const CacheKey& k) const {
    return std::hash<const void*>()(k.impl) ^ (size_t(k.dtype) << 1);
  }
};

thread_local std::unordered_map<CacheKey, CacheEntry, CacheKeyHash> t_cache;
thread_local AutocastCacheStats t_stats;
thread_local bool t_in_region = false;  // an outermost region of this thread is live
// The parameters whose casts the last outermost region used (and the dtype): the next region
// casts them all at once on entry (one foreach_copy_ dispatch instead of one cast each).
struct UsedWeight {
  std::weak_ptr<TensorImpl> src;
  DType dtype;
};
thread_local std::vector<UsedWeight> t_used_weights;
// Copies an optimizer step wrote of those weights (provide_weight_copies), keyed like the cache;
// taken, when still current, by the next outermost region.
struct ProvidedCopy {
  std::weak_ptr<TensorImpl> src;
  uint64_t version = 0;
  Tensor copy;
};
using ProvidedCopies = std::unordered_map<CacheKey, ProvidedCopy, CacheKeyHash>;
thread_local ProvidedCopies t_provided;

bool optimizer_copies_on() {
  return variants::fused("autocast_weight_copies") && variants::fused("optimizer_weight_copies");
}

// Puts `casted` (src's 16-bit copy, made ahead) into the region's cache with a ToCopyBackward
// node, the same history as Tensor::to.
void cache_batched_cast(const Tensor& src, Tensor casted) {
  autograd::record("ToCopyBackward", {src}, {&casted}, {}, [](const auto& g, const auto&) {
    return std::vector<Tensor>{g[0].to(kFloat32)};
  });
  t_cache[CacheKey{src.impl(), casted.dtype()}] =
      CacheEntry{src.impl_ptr(), src.version(), casted, /*batched=*/true};
}

// The copy an optimizer step provided of t (cast to dtype), if t has not changed since.
Tensor take_provided(const ProvidedCopies& provided, const Tensor& t, DType dtype) {
  auto it = provided.find(CacheKey{t.impl(), dtype});
  if (it == provided.end() || it->second.src.lock() != t.impl_ptr() ||
      it->second.version != t.version())
    return Tensor();
  return it->second.copy;
}

// On entry to an outermost region: the casts the previous region used, of the parameters
// still alive, unchanged in kind and cast to this region's dtype on their device, made by one
// foreach_copy_ per device with a ToCopyBackward node each (the same history as Tensor::to),
// or taken from an optimizer step's copies.
void batch_cast_used_weights(const AutocastState& state) {
  std::vector<UsedWeight> used;
  used.swap(t_used_weights);
  ProvidedCopies provided;  // taken now or dropped
  provided.swap(t_provided);
  if (!state.cache_enabled || used.size() < 2 || !variants::fused("autocast_weight_copies")) return;
  // (device type, index) -> the sources and their new 16-bit copies
  std::map<std::pair<int, int>, std::pair<std::vector<Tensor>, std::vector<Tensor>>> by_device;
  for (const UsedWeight& u : used) {
    std::shared_ptr<TensorImpl> impl = u.src.lock();
    if (!impl) continue;
    const Tensor t(impl);
    const DeviceAutocast& st = t.device().type == DeviceType::cuda ? state.cuda : state.cpu;
    if (!st.enabled || st.dtype != u.dtype || t.dtype() != kFloat32 || !t.is_leaf() ||
        !t.requires_grad() || !t.is_contiguous())
      continue;
    if (Tensor copy = take_provided(provided, t, u.dtype); copy.defined()) {
      cache_batched_cast(t, copy);  // of t's shape (provide_weight_copies checks it)
      continue;
    }
    auto& [src, dst] = by_device[{int(t.device().type), t.device().index}];
    src.push_back(t);
    dst.push_back(empty(t.shape(), u.dtype, t.device()));
  }
  for (auto& entry : by_device) {
    auto& [src, dst] = entry.second;
    {
      NoGradGuard no_grad;
      native::foreach_copy_(dst, src);
    }
    for (size_t i = 0; i < src.size(); ++i) cache_batched_cast(src[i], dst[i]);
  }
}

}  // namespace

namespace weight_cache {

void enter_outermost_region(const AutocastState& state) {
  t_in_region = true;
  if ((state.cpu.enabled || state.cuda.enabled) && !t_used_weights.empty())
    batch_cast_used_weights(state);
}

void leave_outermost_region() {
  t_in_region = false;
  if (!t_cache.empty()) {
    t_used_weights.clear();
    for (const auto& [key, e] : t_cache)
      if (!e.batched) t_used_weights.push_back({e.src, key.dtype});
  }
  t_cache.clear();
}

Tensor plain_cast(const Tensor& t, DType dtype) {
  ++t_stats.casts;
  return t.to(dtype);
}

Tensor weight_cast(const Tensor& t, DType dtype) {
  const CacheKey key{t.impl(), dtype};
  auto it = t_cache.find(key);
  if (it != t_cache.end()) {
    const CacheEntry& e = it->second;
    if (e.src.lock() == t.impl_ptr() && e.version == t.version()) {
      if (it->second.batched) {  // its first use: a cast, made ahead with the others
        it->second.batched = false;
        ++t_stats.casts;
        ++t_stats.weight_casts;
      } else {
        ++t_stats.hits;
      }
      return e.casted;
    }
  }
  ++t_stats.casts;
  ++t_stats.weight_casts;
  Tensor casted = t.to(dtype);
  t_cache[key] = CacheEntry{t.impl_ptr(), t.version(), casted};
  return casted;
}

}  // namespace weight_cache

AutocastCacheStats autocast_cache_stats() {
  AutocastCacheStats s = t_stats;
  s.cached = t_cache.size();
  return s;
}

void reset_autocast_cache_stats() {
  t_stats = {};
}

void clear_autocast_cache() {
  t_cache.clear();
  t_used_weights.clear();
  t_provided.clear();
}

std::vector<Tensor> weight_copies_wanted(const std::vector<Tensor>& params) {
  if (t_used_weights.size() < 2 || t_in_region || !optimizer_copies_on()) return {};
  std::unordered_map<const TensorImpl*, DType> dtype_of;
  for (const UsedWeight& u : t_used_weights)
    if (std::shared_ptr<TensorImpl> impl = u.src.lock()) dtype_of.emplace(impl.get(), u.dtype);
  std::vector<Tensor> copies(params.size());
  bool any = false;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    auto it = dtype_of.find(p.impl());
    if (it == dtype_of.end() || !p.is_cpu() || p.dtype() != kFloat32 || !p.is_contiguous())
      continue;
    copies[i] = empty(p.shape(), it->second, p.device());
    any = true;
  }
  if (!any) copies.clear();
  return copies;
}

void provide_weight_copies(const std::vector<Tensor>& params, const std::vector<Tensor>& copies) {
  MINIDL_CHECK(copies.empty() || copies.size() == params.size(),
               "provide_weight_copies: ", copies.size(), " copies for ", params.size(),
               " parameter(s)");
  for (size_t i = 0; i < copies.size(); ++i) {
    const Tensor& c = copies[i];
    const Tensor& p = params[i];
    if (!c.defined()) continue;
    MINIDL_CHECK(c.shape() == p.shape() && c.device() == p.device() && c.is_floating_point(),
                 "provide_weight_copies: copy ", i, " is ", c.shape_str(), " ", c.dtype(), " on ",
                 c.device(), " for a parameter ", p.shape_str(), " on ", p.device());
    t_provided[CacheKey{p.impl(), c.dtype()}] = ProvidedCopy{p.impl_ptr(), p.version(), c};
  }
}

}  // namespace minidl::amp
