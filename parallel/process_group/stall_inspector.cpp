// The stall inspector's recorder and thread: the backend's communication path writes a seqlock
// of atomics; a background thread, on its own store connection, publishes that state (about once
// a second), watches for stalls (rank 0 reports them) and answers timeout diagnoses in bounded
// time.
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>

#include "parallel/process_group/stall_inspector.h"
#include "parallel/store/c10d_store.h"
#include "parallel/store/tcp_store.h"

namespace minidl::dist::detail {

namespace {

using std::chrono::milliseconds;

// How long a store request of the inspector may take, and how long a timeout error waits for
// the other ranks' state before it gives up on it.
constexpr milliseconds kStoreTimeout{2000};
constexpr milliseconds kDiagnoseWait{2000};

constexpr std::array<const char*, 7> kOps = {
    "collective", "allreduce", "broadcast", "allgather", "gather", "reduce_scatter", "barrier"};

uint8_t op_code(const std::string& op) {
  for (size_t i = 1; i < kOps.size(); ++i)
    if (op == kOps[i]) return uint8_t(i);
  return 0;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct StallInspector::Core {
  // identity and configuration (immutable after construction)
  std::string backend, prefix;
  int rank = 0, size = 1;
  StallTiming timing;
  std::string host;  // the TcpStore's address, for a connection of our own
  int port = 0;
  std::shared_ptr<Store> shared;  // any other Store: used as is

  // the recorder: a seqlock (odd version: a write is under way)
  std::atomic<uint64_t> version{0}, seq{0}, bytes{0}, done_seq{0};
  std::atomic<int64_t> since{0}, done_ns{0};
  std::atomic<uint8_t> op{0};

  // thread control and timeout diagnoses
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false, exited = false;
  uint64_t diag_asked = 0, diag_served = 0;
  std::vector<std::optional<CollectiveState>> diag_states;
  std::string diag_error;

  // the thread's own
  std::shared_ptr<Store> client;

  void write_lock() noexcept {
    uint64_t v = version.load(std::memory_order_relaxed);
    for (;;) {
      if (!(v & 1) && version.compare_exchange_weak(v, v + 1, std::memory_order_acquire,
                                                    std::memory_order_relaxed))
        break;
      v = version.load(std::memory_order_relaxed);
    }
  }
  void write_unlock() noexcept { version.fetch_add(1, std::memory_order_release); }

  CollectiveState snapshot(int64_t now) const {
    CollectiveState s;
    uint8_t code = 0;
    for (;;) {
      const uint64_t v1 = version.load(std::memory_order_acquire);
      if (v1 & 1) {
        std::this_thread::yield();
        continue;
      }
      // Acquire loads keep the version re-check below after them (no fences: ThreadSanitizer
      // does not model atomic_thread_fence; on x86 these are plain loads either way).
      s.seq = seq.load(std::memory_order_acquire);
      code = op.load(std::memory_order_acquire);
      s.bytes = bytes.load(std::memory_order_acquire);
      s.since_ns = since.load(std::memory_order_acquire);
      s.done_seq = done_seq.load(std::memory_order_acquire);
      s.done_ns = done_ns.load(std::memory_order_acquire);
      if (version.load(std::memory_order_relaxed) == v1) break;
    }
    s.op = s.seq ? kOps[code < kOps.size() ? code : 0] : "";
    s.heartbeat_ns = now;
    return s;
  }

  // This thread's store: its own TcpStore connection (reconnected after a failure), so that it
  // never waits behind the training thread's requests nor delays them.
  Store& store() {
    if (shared) return *shared;
    if (!client)
      client = std::make_shared<TcpStore>(TcpStoreOptions{
          .host = host, .port = port, .is_master = false, .timeout = kStoreTimeout, .rank = rank});
    return *client;
  }
  std::string key(int r) const { return prefix + "stall/" + std::to_string(r); }
  std::string alert_key() const { return prefix + "stall/alerts"; }

  // Runs `fn` on the store; on failure drops the connection and returns the error.
  template <typename F>
  std::string guarded(F&& fn) {
    try {
      fn(store());
      return "";
    } catch (const std::exception& e) {
      client.reset();
      return e.what();
    }
  }

  // Every rank's state (`self` for this rank); `error` says why it is incomplete.
  std::vector<std::optional<CollectiveState>> read_all(const CollectiveState& self,
                                                       std::string* error) {
    std::vector<std::optional<CollectiveState>> out(static_cast<size_t>(size));
    out[size_t(rank)] = self;
    *error = guarded([&](Store& s) {
      for (int r = 0; r < size; ++r)
        if (r != rank && s.check({key(r)})) out[size_t(r)] = decode_state(s.get_string(key(r)));
    });
    return out;
  }

  StallView view(std::vector<std::optional<CollectiveState>> states, int64_t now,
                 std::string error) const {
    return StallView{backend, rank, std::move(states), now, timing, std::move(error)};
  }

  void print(const std::string& report) {
    if (report.empty()) return;
    std::fputs(report.c_str(), stderr);
    std::fflush(stderr);
  }

  void loop();
};

void StallInspector::Core::loop() {
  const int64_t ms = 1000000;
  const int64_t publish_ns = timing.publish.count() * ms, warn_ns = timing.warn.count() * ms;
  int64_t next_publish = 0, next_look = 0, alerts_seen = 0;
  uint64_t alerted = 0;
  // (seq, multiple of warn): last reported, and last looked at for this rank's own wait
  std::pair<uint64_t, int64_t> reported{0, 0}, looked{0, 0};
  for (;;) {
    bool diag = false;
    uint64_t asked = 0;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, timing.publish / 4, [&] { return stop || diag_asked != diag_served; });
      if (stop) break;
      asked = diag_asked;
      diag = asked != diag_served;
    }
    int64_t now = now_ns();
    const CollectiveState self = snapshot(now);
    if (diag) {
      std::string error;
      auto states = read_all(self, &error);
      std::lock_guard<std::mutex> lock(mu);
      diag_states = std::move(states);
      diag_error = error;
      diag_served = asked;
      cv.notify_all();
    }
    if (now >= next_publish) {
      guarded([&](Store& s) { s.set(key(rank), encode_state(self)); });
      next_publish = now + publish_ns;
    }
    // Waiting in a collective for a new multiple of warn: look (rank 0), or raise the alert
    // (the others) and look, to report only if rank 0 cannot (unreachable or silent).
    const bool own = self.seq != 0 && now - self.since_ns >= warn_ns;
    const std::pair<uint64_t, int64_t> own_level{self.seq,
                                                 own ? (now - self.since_ns) / warn_ns : 0};
    bool look = own && own_level != looked;
    if (rank != 0 && own && alerted != self.seq) {
      const std::string err =
          guarded([&](Store& s) { s.add(alert_key(), 1); });  // rank 0 polls this counter
      if (err.empty()) alerted = self.seq;
    }
    if (rank == 0 && !look && now >= next_look) {
      int64_t alerts = alerts_seen;
      guarded([&](Store& s) { alerts = s.add(alert_key(), 0); });
      look = alerts != alerts_seen || reported.first != 0;  // new alerts, or a stall goes on
      alerts_seen = alerts;
      next_look = now + publish_ns;
    }
    if (!look) continue;
    if (own) looked = own_level;
    std::string error;
    auto states = read_all(self, &error);
    now = now_ns();
    StallView v = view(std::move(states), now, error);
    int64_t waited = 0;
    const uint64_t seq = stalled_collective(v, &waited);
    if (seq == 0) {
      reported = {0, 0};
      continue;
    }
    const std::pair<uint64_t, int64_t> level{seq, std::max<int64_t>(waited / warn_ns, 1)};
    if (level == reported) continue;
    if (rank != 0) {  // report only when rank 0 cannot: its state is unreadable or stale
      const auto& zero = v.states[0];
      if (error.empty() && zero && now - zero->heartbeat_ns <= timing.stale.count() * ms) continue;
    }
    reported = level;
    std::string report = stall_report(v, seq);
    if (!error.empty())
      report += "  (the other ranks' state is incomplete: " + error +
                "; the store is hosted by rank 0 — is it stopped or dead?)\n";
    print(report);
  }
  std::lock_guard<std::mutex> lock(mu);
  exited = true;
  cv.notify_all();
}

StallInspector::StallInspector(std::shared_ptr<Store> store, std::string prefix, int rank, int size,
                               milliseconds warn) {
  if (warn.count() <= 0) return;
  core_ = std::make_shared<Core>();
  core_->prefix = std::move(prefix);
  core_->rank = rank;
  core_->size = size;
  core_->timing = StallTiming::from_warn(warn);
  if (auto* tcp = dynamic_cast<TcpStore*>(store.get())) {
    core_->host = tcp->host();
    core_->port = tcp->port();
  } else if (auto* c10d = dynamic_cast<C10dStore*>(store.get())) {
    try {  // a connection of its own, as for a TcpStore
      core_->shared = c10d->connect_another();
    } catch (const Error&) {
      core_->shared = std::move(store);
    }
  } else {
    core_->shared = std::move(store);
  }
}

void StallInspector::start(const std::string& backend) {
  if (!core_ || thread_.joinable()) return;
  core_->backend = backend;
  // The thread owns the core too: a thread stuck on an unresponsive store can be left behind.
  thread_ = std::thread([core = core_] { core->loop(); });
}

StallInspector::~StallInspector() {
  if (!thread_.joinable()) return;
  std::unique_lock<std::mutex> lock(core_->mu);
  core_->stop = true;
  core_->cv.notify_all();
  // A store request in flight ends within kStoreTimeout plus the client's grace; do not wait
  // for it at exit.
  if (core_->cv.wait_for(lock, milliseconds(500), [&] { return core_->exited; })) {
    lock.unlock();
    thread_.join();
  } else {
    thread_.detach();
  }
}

void StallInspector::begin(uint64_t seq, const std::string& op, uint64_t bytes) noexcept {
  if (!core_) return;
  const int64_t now = now_ns();
  Core& c = *core_;
  c.write_lock();
  // Release stores keep the odd version (taken above) visible before each field.
  c.seq.store(seq, std::memory_order_release);
  c.op.store(op_code(op), std::memory_order_release);
  c.bytes.store(bytes, std::memory_order_release);
  c.since.store(now, std::memory_order_release);
  c.write_unlock();
}

void StallInspector::end(uint64_t seq, bool completed) noexcept {
  if (!core_) return;
  const int64_t now = now_ns();
  Core& c = *core_;
  c.write_lock();
  if (completed && seq > c.done_seq.load(std::memory_order_relaxed)) {
    c.done_seq.store(seq, std::memory_order_release);
    c.done_ns.store(now, std::memory_order_release);
  }
  if (seq >= c.seq.load(std::memory_order_relaxed)) c.seq.store(0, std::memory_order_release);
  c.write_unlock();
}

std::string StallInspector::diagnose(uint64_t seq) noexcept {
  if (!core_ || !thread_.joinable()) return "";
  try {
    Core& c = *core_;
    std::unique_lock<std::mutex> lock(c.mu);
    const uint64_t ticket = ++c.diag_asked;
    c.cv.notify_all();
    const std::string generic = "; a peer may have died, be slow, or skipped this collective";
    if (!c.cv.wait_for(lock, kDiagnoseWait, [&] { return c.diag_served >= ticket || c.exited; }) ||
        c.diag_served < ticket)
      return generic + " (the other ranks' state could not be read from the store within " +
             format_seconds(kDiagnoseWait) + ")";
    if (!c.diag_error.empty())
      return generic + " (the other ranks' state could not be read: " + c.diag_error + ")";
    const std::string clause = missing_ranks_clause(c.view(c.diag_states, now_ns(), ""), seq);
    return clause.empty() ? generic : " " + clause;
  } catch (...) {
    return "";
  }
}

}  // namespace minidl::dist::detail
