// Autocast (torch.autocast): a thread-local mixed-precision mode per device type, the cast
// policy table (autograd/autocast.def) and the one hook the listed frontends call first.
// Usage: { amp::autocast ac(DeviceType::cpu); Tensor y = model(x); }  // matmuls run in bf16
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "autograd/autocast_cache.h"
#include "tensor/tensor.h"

namespace minidl::amp {

// What a listed frontend does with its floating inputs under autocast.
enum class CastPolicy : uint8_t { none, lower, fp32, promote };

// One entry per row of autograd/autocast.def.
enum class AutocastOp : uint16_t {
#define MINIDL_AUTOCAST(name, cuda, cpu) name,
#include "autograd/autocast.def"
#undef MINIDL_AUTOCAST
};
inline constexpr int kNumAutocastOps = 0
#define MINIDL_AUTOCAST(name, cuda, cpu) +1
#include "autograd/autocast.def"
#undef MINIDL_AUTOCAST
    ;

CastPolicy policy(AutocastOp op, DeviceType device_type);
std::string_view autocast_op_name(AutocastOp op);
std::string_view policy_name(CastPolicy p);  // "lower", "fp32", "promote", "none"

bool is_autocast_enabled(DeviceType device_type);
DType get_autocast_dtype(DeviceType device_type);
bool is_autocast_cache_enabled();
AutocastState autocast_state();
// Replaces this thread's settings (no nesting bookkeeping; prefer AutocastStateGuard).
void set_autocast_state(const AutocastState& state);

// RAII torch.autocast(device_type, dtype, enabled, cache_enabled): sets the mode of one device
// type for its lifetime and restores the previous settings on exit. Nestable; enabled=false
// opts a region out. dtype must be float16 or bfloat16; by default the thread's current one
// (bf16 for cpu, fp16 for cuda, unless an enclosing guard chose another), as in torch.
// Weight casts are cached until the outermost guard of this thread exits.
class autocast {
 public:
  explicit autocast(DeviceType device_type, std::optional<DType> dtype = std::nullopt,
                    bool enabled = true, bool cache_enabled = true);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  AutocastState prev_;
};

// RAII: installs a whole captured state (a worker thread inheriting its caller's autocast
// mode; the autograd engine turning autocast off) and restores the previous one. Counts as
// a region for the weight cast cache.
class AutocastStateGuard {
 public:
  explicit AutocastStateGuard(const AutocastState& state);
  ~AutocastStateGuard();
  AutocastStateGuard(const AutocastStateGuard&) = delete;
  AutocastStateGuard& operator=(const AutocastStateGuard&) = delete;

 private:
  AutocastState prev_;
};

namespace detail {

// True when some device type has autocast on and no hooked frontend is running in this
// thread: the one flag the hook tests on the fast path.
inline thread_local bool t_autocast_active = false;

// Marks "inside an autocast op" for its lifetime: nested frontends do not cast again.
// Movable (the hook returns it); only the last owner restores.
class ExcludeGuard {
 public:
  ExcludeGuard();
  ~ExcludeGuard();
  ExcludeGuard(ExcludeGuard&& o) noexcept : prev_(o.prev_), owns_(o.owns_) { o.owns_ = false; }
  ExcludeGuard(const ExcludeGuard&) = delete;
  ExcludeGuard& operator=(const ExcludeGuard&) = delete;
  ExcludeGuard& operator=(ExcludeGuard&&) = delete;

 private:
  bool prev_;
  bool owns_ = true;
};

// The device type the inputs run on (the first defined tensor's), or nullopt.
std::optional<DeviceType> device_of(std::initializer_list<const Tensor*> ts);
// The dtype floating inputs of `op` go to on `device_type`, or nullopt for no casting
// (policy none, or autocast off for that device type). `ts` are the inputs (for promote).
std::optional<DType> target_dtype(AutocastOp op, DeviceType device_type,
                                  std::initializer_list<const Tensor*> ts);
std::optional<DType> target_dtype(AutocastOp op, DeviceType device_type,
                                  const std::vector<const Tensor*>& ts);
// Casts one input: floating (not float64) tensors on `device_type` go to `dtype`; others,
// and undefined tensors, are returned unchanged. Leaf parameters to the autocast dtype use
// the region's cache.
Tensor cast_input(const Tensor& t, DType dtype, DeviceType device_type);

}  // namespace detail

// What a hooked frontend gets back: empty (go on with the original inputs) or the casted
// inputs, with "inside an autocast op" set until it is destroyed. The frontend calls itself
// again with them, like PyTorch's autocast kernel redispatching below the autocast key.
template <size_t N>
class AutocastArgs {
 public:
  AutocastArgs() = default;
  explicit operator bool() const { return guard_.has_value(); }
  const Tensor& operator[](size_t i) const { return args_[i]; }
  std::array<Tensor, N>& args() { return args_; }
  void engage() { guard_.emplace(); }

 private:
  std::array<Tensor, N> args_;
  std::optional<detail::ExcludeGuard> guard_;
};

// The hook at the top of a listed frontend:
//   if (auto ac = amp::autocast_inputs<amp::AutocastOp::linear>(x, w, b))
//     return linear(ac[0], ac[1], ac[2]);
// One thread-local flag test when autocast is off.
template <AutocastOp op, typename... Ts>
AutocastArgs<sizeof...(Ts)> autocast_inputs(const Ts&... ts) {
  AutocastArgs<sizeof...(Ts)> out;
  if (!detail::t_autocast_active) [[likely]]
    return out;
  const std::optional<DeviceType> dev = detail::device_of({&ts...});
  if (!dev) return out;
  const std::optional<DType> dt = detail::target_dtype(op, *dev, {&ts...});
  if (!dt) return out;
  out.args() = {detail::cast_input(ts, *dt, *dev)...};
  out.engage();
  return out;
}

// The same for a tensor list (cat, stack).
struct AutocastList {
  std::vector<Tensor> tensors;
  std::optional<detail::ExcludeGuard> guard;
  explicit operator bool() const { return guard.has_value(); }
};
AutocastList autocast_list_slow(AutocastOp op, const std::vector<Tensor>& ts);
template <AutocastOp op>
AutocastList autocast_list(const std::vector<Tensor>& ts) {
  if (!detail::t_autocast_active) [[likely]]
    return {};
  return autocast_list_slow(op, ts);
}

}  // namespace minidl::amp
