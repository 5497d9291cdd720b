// Stall inspector (after Horovod's): every rank records the collective it is in with a few
// atomic stores and a background thread publishes it to the store; when a collective has waited
// longer than stall_warn, rank 0 prints which ranks are in it and which are missing, and a
// timed-out collective's error names the missing ranks.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "parallel/process_group/process_group.h"

namespace minidl::dist {

// One rank's collectives as it publishes them (times: system_clock, ns since the epoch).
struct CollectiveState {
  uint64_t seq = 0;  // the collective in progress (0: none)
  std::string op;    // its op ("allreduce")
  uint64_t bytes = 0;
  int64_t since_ns = 0;      // when it started
  uint64_t done_seq = 0;     // the last collective completed (0: none yet)
  int64_t done_ns = 0;       // when it completed
  int64_t heartbeat_ns = 0;  // when this state was published
};
std::string encode_state(const CollectiveState& s);
// Empty on malformed text.
std::optional<CollectiveState> decode_state(const std::string& text);

// How often the inspector publishes and when a silent rank counts as stopped, from stall_warn:
// publish about once a second (every warn/4 for a warn under 4 s, at least every 100 ms); stale
// after 3 publish intervals, so that a rank stopped when the wait began is stale by the report.
struct StallTiming {
  std::chrono::milliseconds warn{60000}, publish{1000}, stale{3000};
  static StallTiming from_warn(std::chrono::milliseconds warn);
};

// The stall_warn a group uses: options.stall_warn when set, else MINIDL_STALL_WARN (seconds),
// else 60 s; 0 turns the inspector off. Throws on a malformed MINIDL_STALL_WARN.
std::chrono::milliseconds effective_stall_warn(const ProcessGroupOptions& options);

// What the inspector knows at one moment: every rank's state (empty: never published), `self`'s
// own being current.
struct StallView {
  std::string backend;  // "gloo"
  int self = 0;
  std::vector<std::optional<CollectiveState>> states;
  int64_t now_ns = 0;
  StallTiming timing;
  std::string read_error;  // why some states could not be read (empty: all read)
};

// The collective stalled for at least timing.warn on some live rank (the lowest such sequence
// number), or 0; `waited_ns` is how long its earliest live participant has waited.
uint64_t stalled_collective(const StallView& v, int64_t* waited_ns = nullptr);
// The multi-line report rank 0 prints for collective `seq` ("gloo allreduce #4 (16 B): waiting
// 1.0 s for rank 1; in it: rank 0" and a line per missing rank).
std::string stall_report(const StallView& v, uint64_t seq);
// For a timeout error: "waiting for rank 1: rank 1 last completed #3 3.0 s ago; ...".
std::string missing_ranks_clause(const StallView& v, uint64_t seq);

namespace detail {

// One per process group: the recorder its backend calls around every collective (a seqlock of
// atomics, never blocking) and the thread that publishes, watches and reports.
class StallInspector {
 public:
  StallInspector(std::shared_ptr<Store> store, std::string prefix, int rank, int size,
                 std::chrono::milliseconds warn);
  ~StallInspector();
  StallInspector(const StallInspector&) = delete;
  StallInspector& operator=(const StallInspector&) = delete;

  // Starts the background thread (a no-op when the inspector is off). Call once the group is up.
  void start(const std::string& backend);
  bool enabled() const { return core_ != nullptr; }

  // Collective `seq` starts (op: "allreduce", ...; bytes: this rank's contribution) / ends
  // (completed: false when it failed). Cheap: a clock read and a few atomic stores.
  void begin(uint64_t seq, const std::string& op, uint64_t bytes) noexcept;
  void end(uint64_t seq, bool completed = true) noexcept;

  // For the error of collective `seq` that timed out: " waiting for rank 1: ..." from a fresh
  // read of the other ranks' state, bounded by about 2 s; "" when the inspector is off. Never
  // throws and never hangs on an unreachable store.
  std::string diagnose(uint64_t seq) noexcept;

  struct Core;

 private:
  std::shared_ptr<Core> core_;
  std::thread thread_;
};

}  // namespace detail
}  // namespace minidl::dist
