// The stall inspector: the wording of reports and timeout diagnoses from given states, the
// MINIDL_STALL_WARN setting, and forked gloo groups where a rank sleeps, is SIGSTOPped or is
// late (rank 0's report and the timeout errors name it), or where nothing stalls (no report).
#include <doctest/doctest.h>
#include <fcntl.h>

#include <fstream>
#include <sstream>

#include "dist_test_util.h"
#include "parallel/distributed.h"
#include "parallel/process_group/process_group.h"
#include "parallel/process_group/stall_inspector.h"
#include "pg_test_util.h"
#include "autograd/ops.h"

using namespace minidl;
using namespace minidl::dist;
using namespace pgtest;
using disttest::contains;

namespace {

constexpr int64_t kS = 1000000000;  // ns per second

CollectiveState state(uint64_t seq, const std::string& op, int64_t since, uint64_t done,
                      int64_t done_at, int64_t heartbeat) {
  return CollectiveState{seq, op, seq ? 16u : 0u, since, done, done_at, heartbeat};
}

StallView view_at(int64_t now, std::vector<std::optional<CollectiveState>> states,
                  std::chrono::milliseconds warn = std::chrono::seconds(60)) {
  StallView v;
  v.backend = "gloo";
  v.states = std::move(states);
  v.now_ns = now;
  v.timing = StallTiming::from_warn(warn);
  return v;
}

}  // namespace

TEST_CASE("stall inspector: state text round-trips and bad text is refused") {
  const CollectiveState s = state(12, "allreduce", 5 * kS, 11, 4 * kS, 6 * kS);
  const auto back = decode_state(encode_state(s));
  REQUIRE(back.has_value());
  CHECK(back->seq == 12);
  CHECK(back->op == "allreduce");
  CHECK(back->bytes == 16);
  CHECK(back->since_ns == 5 * kS);
  CHECK(back->done_seq == 11);
  CHECK(back->done_ns == 4 * kS);
  CHECK(back->heartbeat_ns == 6 * kS);
  const auto idle = decode_state(encode_state(state(0, "", 0, 3, kS, 2 * kS)));
  REQUIRE(idle.has_value());
  CHECK(idle->op.empty());
  CHECK_FALSE(decode_state("v2 1 allreduce 4 5 6 7 8").has_value());
  CHECK_FALSE(decode_state("v1 1 allreduce").has_value());
}

TEST_CASE("stall inspector: timing and MINIDL_STALL_WARN") {
  using std::chrono::milliseconds;
  const StallTiming d = StallTiming::from_warn(milliseconds(60000));
  CHECK(d.publish == milliseconds(1000));
  CHECK(d.stale == milliseconds(3000));
  CHECK(StallTiming::from_warn(milliseconds(1000)).publish == milliseconds(250));
  CHECK(StallTiming::from_warn(milliseconds(1000)).stale == milliseconds(750));
  disttest::EnvGuard env;
  env.set("MINIDL_STALL_WARN", std::nullopt);
  CHECK(effective_stall_warn({}) == milliseconds(60000));
  env.set("MINIDL_STALL_WARN", "2.5");
  CHECK(effective_stall_warn({}) == milliseconds(2500));
  ProcessGroupOptions set;
  set.stall_warn = milliseconds(0);  // the option wins over the environment
  CHECK(effective_stall_warn(set) == milliseconds(0));
  env.set("MINIDL_STALL_WARN", "soon");
  const std::string m = disttest::expect_error([] { effective_stall_warn({}); }).message;
  CHECK_MESSAGE(contains(m, "MINIDL_STALL_WARN must be a number of seconds >= 0"), m);
  CHECK_MESSAGE(contains(m, "'soon'"), m);
}

TEST_CASE("stall inspector: report and diagnosis name present and missing ranks") {
  const int64_t now = 1000 * kS;
  // ranks 0 and 2 wait in allreduce #123 for 10 s; rank 1 finished #122 9.8 s ago and is alive;
  // rank 3 stopped 9.5 s ago; rank 4 is in broadcast #123; rank 5 never published.
  StallView v =
      view_at(now,
              {state(123, "allreduce", now - 10 * kS, 122, now - 10 * kS, now),
               state(0, "", 0, 122, now - 98 * kS / 10, now - kS / 2),
               state(123, "allreduce", now - 9 * kS, 122, now - 9 * kS, now - kS),
               state(0, "", 0, 122, now - 99 * kS / 10, now - 95 * kS / 10),
               state(123, "broadcast", now - 8 * kS, 122, now - 8 * kS, now), std::nullopt},
              std::chrono::seconds(5));  // warn after 5 s, stale after 3 s
  int64_t waited = 0;
  CHECK(stalled_collective(v, &waited) == 123);
  CHECK(waited == 10 * kS);
  const std::string r = stall_report(v, 123);
  CHECK_MESSAGE(contains(r,
                         "minidl stall inspector: gloo allreduce #123 (16 B): waiting 10.0 s "
                         "for ranks 1, 3-5; in it: ranks 0, 2\n"),
                r);
  CHECK_MESSAGE(contains(r,
                         "  rank 1 last completed #122 9.8 s ago; alive (heartbeat 0.5 s "
                         "ago), not in a collective — slow, or on a different code path\n"),
                r);
  CHECK_MESSAGE(contains(r,
                         "  rank 3 last completed #122 9.9 s ago; no heartbeat for 9.5 s — "
                         "stopped or hung"),
                r);
  CHECK_MESSAGE(contains(r,
                         "  rank 4 last completed #122 8.0 s ago; alive (heartbeat 0.0 s "
                         "ago), in broadcast #123 (16 B) for 8.0 s where the others are in "
                         "allreduce — the ranks called different collectives\n"),
                r);
  CHECK_MESSAGE(contains(r, "  rank 5 has published no state"), r);
  const std::string c = missing_ranks_clause(v, 123);
  CHECK_MESSAGE(contains(c, "waiting for ranks 1, 3-5: rank 1 last completed #122 9.8 s ago;"), c);
  CHECK_MESSAGE(contains(c, "; rank 5 has published no state"), c);
}

TEST_CASE(
    "stall inspector: a stopped rank inside the collective is missing, no stall gives no report") {
  const int64_t now = 500 * kS;
  // rank 1 was stopped inside #7 (its state says so, but it has been silent for 70 s)
  StallView v =
      view_at(now, {state(7, "allgather", now - 70 * kS, 6, now - 70 * kS, now),
                    state(7, "allgather", now - 70 * kS, 6, now - 70 * kS, now - 70 * kS)});
  CHECK(stalled_collective(v) == 7);
  const std::string r = stall_report(v, 7);
  CHECK_MESSAGE(contains(r, "waiting 70.0 s for rank 1; in it: rank 0\n"), r);
  CHECK_MESSAGE(contains(r,
                         "rank 1 last completed #6 70.0 s ago; was in allgather #7 (16 B) for "
                         "70.0 s; no heartbeat for 70.0 s — stopped or hung"),
                r);
  // 59 s in a collective is below the 60 s warning; idle ranks never stall
  StallView quiet = view_at(now, {state(9, "allreduce", now - 59 * kS, 8, now - 59 * kS, now),
                                  state(0, "", 0, 8, now - 59 * kS, now)});
  CHECK(stalled_collective(quiet) == 0);
  StallView idle = view_at(
      now, {state(0, "", 0, 8, now - 300 * kS, now), state(0, "", 0, 8, now - 300 * kS, now)});
  CHECK(stalled_collective(idle) == 0);
  // everyone in it: the report says so instead of naming nobody
  StallView all = view_at(now, {state(3, "allreduce", now - 61 * kS, 2, 0, now),
                                state(3, "allreduce", now - 61 * kS, 2, 0, now)});
  CHECK(contains(stall_report(all, 3), "every rank has waited 61.0 s in it"));
}

#if MINIDL_WITH_GLOO
namespace {

using StorePtr = std::shared_ptr<Store>;

// Sends this process's stderr (fd 2) to a temporary file; text() is what was written so far.
class StderrToFile {
 public:
  StderrToFile() {
    char name[] = "/tmp/minidl_stall_XXXXXX";
    const int fd = ::mkstemp(name);
    path_ = name;
    std::fflush(stderr);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrToFile() { ::unlink(path_.c_str()); }
  std::string text() const {
    std::fflush(stderr);
    std::ifstream f(path_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  std::string path_;
};

std::shared_ptr<ProcessGroup> group(const StorePtr& store, int rank, int world,
                                    std::chrono::milliseconds timeout,
                                    std::chrono::milliseconds warn) {
  return make_process_group("gloo", store, rank, world,
                            ProcessGroupOptions{.timeout = timeout, .stall_warn = warn});
}

void require_ok(const std::vector<RankReport>& reports) {
  for (size_t r = 0; r < reports.size(); ++r)
    CHECK_MESSAGE(reports[r].text == "OK", "rank ", r, ": ", reports[r].text);
}

}  // namespace

TEST_CASE("stall inspector: rank 0 reports a rank that stopped participating, timeouts name it") {
  require_ok(run_ranks(
      3,
      [](int rank, StorePtr store) {
        StderrToFile err;
        auto pg = group(store, rank, 3, 4000ms, 2000ms);
        Tensor t = ones({4});
        pg->allreduce(t)->wait();  // #1
        pg->allreduce(t)->wait();  // #2
        Checker c;
        if (rank == 1) {  // alive but elsewhere until the others have failed #3
          store->wait({"failed0", "failed2"}, 8000ms);
          c.check(!contains(err.text(), "stall inspector"), "rank 1 reported: " + err.text());
          return c.str();
        }
        disttest::Failure f = disttest::expect_error([&] { pg->allreduce(t)->wait(); });  // #3
        store->set("failed" + std::to_string(rank), "1");
        const std::string out = err.text();
        c.check(contains(f.message, "gloo allreduce #3 (rank " + std::to_string(rank) +
                                        " of 3) failed: timed out after 4 s waiting for rank 1: "
                                        "rank 1 last completed #2 "),
                "error: " + f.message);
        c.check(contains(f.message, "not in a collective — slow, or on a different code path"),
                "error: " + f.message);
        c.check(f.seconds > 3.9 && f.seconds < 5.5, "took " + std::to_string(f.seconds) + " s");
        if (rank == 2) {  // rank 0 is fine, so only it reports
          c.check(!contains(out, "stall inspector"), "rank 2 reported: " + out);
          return c.str();
        }
        c.check(contains(out, "minidl stall inspector: gloo allreduce #3 (16 B): waiting 2."),
                "report: " + out);
        c.check(contains(out, " s for rank 1; in it: ranks 0, 2\n  rank 1 last completed #2 "),
                "report: " + out);
        c.check(contains(out, " ago; alive (heartbeat "), "report: " + out);
        return c.str();
      },
      12000ms));
}

TEST_CASE("stall inspector: a SIGSTOPped rank is reported as stopped, with its last collective") {
  auto reports = run_ranks(
      2,
      [](int rank, StorePtr store) {
        StderrToFile err;
        auto pg = group(store, rank, 2, 6000ms, 5000ms);
        Tensor t = ones({4});
        pg->allreduce(t)->wait();  // #1
        pg->allreduce(t)->wait();  // #2
        if (rank == 1) {
          store->set("pid1", std::to_string(::getpid()));
          std::this_thread::sleep_for(1500ms);  // its state after #2 gets published
          ::raise(SIGSTOP);                     // rank 0 SIGKILLs it when done
          return std::string("rank 1 was not stopped");
        }
        disttest::Failure f = disttest::expect_error([&] { pg->allreduce(t)->wait(); });  // #3
        ::kill(pid_t(std::stoi(store->get_string("pid1"))), SIGKILL);
        Checker c;
        const std::string out = err.text();
        c.check(contains(out, "gloo allreduce #3 (16 B): waiting 5.") &&
                    contains(out, " s for rank 1; in it: rank 0\n  rank 1 last completed #2 "),
                "report: " + out);
        c.check(contains(out, "; no heartbeat for ") && contains(out, " — stopped or hung"),
                "report: " + out);
        c.check(contains(f.message,
                         "timed out after 6 s waiting for rank 1: rank 1 last "
                         "completed #2 ") &&
                    contains(f.message, " — stopped or hung"),
                "error: " + f.message);
        return c.str();
      },
      12000ms);
  CHECK_MESSAGE(reports[0].text == "OK", reports[0].text);
  CHECK(reports[1].exit_code == 128 + SIGKILL);
}

TEST_CASE("stall inspector: when rank 0 is the one stopped, a waiting rank reports it") {
  auto reports = run_ranks(
      2,
      [](int rank, StorePtr store) {
        StderrToFile err;
        auto pg = group(store, rank, 2, 6000ms, 5000ms);
        Tensor t = ones({4});
        pg->allreduce(t)->wait();  // #1
        pg->allreduce(t)->wait();  // #2
        if (rank == 0) {
          store->set("pid0", std::to_string(::getpid()));
          std::this_thread::sleep_for(1500ms);  // its state after #2 gets published
          ::raise(SIGSTOP);                     // rank 1 SIGKILLs it when done
          return std::string("rank 0 was not stopped");
        }
        disttest::Failure f = disttest::expect_error([&] { pg->allreduce(t)->wait(); });  // #3
        ::kill(pid_t(std::stoi(store->get_string("pid0"))), SIGKILL);
        Checker c;
        const std::string out = err.text();
        c.check(contains(out, "gloo allreduce #3 (16 B): waiting 5.") &&
                    contains(out, " s for rank 0; in it: rank 1\n  rank 0 last completed #2 ") &&
                    contains(out, " — stopped or hung"),
                "report: " + out);
        c.check(contains(f.message,
                         "timed out after 6 s waiting for rank 0: rank 0 last "
                         "completed #2 "),
                "error: " + f.message);
        return c.str();
      },
      12000ms);
  CHECK(reports[0].exit_code == 128 + SIGKILL);
  CHECK_MESSAGE(reports[1].text == "OK", reports[1].text);
}

TEST_CASE("stall inspector: rank 0 reports its own lateness when the others wait for it") {
  require_ok(run_ranks(2, [](int rank, StorePtr store) {
    StderrToFile err;
    auto pg = group(store, rank, 2, 8000ms, 2000ms);
    Tensor t = ones({4});
    pg->allreduce(t)->wait();                            // #1
    if (rank == 0) std::this_thread::sleep_for(4000ms);  // rank 1 waits in #2 meanwhile
    pg->allreduce(t)->wait();                            // #2 succeeds
    Checker c;
    const std::string out = err.text();
    if (rank == 1) {
      c.check(!contains(out, "stall inspector"), "rank 1 reported: " + out);
      return c.str();
    }
    c.check(contains(out, "gloo allreduce #2 (16 B): waiting ") &&
                contains(out, " s for rank 0; in it: rank 1\n  rank 0 last completed #1 ") &&
                contains(out, " ago; not in a collective — slow, or on a different code path"),
            "report: " + out);
    return c.str();
  }));
}

TEST_CASE("stall inspector: nothing stalls, nothing is reported, and stall_warn 0 turns it off") {
  require_ok(run_ranks(2, [](int rank, StorePtr store) {
    StderrToFile err;
    auto pg = group(store, rank, 2, 5000ms, 1000ms);
    Tensor t = ones({1 << 12});
    for (int k = 0; k < 20; ++k) pg->allreduce(t);
    pg->barrier()->wait();
    std::this_thread::sleep_for(1600ms);  // both idle, outside any collective, past stall_warn
    for (int k = 0; k < 20; ++k) pg->allreduce(t)->wait();
    Checker c;
    c.check(pg->sequence_number() == 41, "sequence number");
    c.check(err.text().empty(), "printed: " + err.text());
    // off: the timeout error is the generic one and nothing is printed
    auto off = group(store, rank, 2, 1000ms, 0ms);
    off->allreduce(t)->wait();
    if (rank == 1) {
      store->wait({"off_failed"}, 5000ms);
      return c.str();
    }
    disttest::Failure f = disttest::expect_error([&] { off->allreduce(t)->wait(); });
    store->set("off_failed", "1");
    c.check(contains(f.message,
                     "timed out after 1 s; a peer may have died, be slow, or skipped "
                     "this collective"),
            "error: " + f.message);
    c.check(err.text().empty(), "printed: " + err.text());
    return c.str();
  }));
}
#endif  // MINIDL_WITH_GLOO
