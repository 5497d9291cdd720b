// Autocast state (thread-local, per device type), the policy table generated from
// autograd/autocast.def and the input casts of the hook (the weight cast cache:
// autocast_cache.cpp).
#include "autograd/autocast.h"

#include <vector>

#include "autograd/ops.h"
#include "tensor/cuda_api.h"

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

thread_local AutocastState t_state;
thread_local bool t_excluded = false;  // inside a hooked frontend
thread_local int t_nesting = 0;        // live autocast / AutocastStateGuard regions
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

// (A region with autocast off, e.g. the autograd engine's during backward, leaves the list of
// used casts alone.)
void enter_region() {
  if (t_nesting++ == 0) weight_cache::enter_outermost_region(t_state);
}

// Leaving the outermost region drops the cache, remembering which casts were used.
void leave_region() {
  if (--t_nesting == 0) weight_cache::leave_outermost_region();
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
  return cacheable ? weight_cache::weight_cast(t, dtype) : weight_cache::plain_cast(t, dtype);
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
