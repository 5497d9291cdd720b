// PeerWatch: the heartbeat thread. Each beat adds 1 to this rank's key and reads the others'
// (add 0: never blocks); a silent peer is reported once on stderr and in peer_watch_report();
// a store that does not answer within the silence limit aborts the main client.
#include "parallel/rendezvous/peer_watch.h"

#include <algorithm>
#include <cstdio>

#include "parallel/store/tcp_store.h"
#include "tensor/error.h"

namespace minidl::dist {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::mutex g_report_mu;
std::string g_report;

void set_report(const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(g_report_mu);
    g_report = text;
  }
  std::fprintf(stderr, "minidl: %s\n", text.c_str());
  std::fflush(stderr);
}

bool loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

const PeerWatch* peer_watch_of(const TcpStore& store) {
  return dynamic_cast<const PeerWatch*>(store.companion());
}

std::string peer_watch_report() {
  std::lock_guard<std::mutex> lock(g_report_mu);
  return g_report;
}

milliseconds PeerWatch::interval_for(milliseconds timeout) {
  return std::clamp(timeout / 10, milliseconds(100), milliseconds(1000));
}

milliseconds PeerWatch::silence_limit(milliseconds timeout) {
  return std::clamp(timeout / 2, milliseconds(3000), milliseconds(10000));
}

PeerWatch::PeerWatch(TcpStore& main, PeerWatchOptions options)
    : main_(main),
      o_(std::move(options)),
      interval_(interval_for(o_.timeout)),
      silence_(silence_limit(o_.timeout)) {
  MINIDL_CHECK(o_.rank >= 0 && size_t(o_.rank) < o_.peers.size(), "PeerWatch: rank ", o_.rank,
               " is not in [0, ", o_.peers.size(), ")");
  master_ = main_.host() + ":" + std::to_string(main_.port());
  // The master reaches its own server over loopback (it may listen on every interface).
  const std::string host =
      main_.is_master() && !loopback(main_.host()) ? "127.0.0.1" : main_.host();
  // Its own connection: a blocking get on the main client must not delay a heartbeat. Every
  // request is bounded by the silence limit.
  hb_ = std::make_unique<TcpStore>(
      TcpStoreOptions{.host = host, .port = main_.port(), .timeout = silence_, .rank = o_.rank});
  last_.assign(o_.peers.size(), 0);
  seen_.assign(o_.peers.size(), Clock::now());
  thread_ = std::thread([this] { loop(); });
}

PeerWatch::~PeerWatch() {
  std::unique_lock<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_all();
  // A beat in flight on a dead link would wait out the silence limit: give it a second.
  if (!cv_.wait_for(lock, milliseconds(1500), [this] { return exited_; }))
    hb_->abort("the heartbeat was stopped (process group teardown)");
  lock.unlock();
  thread_.join();
}

std::string PeerWatch::name(int rank) const {
  const PeerAddress& p = o_.peers[size_t(rank)];
  std::string s = "rank " + std::to_string(rank) + " (" + (p.address.empty() ? "?" : p.address);
  if (!p.host.empty() && p.host != p.address) s += ", host " + p.host;
  return s + ")";
}

void PeerWatch::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  bool healthy = true;
  while (!stop_) {
    lock.unlock();
    healthy = beat();
    lock.lock();
    if (!healthy) break;
    cv_.wait_for(lock, interval_, [this] { return stop_; });
  }
  if (healthy) {  // goodbye: peers stop expecting beats from this rank
    lock.unlock();
    try {
      hb_->set_timeout(std::min(silence_, milliseconds(1000)));
      hb_->set(key(o_.rank), std::string("-1"));
    } catch (const std::exception&) {
    }
    lock.lock();
  }
  exited_ = true;
  cv_.notify_all();
}

bool PeerWatch::beat() {
  try {
    hb_->add(key(o_.rank), 1);
    if (o_.watch_peers) {
      const auto now = Clock::now();
      for (int r = 0; r < int(o_.peers.size()); ++r) {
        if (r == o_.rank || last_[size_t(r)] < 0) continue;
        const int64_t v = hb_->add(key(r), 0);
        if (v != last_[size_t(r)]) last_[size_t(r)] = v, seen_[size_t(r)] = now;
      }
      check_peers(Clock::now());
    }
    return true;
  } catch (const std::exception& e) {
    const std::string why = hb_->broken_reason();
    // A server that closed the connection has exited (the main client sees that at once by
    // itself, and at the end of a run that is normal); silence is what needs the diagnosis.
    if (why.find("did not answer") == std::string::npos) return false;
    std::string text = "rank " + std::to_string(o_.rank) + ": the store at " + master_ +
                       " (hosted by " + name(0) + ") answered no heartbeat for " +
                       format_seconds(silence_) + ": " + name(0) +
                       " is unreachable (link down?) or hung; store requests now fail at once";
    set_report(text);
    main_.abort(text);
    return false;
  }
}

void PeerWatch::check_peers(Clock::time_point now) {
  std::vector<int> silent;
  for (int r = 0; r < int(o_.peers.size()); ++r)
    if (r != o_.rank && last_[size_t(r)] >= 0 && now - seen_[size_t(r)] > silence_)
      silent.push_back(r);
  if (silent == reported_) return;
  reported_ = silent;
  if (silent.empty()) return;
  std::string who;
  for (int r : silent) who += (who.empty() ? "" : ", ") + name(r);
  set_report("rank " + std::to_string(o_.rank) + ": no heartbeat for " + format_seconds(silence_) +
             " from " + who + ": unreachable (link down?), hung or dead");
}

}  // namespace minidl::dist
