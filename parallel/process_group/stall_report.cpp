// The stall inspector's pure parts: the published state's text form, its timing, the
// MINIDL_STALL_WARN setting, and the wording of stall reports and timeout diagnoses.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "parallel/process_group/stall_inspector.h"
#include "tensor/error.h"

namespace minidl::dist {

using std::chrono::milliseconds;

std::string encode_state(const CollectiveState& s) {
  std::ostringstream os;
  os << "v1 " << s.seq << ' ' << (s.op.empty() ? "-" : s.op) << ' ' << s.bytes << ' ' << s.since_ns
     << ' ' << s.done_seq << ' ' << s.done_ns << ' ' << s.heartbeat_ns;
  return os.str();
}

std::optional<CollectiveState> decode_state(const std::string& text) {
  std::istringstream is(text);
  std::string version;
  CollectiveState s;
  if (!(is >> version >> s.seq >> s.op >> s.bytes >> s.since_ns >> s.done_seq >> s.done_ns >>
        s.heartbeat_ns) ||
      version != "v1")
    return std::nullopt;
  if (s.op == "-") s.op.clear();
  return s;
}

StallTiming StallTiming::from_warn(milliseconds warn) {
  StallTiming t;
  t.warn = warn;
  t.publish = std::clamp(warn / 4, milliseconds(100), milliseconds(1000));
  t.stale = 3 * t.publish;
  return t;
}

milliseconds effective_stall_warn(const ProcessGroupOptions& options) {
  if (options.stall_warn) {
    MINIDL_CHECK(options.stall_warn->count() >= 0,
                 "ProcessGroupOptions::stall_warn must be >= 0 (0 turns the stall inspector off)");
    return *options.stall_warn;
  }
  const char* env = std::getenv("MINIDL_STALL_WARN");
  if (!env || !*env) return milliseconds(60000);
  char* end = nullptr;
  const double s = std::strtod(env, &end);
  MINIDL_CHECK(end && *end == '\0' && std::isfinite(s) && s >= 0 && s < 1e9,
               "MINIDL_STALL_WARN must be a number of seconds >= 0 (0 turns the stall inspector "
               "off), got '",
               env, "'");
  return milliseconds(int64_t(std::llround(s * 1000)));
}

namespace {

std::string secs(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", double(std::max<int64_t>(ns, 0)) / 1e9);
  return buf;
}

std::string bytes_str(uint64_t b) {
  char buf[32];
  if (b < 1024)
    std::snprintf(buf, sizeof(buf), "%llu B", (unsigned long long)b);
  else if (b < (1u << 20))
    std::snprintf(buf, sizeof(buf), "%.1f KiB", double(b) / 1024);
  else
    std::snprintf(buf, sizeof(buf), "%.1f MiB", double(b) / double(1 << 20));
  return buf;
}

// "rank 1", "ranks 0, 2-5, 7".
std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    s += (i ? ", " : "") + std::to_string(ranks[i]);
    if (j > i) s += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return s;
}

enum class Role { in_it, done, unknown, stale, other, idle };

Role role_of(const StallView& v, int r, uint64_t seq, const std::string& op) {
  const auto& st = v.states[size_t(r)];
  if (!st) return Role::unknown;
  if (r != v.self && v.now_ns - st->heartbeat_ns > v.timing.stale.count() * 1000000) {
    return Role::stale;
  }
  if (st->seq == seq && st->op == op) return Role::in_it;
  if (st->done_seq >= seq) return Role::done;
  return st->seq != 0 ? Role::other : Role::idle;
}

// The op of collective `seq` as the live ranks in it see it (the lowest such rank's).
const CollectiveState* first_in(const StallView& v, uint64_t seq) {
  for (size_t r = 0; r < v.states.size(); ++r) {
    const auto& st = v.states[r];
    if (st && st->seq == seq &&
        (int(r) == v.self || v.now_ns - st->heartbeat_ns <= v.timing.stale.count() * 1000000))
      return &*st;
  }
  return nullptr;
}

// "rank 1 last completed #3 1.0 s ago; alive (heartbeat 0.2 s ago), not in a collective — slow,
// or on a different code path".
std::string describe(const StallView& v, int r, Role role, const CollectiveState& ref) {
  const std::string who = "rank " + std::to_string(r);
  const auto& st = v.states[size_t(r)];
  if (role == Role::unknown)
    return who + (v.read_error.empty()
                      ? " has published no state — not started, or it cannot reach the store"
                      : "'s state is unknown (the store did not answer)");
  std::string s = who + (st->done_seq ? " last completed #" + std::to_string(st->done_seq) + " " +
                                            secs(v.now_ns - st->done_ns) + " ago"
                                      : " has completed no collective yet");
  const std::string in = st->seq
                             ? st->op + " #" + std::to_string(st->seq) + " (" +
                                   bytes_str(st->bytes) + ") for " + secs(v.now_ns - st->since_ns)
                             : "";
  const std::string alive =
      r == v.self ? "" : "alive (heartbeat " + secs(v.now_ns - st->heartbeat_ns) + " ago), ";
  switch (role) {
    case Role::stale:
      return s + (in.empty() ? "" : "; was in " + in) + "; no heartbeat for " +
             secs(v.now_ns - st->heartbeat_ns) +
             " — stopped or hung (SIGSTOP, a debugger, swapping, a stuck system call)";
    case Role::other:
      return s + "; " + alive + "in " + in +
             (st->seq == ref.seq ? " where the others are in " + ref.op +
                                       " — the ranks called different collectives"
                                 : " — a different collective: the ranks issued collectives in "
                                   "a different order, or it waits for another rank");
    case Role::idle:
      return s + "; " + alive + "not in a collective — slow, or on a different code path";
    default:
      return s;
  }
}

struct Split {
  std::vector<int> in_it, missing;
  std::vector<Role> roles;
};

Split split(const StallView& v, uint64_t seq, const std::string& op) {
  Split sp;
  for (int r = 0; r < int(v.states.size()); ++r) {
    const Role role = role_of(v, r, seq, op);
    sp.roles.push_back(role);
    if (role == Role::in_it)
      sp.in_it.push_back(r);
    else if (role != Role::done)
      sp.missing.push_back(r);
  }
  return sp;
}

}  // namespace

uint64_t stalled_collective(const StallView& v, int64_t* waited_ns) {
  uint64_t best = 0;
  int64_t since = 0;
  for (size_t r = 0; r < v.states.size(); ++r) {
    const auto& st = v.states[r];
    if (!st || st->seq == 0) continue;
    if (int(r) != v.self && v.now_ns - st->heartbeat_ns > v.timing.stale.count() * 1000000)
      continue;  // a stopped rank's last state says nothing about now
    if (v.now_ns - st->since_ns < v.timing.warn.count() * 1000000) continue;
    if (best == 0 || st->seq < best || (st->seq == best && st->since_ns < since)) {
      best = st->seq;
      since = st->since_ns;
    }
  }
  if (waited_ns) *waited_ns = best ? v.now_ns - since : 0;
  return best;
}

std::string stall_report(const StallView& v, uint64_t seq) {
  const CollectiveState* ref = first_in(v, seq);
  if (!ref) return "";
  const Split sp = split(v, seq, ref->op);
  int64_t since = ref->since_ns;
  for (int r : sp.in_it) since = std::min(since, v.states[size_t(r)]->since_ns);
  std::string out = "minidl stall inspector: " + v.backend + " " + ref->op + " #" +
                    std::to_string(seq) + " (" + bytes_str(ref->bytes) + "): ";
  if (sp.missing.empty())
    return out + "every rank has waited " + secs(v.now_ns - since) +
           " in it — a network problem, or different sizes on different ranks "
           "(MINIDL_DIST_DEBUG=1 checks them)\n";
  out += "waiting " + secs(v.now_ns - since) + " for " + rank_list(sp.missing) +
         "; in it: " + rank_list(sp.in_it) + "\n";
  const size_t shown = std::min<size_t>(sp.missing.size(), 8);
  for (size_t i = 0; i < shown; ++i) {
    const int r = sp.missing[i];
    out += "  " + describe(v, r, sp.roles[size_t(r)], *ref) + "\n";
  }
  if (sp.missing.size() > shown)
    out += "  ... and " + std::to_string(sp.missing.size() - shown) + " more missing ranks\n";
  return out;
}

std::string missing_ranks_clause(const StallView& v, uint64_t seq) {
  const CollectiveState* ref = first_in(v, seq);
  if (!ref) return "";
  const Split sp = split(v, seq, ref->op);
  if (sp.missing.empty())
    return "every rank is in it — a network problem, or different sizes on different ranks "
           "(MINIDL_DIST_DEBUG=1 checks them)";
  std::string out = "waiting for " + rank_list(sp.missing) + ": ";
  const size_t shown = std::min<size_t>(sp.missing.size(), 4);
  for (size_t i = 0; i < shown; ++i) {
    const int r = sp.missing[i];
    out += (i ? "; " : "") + describe(v, r, sp.roles[size_t(r)], *ref);
  }
  if (sp.missing.size() > shown)
    out += "; and " + std::to_string(sp.missing.size() - shown) + " more";
  return out;
}

}  // namespace minidl::dist
