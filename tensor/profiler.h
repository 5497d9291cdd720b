// Op-level profiler, a small torch.profiler: while it is on (profiler::enable() or the
// environment variable MINIDL_PROFILE=1), every kernel dispatch is timed on the host and, for
// CUDA ops, on the device (two events on the op's stream), and summed per (op, device).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/device.h"
#include "tensor/op.h"

namespace minidl::profiler {

namespace detail {
extern std::atomic<bool> g_enabled;
}  // namespace detail

// True while dispatches are timed (a relaxed load: the cost of a disabled profiler).
inline bool enabled() {
  return detail::g_enabled.load(std::memory_order_relaxed);
}
// Starts (or stops) timing; the counts so far are kept. CUDA timing adds two events per op
// (a few microseconds of host time each) and is skipped while a CUDA graph is captured.
void enable(bool on = true);
// Drops the counts (pending device timings are waited for and discarded).
void reset();
// Dispatches counted while the profiler was on, every op and device (nested dispatches inside
// another op's kernel are not counted): the op graph's size between two reads. Never reset;
// no lock and no wait for the device.
int64_t dispatch_count();
// Host reads of tensor values (item(), tolist(), at()) made while the profiler was on: on a
// device, each one waits for the queued work, so a training step should make none. Counted on
// every device (the same step makes the same reads on the CPU); reads inside another op's
// kernel are not. Never reset.
int64_t host_read_count();

struct OpStats {
  std::string op;  // the op_list.def name ("matmul", "sdpa_backward", ...)
  DeviceType device = DeviceType::cpu;
  int64_t calls = 0;
  double host_ms = 0;    // wall time of the dispatch on the calling thread, launches included
  double device_ms = 0;  // CUDA ops: stream time between the op's two events (0 on the CPU)
};
// The counts, most device time first (then host time); waits for pending CUDA events.
std::vector<OpStats> stats();
// The counts as a fixed-width table with totals and shares: at most max_rows ops, the rest
// summed in one row.
std::string table(int max_rows = 25);

// ---- for the dispatcher (tensor/dispatch.h) and the CUDA backend
namespace detail {
// Device timing installed by a backend: begin returns a token (nullptr: not timed, e.g. during
// graph capture), end closes it, elapsed_ms waits for it, returns its time and frees it.
struct DeviceTimer {
  void* (*begin)() = nullptr;
  void (*end)(void* token) = nullptr;
  double (*elapsed_ms)(void* token) = nullptr;
};
void set_device_timer(DeviceType device, DeviceTimer timer);
// Counts one host read (Tensor::item / tolist) when the profiler is on.
void count_host_read();

// Times one dispatch of `op` on `device`. Nested dispatches (a kernel that runs other ops)
// count towards the outermost one only.
class Scope {
 public:
  Scope(Op op, DeviceType device);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool active_ = false;
  int slot_ = -1;
  DeviceType device_ = DeviceType::cpu;
  int64_t start_ns_ = 0;
  void* token_ = nullptr;
};
}  // namespace detail

}  // namespace minidl::profiler
