// The op-level profiler (tensor/profiler.h): per (op, device) call counts, host time and CUDA
// stream time; device events are resolved lazily (every 4096 ops, and by stats()).
#include "tensor/profiler.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "tensor/kernel_registration.h"
#include "tensor/op.h"

namespace minidl::profiler {
namespace detail {

std::atomic<bool> g_enabled{[] {
  const char* env = std::getenv("MINIDL_PROFILE");
  return env != nullptr && *env != '\0' && std::string_view(env) != "0";
}()};

namespace {

constexpr int kDevices = kNumDeviceTypes;
constexpr size_t kPendingFlush = 4096;

struct Slot {
  int64_t calls = 0;
  double host_ms = 0, device_ms = 0;
};
struct Pending {
  int slot;
  DeviceType device;
  void* token;
};
struct State {
  std::mutex mu;
  std::array<Slot, size_t(kNumOps) * kDevices> slots{};
  std::vector<Pending> pending;
  std::array<DeviceTimer, kDevices> timers{};
};
State& state() {
  static State* s = new State();  // never destroyed: ops may run during static destruction
  return *s;
}
thread_local int t_depth = 0;
std::atomic<int64_t> g_dispatches{0};
std::atomic<int64_t> g_host_reads{0};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Resolves every pending device timing into its slot (waits for the events). Lock held.
void flush_locked(State& s) {
  for (const Pending& p : s.pending) {
    const DeviceTimer& t = s.timers[size_t(p.device)];
    if (t.elapsed_ms) s.slots[size_t(p.slot)].device_ms += t.elapsed_ms(p.token);
  }
  s.pending.clear();
}

}  // namespace

void set_device_timer(DeviceType device, DeviceTimer timer) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.timers[size_t(device)] = timer;
}

Scope::Scope(Op op, DeviceType device) {
  if (t_depth++ > 0) return;    // inside another timed op
  ensure_kernels_registered();  // the backends install their timers while registering
  active_ = true;
  g_dispatches.fetch_add(1, std::memory_order_relaxed);
  slot_ = int(op) * kDevices + int(device);
  device_ = device;
  const DeviceTimer& t = state().timers[size_t(device)];  // set once at registration
  if (t.begin) token_ = t.begin();
  start_ns_ = now_ns();
}

Scope::~Scope() {
  --t_depth;
  if (!active_) return;
  const double host_ms = double(now_ns() - start_ns_) * 1e-6;
  State& s = state();
  if (token_) s.timers[size_t(device_)].end(token_);
  std::lock_guard<std::mutex> lock(s.mu);
  Slot& slot = s.slots[size_t(slot_)];
  ++slot.calls;
  slot.host_ms += host_ms;
  if (token_) {
    s.pending.push_back({slot_, device_, token_});
    if (s.pending.size() >= kPendingFlush) flush_locked(s);
  }
}

void count_host_read() {
  // (a kernel reading its own CPU inputs, inside a dispatch, waits for nothing)
  if (enabled() && t_depth == 0) g_host_reads.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace detail

int64_t dispatch_count() {
  return detail::g_dispatches.load(std::memory_order_relaxed);
}

int64_t host_read_count() {
  return detail::g_host_reads.load(std::memory_order_relaxed);
}

void enable(bool on) {
  detail::g_enabled.store(on);
}

void reset() {
  detail::State& s = detail::state();
  std::lock_guard<std::mutex> lock(s.mu);
  detail::flush_locked(s);
  s.slots.fill({});
}

std::vector<OpStats> stats() {
  detail::State& s = detail::state();
  std::lock_guard<std::mutex> lock(s.mu);
  detail::flush_locked(s);
  std::vector<OpStats> out;
  for (size_t i = 0; i < s.slots.size(); ++i) {
    const detail::Slot& slot = s.slots[i];
    if (slot.calls == 0) continue;
    out.push_back({std::string(op_name(Op(i / detail::kDevices))), DeviceType(i % detail::kDevices),
                   slot.calls, slot.host_ms, slot.device_ms});
  }
  std::stable_sort(out.begin(), out.end(), [](const OpStats& a, const OpStats& b) {
    return a.device_ms != b.device_ms ? a.device_ms > b.device_ms : a.host_ms > b.host_ms;
  });
  return out;
}

std::string table(int max_rows) {
  const std::vector<OpStats> all = stats();
  double host_total = 0, device_total = 0;
  int64_t calls_total = 0;
  for (const OpStats& r : all) {
    host_total += r.host_ms;
    device_total += r.device_ms;
    calls_total += r.calls;
  }
  std::string out;
  char line[200];
  std::snprintf(line, sizeof line, "%-38s %-5s %9s %12s %12s %7s\n", "op", "dev", "calls",
                "host ms", "device ms", "device%");
  out += line;
  auto row = [&](const std::string& name, const char* dev, int64_t calls, double host,
                 double device) {
    std::snprintf(line, sizeof line, "%-38s %-5s %9lld %12.3f %12.3f %6.1f%%\n",
                  name.substr(0, 38).c_str(), dev, static_cast<long long>(calls), host, device,
                  device_total > 0 ? 100.0 * device / device_total : 0.0);
    out += line;
  };
  OpStats rest{"(other ops)", DeviceType::cpu, 0, 0, 0};
  int shown = 0;
  for (const OpStats& r : all) {
    if (shown < max_rows) {
      row(r.op, r.device == DeviceType::cuda ? "cuda" : "cpu", r.calls, r.host_ms, r.device_ms);
      ++shown;
    } else {
      rest.calls += r.calls;
      rest.host_ms += r.host_ms;
      rest.device_ms += r.device_ms;
    }
  }
  if (rest.calls > 0) row(rest.op, "", rest.calls, rest.host_ms, rest.device_ms);
  row("total", "", calls_total, host_total, device_total);
  return out;
}

}  // namespace minidl::profiler
