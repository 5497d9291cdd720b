// Autocast state (thread-local, per device type), the policy table generated from
// autograd/autocast.def, the input casts of the hook and the per-region weight cast cache.
#include "autograd/autocast.h"

#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "tensor/cuda_api.h"
#include "tensor/variants.h"

namespace minidl::amp {
namespace {

struct PolicyRow {
  std::string_view name;
  CastPolicy cuda, cpu;
};

constexpr CastPolicy lower = CastPolicy::lower, fp32 = CastPolicy::fp32,
                     promote = CastPolicy::promote, none = CastPolicy::none;

constexpr PolicyRow kTable[] = {
#define MINIDL_AUTOCAST(name, cuda, cpu) {#name, cuda, cpu},
#include "autograd/autocast.def"
#undef MINIDL_AUTOCAST
};
static_assert(sizeof(kTable) / sizeof(kTable[0]) == size_t(kNumAutocastOps));

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

thread_local AutocastState t_state;
thread_local bool t_excluded = false;  // inside a hooked frontend
thread_local int t_nesting = 0;        // live autocast / AutocastStateGuard regions
thread_local std::unordered_map<CacheKey, CacheEntry, CacheKeyHash> t_cache;
thread_local AutocastCacheStats t_stats;
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
thread_local std::unordered_map<CacheKey, ProvidedCopy, CacheKeyHash> t_provided;

bool optimizer_copies_on() {
  return variants::fused("autocast_weight_copies") && variants::fused("optimizer_weight_copies");
}

void refresh_active() {
  detail::t_autocast_active = (t_state.cpu.enabled || t_state.cuda.enabled) && !t_excluded;
}

DeviceAutocast& slot(AutocastState& s, DeviceType d) {
  return d == DeviceType::cuda ? s.cuda : s.cpu;
}

void check_dtype(DType dt, DeviceType d) {
  MINIDL_CHECK(dt == kFloat16 || dt == kBFloat16, "autocast(",
               d == DeviceType::cuda ? "cuda" : "cpu", "): dtype must be float16 or bfloat16, got ",
               dt);
}

// bf16 on a GPU without bf16 tensor cores (compute capability < 8.0) is refused at the guard,
// not run as a slow emulation. Nothing to check without a GPU (the guard is still usable for
// CPU tensors and for tests of the policy).
void check_cuda_bf16(DType dt, DeviceType d, bool enabled) {
  if (d != DeviceType::cuda || dt != kBFloat16 || !enabled || cuda::device_count() == 0) return;
  const int dev = cuda::current_device();
  const cuda::DeviceProperties p = cuda::get_device_properties(dev);
  MINIDL_CHECK(p.major >= 8, "autocast(cuda, bfloat16): cuda:", dev, " (", p.name,
               ") has compute capability ", p.major, ".", p.minor,
               "; bfloat16 needs 8.0 or newer (use float16 with a GradScaler)");
}

// On entry to an outermost region: the casts the previous region used, of the parameters
// still alive, unchanged in kind and cast to this region's dtype on their device, made by one
// foreach_copy_ per device with a ToCopyBackward node each (the same history as Tensor::to).
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
Tensor take_provided(const Tensor& t, DType dtype) {
  auto it = t_provided.find(CacheKey{t.impl(), dtype});
  if (it == t_provided.end() || it->second.src.lock() != t.impl_ptr() ||
      it->second.version != t.version())
    return Tensor();
  return it->second.copy;
}

void batch_cast_used_weights() {
  std::vector<UsedWeight> used;
  used.swap(t_used_weights);
  std::unordered_map<CacheKey, ProvidedCopy, CacheKeyHash> provided;
  provided.swap(t_provided);
  if (!t_state.cache_enabled || used.size() < 2 || !variants::fused("autocast_weight_copies"))
    return;
  t_provided.swap(provided);  // read by take_provided below, dropped at the end
  // (device type, index) -> the sources and their new 16-bit copies
  std::map<std::pair<int, int>, std::pair<std::vector<Tensor>, std::vector<Tensor>>> by_device;
  for (const UsedWeight& u : used) {
    std::shared_ptr<TensorImpl> impl = u.src.lock();
    if (!impl) continue;
    const Tensor t(impl);
    const DeviceAutocast& st = slot(t_state, t.device().type);
    if (!st.enabled || st.dtype != u.dtype || t.dtype() != kFloat32 || !t.is_leaf() ||
        !t.requires_grad() || !t.is_contiguous())
      continue;
    if (Tensor copy = take_provided(t, u.dtype); copy.defined()) {
      cache_batched_cast(t, copy.view(t.shape()));
      continue;
    }
    auto& [src, dst] = by_device[{int(t.device().type), t.device().index}];
    src.push_back(t);
    dst.push_back(empty(t.shape(), u.dtype, t.device()));
  }
  t_provided.clear();
  for (auto& entry : by_device) {
    auto& [src, dst] = entry.second;
    {
      NoGradGuard no_grad;
      native::foreach_copy_(dst, src);
    }
    for (size_t i = 0; i < src.size(); ++i) cache_batched_cast(src[i], dst[i]);
  }
}

// (A region with autocast off, e.g. the autograd engine's during backward, leaves the list of
// used casts alone.)
void enter_region() {
  if (t_nesting++ == 0 && (t_state.cpu.enabled || t_state.cuda.enabled) && !t_used_weights.empty())
    batch_cast_used_weights();
}

// Leaving the outermost region drops the cache, remembering which casts were used.
void leave_region() {
  if (--t_nesting > 0) return;
  if (!t_cache.empty()) {
    t_used_weights.clear();
    for (const auto& [key, e] : t_cache)
      if (!e.batched) t_used_weights.push_back({e.src, key.dtype});
  }
  t_cache.clear();
}

}  // namespace

CastPolicy policy(AutocastOp op, DeviceType device_type) {
  const PolicyRow& row = kTable[size_t(op)];
  return device_type == DeviceType::cuda ? row.cuda : row.cpu;
}

std::string_view autocast_op_name(AutocastOp op) {
  return kTable[size_t(op)].name;
}

std::string_view policy_name(CastPolicy p) {
  switch (p) {
    case CastPolicy::lower:
      return "lower";
    case CastPolicy::fp32:
      return "fp32";
    case CastPolicy::promote:
      return "promote";
    case CastPolicy::none:
      break;
  }
  return "none";
}

bool is_autocast_enabled(DeviceType device_type) {
  return slot(t_state, device_type).enabled;
}

DType get_autocast_dtype(DeviceType device_type) {
  return slot(t_state, device_type).dtype;
}

bool is_autocast_cache_enabled() {
  return t_state.cache_enabled;
}

AutocastState autocast_state() {
  return t_state;
}

void set_autocast_state(const AutocastState& state) {
  check_dtype(state.cpu.dtype, DeviceType::cpu);
  check_dtype(state.cuda.dtype, DeviceType::cuda);
  t_state = state;
  refresh_active();
}

autocast::autocast(DeviceType device_type, std::optional<DType> dtype, bool enabled,
                   bool cache_enabled)
    : prev_(t_state) {
  // Like torch: no dtype means this thread's current one (bf16 / fp16 until changed).
  const DType dt = dtype.value_or(slot(t_state, device_type).dtype);
  check_dtype(dt, device_type);
  check_cuda_bf16(dt, device_type, enabled);
  AutocastState s = t_state;
  slot(s, device_type) = {enabled, dt};
  s.cache_enabled = cache_enabled;
  t_state = s;
  refresh_active();
  enter_region();
}

autocast::~autocast() {
  t_state = prev_;
  refresh_active();
  leave_region();
}

AutocastStateGuard::AutocastStateGuard(const AutocastState& state) : prev_(t_state) {
  set_autocast_state(state);
  enter_region();
}

AutocastStateGuard::~AutocastStateGuard() {
  t_state = prev_;
  refresh_active();
  leave_region();
}

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
  if (t_used_weights.size() < 2 || t_nesting > 0 || !optimizer_copies_on()) return {};
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

namespace detail {

ExcludeGuard::ExcludeGuard() : prev_(t_excluded) {
  t_excluded = true;
  refresh_active();
}

ExcludeGuard::~ExcludeGuard() {
  if (!owns_) return;
  t_excluded = prev_;
  refresh_active();
}

std::optional<DeviceType> device_of(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined()) return t->device().type;
  return std::nullopt;
}

std::optional<DType> target_dtype(AutocastOp op, DeviceType device_type,
                                  std::initializer_list<const Tensor*> ts) {
  return target_dtype(op, device_type, std::vector<const Tensor*>(ts));
}

std::optional<DType> target_dtype(AutocastOp op, DeviceType device_type,
                                  const std::vector<const Tensor*>& ts) {
  const DeviceAutocast& st = slot(t_state, device_type);
  if (!st.enabled) return std::nullopt;
  switch (policy(op, device_type)) {
    case CastPolicy::none:
      return std::nullopt;
    case CastPolicy::lower:
      return st.dtype;
    case CastPolicy::fp32:
      return kFloat32;
    case CastPolicy::promote:
      break;
  }
  // Widest floating dtype among the inputs on this device type (f16 with bf16 gives f32).
  std::optional<DType> wide;
  for (const Tensor* t : ts)
    if (t->defined() && t->is_floating_point() && t->device().type == device_type)
      wide = wide ? promote_types(*wide, t->dtype()) : t->dtype();
  return wide;
}

Tensor cast_input(const Tensor& t, DType dtype, DeviceType device_type) {
  if (!t.defined() || !t.is_floating_point() || t.dtype() == kFloat64 || t.dtype() == dtype ||
      t.device().type != device_type)
    return t;
  // Like torch: only float32 leaf parameters cast to the autocast dtype are cached, and only
  // inside a region (a thread that merely set the state has nobody to clear its cache).
  const bool cacheable = t_state.cache_enabled && t_nesting > 0 && t.dtype() == kFloat32 &&
                         dtype == slot(t_state, device_type).dtype && t.is_leaf() &&
                         t.requires_grad();
  if (!cacheable) {
    ++t_stats.casts;
    return t.to(dtype);
  }
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

}  // namespace detail

AutocastList autocast_list_slow(AutocastOp op, const std::vector<Tensor>& ts) {
  AutocastList out;
  const Tensor* first = nullptr;
  for (const Tensor& t : ts)
    if (t.defined()) {
      first = &t;
      break;
    }
  if (!first) return out;
  const DeviceType dev = first->device().type;
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : ts) ptrs.push_back(&t);
  const std::optional<DType> dt = detail::target_dtype(op, dev, ptrs);
  if (!dt) return out;
  out.tensors.reserve(ts.size());
  for (const Tensor& t : ts) out.tensors.push_back(detail::cast_input(t, *dt, dev));
  out.guard.emplace();
  return out;
}

}  // namespace minidl::amp
