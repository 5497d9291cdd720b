// Rendezvous: env:// and tcp:// connect to a TcpStore hosted by rank 0; file:// has rank 0
// publish its store's address in a file (file_rendezvous.cpp). Then every rank registers and
// waits, bounded by the timeout.
#include "parallel/rendezvous/rendezvous.h"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <thread>

#include "parallel/store/c10d_store.h"
#include "parallel/rendezvous/peer_watch.h"
#include "parallel/rendezvous/file_rendezvous.h"
#include "parallel/store/socket.h"
#include "parallel/store/tcp_store.h"
#include "tensor/error.h"

namespace minidl::dist {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::optional<int> parse_int(const std::string& s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

[[noreturn]] void fail_all(Store& store, const std::string& where, const std::string& why) {
  try {
    store.set("rdzv/error", why);  // lets the waiting ranks fail now, not at their timeout
  } catch (const Error&) {
  }
  MINIDL_FAIL("rendezvous via ", where, " failed: ", why);
}

}  // namespace

namespace {

// register_rank, also returning every rank's host name and address (for the heartbeat).
void register_with_peers(Store& store, RendezvousInfo& info, milliseconds timeout,
                         const std::string& where, bool* joined, std::vector<PeerAddress>* peers) {
  const int r = info.rank, ws = info.world_size;
  const std::string ws_text = std::to_string(ws);
  // Counted on arrival, before any check can fail: a failing rank 0 lingers until every rank
  // that arrived has read the error (otherwise a peer would only see the server vanish).
  store.add("rdzv/joined", 1);
  if (joined) *joined = true;
  const std::string registered = store.compare_set("rdzv/world_size", "", ws_text);
  if (registered != ws_text)
    fail_all(store, where,
             "rank " + std::to_string(r) + " has world_size " + ws_text +
                 " but another rank registered world_size " + registered);
  if (store.add("rdzv/count/" + std::to_string(r), 1) > 1)
    fail_all(store, where, "rank " + std::to_string(r) + " joined twice");
  const std::string me = local_host_name();
  std::string address;  // what peers use to reach this rank, named in their errors
  if (!info.master_addr.empty())
    address = net::local_address_towards(info.master_addr, std::max(info.master_port, 1));
  store.set("rank_addr/" + std::to_string(r), address.empty() ? me : address);
  store.set("rank/" + std::to_string(r), me);  // last: peers wait for this key

  std::vector<std::string> keys;
  for (int i = 0; i < ws; ++i) keys.push_back("rank/" + std::to_string(i));
  const auto deadline = Clock::now() + timeout;
  for (;;) {  // wait in slices so an error from another rank stops us early
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      std::vector<int> missing;
      for (int i = 0; i < ws; ++i)
        if (!store.check({keys[size_t(i)]})) missing.push_back(i);
      if (missing.empty()) break;
      MINIDL_FAIL("rendezvous via ", where, " timed out after ", format_seconds(timeout), " (rank ",
                  r, "): expected ", ws, ", joined ", ws - int(missing.size()), ", missing ranks ",
                  rank_list(missing));
    }
    try {
      store.wait(keys, std::min(left, milliseconds(100)));
      break;
    } catch (const Error&) {
      if (store.check({"rdzv/error"}))
        MINIDL_FAIL("rendezvous via ", where,
                    " failed on another rank: ", store.get_string("rdzv/error"));
    }
  }
  // local rank / size from the hosts that joined, unless the launcher said so
  int local_rank = 0, local_size = 0;
  for (int i = 0; i < ws; ++i) {
    PeerAddress p{store.get_string(keys[size_t(i)]), ""};
    if (peers) {
      p.address = store.get_string("rank_addr/" + std::to_string(i));
      peers->push_back(p);
    }
    if (p.host != me) continue;
    local_size += 1;
    if (i < r) local_rank += 1;
  }
  if (info.local_rank < 0) info.local_rank = local_rank;
  if (info.local_world_size < 0) info.local_world_size = local_size;
}

}  // namespace

void register_rank(Store& store, RendezvousInfo& info, milliseconds timeout,
                   const std::string& where, bool* joined) {
  register_with_peers(store, info, timeout, where, joined, nullptr);
}

namespace {

// A failed rank acknowledges, so that rank 0 keeps its server up until the joined ranks
// have read the error (instead of seeing the connection close).
void acknowledge_failure(Store& store) {
  try {
    store.add("rdzv/acks", 1);
  } catch (const Error&) {
  }
}

// Rank 0, failing: waits (at most 1 s) until every other joined rank has acknowledged.
void linger_for_peers(Store& store, bool self_joined) {
  const auto deadline = Clock::now() + milliseconds(1000);
  try {
    while (Clock::now() < deadline) {
      if (store.add("rdzv/acks", 0) >= store.add("rdzv/joined", 0) - (self_joined ? 1 : 0)) return;
      std::this_thread::sleep_for(milliseconds(10));
    }
  } catch (const Error&) {
  }
}

// Gives the store a PeerWatch (not for one rank, nor with MINIDL_HEARTBEAT=0). A failure to
// start it costs only the diagnosis: warn and go on.
void start_heartbeat(const RendezvousInfo& info, TcpStore& store, std::vector<PeerAddress> peers,
                     milliseconds timeout) {
  const char* env = std::getenv("MINIDL_HEARTBEAT");
  if (info.world_size < 2 || (env && std::string(env) == "0")) return;
  try {
    store.set_companion(std::make_unique<PeerWatch>(
        store, PeerWatchOptions{.rank = info.rank,
                                .peers = std::move(peers),
                                .timeout = timeout,
                                // reading every counter is O(world^2) a beat: cap it
                                .watch_peers = info.world_size <= 64 || info.local_rank == 0}));
  } catch (const Error& e) {
    std::fprintf(stderr, "minidl: rank %d: no heartbeat (peers will not be named): %s\n", info.rank,
                 e.what());
  }
}

}  // namespace

namespace {

std::pair<std::string, int> split_host_port(const std::string& s, const std::string& url) {
  size_t colon = s.rfind(':');
  MINIDL_CHECK(colon != std::string::npos, "rendezvous: ", url, " needs host:port");
  std::string host = s.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);  // [::1]
  auto port = parse_int(s.substr(colon + 1));
  MINIDL_CHECK(port && *port >= 0 && *port <= 65535 && !host.empty(), "rendezvous: ", url,
               ": bad host:port");
  return {host, *port};
}

// "?rank=1&world_size=2" query parameters of a tcp:// or file:// URL.
int query_int(const std::string& query, const std::string& name) {
  size_t pos = ("&" + query).find("&" + name + "=");
  if (pos == std::string::npos) return -1;
  std::string v = query.substr(pos + name.size() + 1);
  v = v.substr(0, v.find('&'));
  auto parsed = parse_int(v);
  MINIDL_CHECK(parsed.has_value(), "rendezvous: ", name, "='", v, "' is not an integer");
  return *parsed;
}

}  // namespace

RendezvousInfo rendezvous(const std::string& init_method, const RendezvousOptions& o) {
  const size_t sep = init_method.find("://");
  MINIDL_CHECK(sep != std::string::npos, "rendezvous: init_method '", init_method,
               "' must be env://, tcp://host:port or file:///path");
  const std::string scheme = init_method.substr(0, sep);
  std::string rest = init_method.substr(sep + 3), query;
  if (size_t q = rest.find('?'); q != std::string::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  const LaunchEnv env = read_launch_env();
  RendezvousInfo info;
  info.rank = o.rank >= 0 ? o.rank : query_int(query, "rank");
  if (info.rank < 0) info.rank = env.rank;
  info.world_size = o.world_size >= 0 ? o.world_size : query_int(query, "world_size");
  if (info.world_size < 0) info.world_size = env.world_size;
  MINIDL_CHECK(info.world_size >= 1, "rendezvous via ", init_method,
               ": world size unknown: pass it or set WORLD_SIZE (torchrun, mpirun and srun "
               "set it)");
  MINIDL_CHECK(info.rank >= 0, "rendezvous via ", init_method,
               ": rank unknown: pass it or set RANK (torchrun, mpirun and srun set it)");
  MINIDL_CHECK(info.rank < info.world_size, "rendezvous via ", init_method, ": rank ", info.rank,
               " is out of range for world size ", info.world_size);
  const bool launcher_local = env.rank == info.rank && env.local_rank >= 0;
  info.local_rank = launcher_local ? env.local_rank : -1;
  info.local_world_size = launcher_local ? env.local_world_size : -1;

  RendezvousFileGuard guard;
  std::shared_ptr<TcpStore> store;
  std::shared_ptr<C10dStore> agent_store;  // torchrun >= 1.13's own store, when it says so
  if (scheme == "env" || scheme == "tcp") {
    if (scheme == "env") {
      MINIDL_CHECK(!env.master_addr.empty() && env.master_port >= 0, "rendezvous via env://: ",
                   "MASTER_ADDR and MASTER_PORT must be set (torchrun sets them; e.g. "
                   "MASTER_ADDR=127.0.0.1 MASTER_PORT=29500)");
      info.master_addr = env.master_addr;
      info.master_port = env.master_port;
    } else {
      std::tie(info.master_addr, info.master_port) = split_host_port(rest, init_method);
    }
    if (scheme == "env" && use_agent_store())  // torchrun's agent hosts a c10d store there
      agent_store =
          std::make_shared<C10dStore>(C10dStoreOptions{.host = info.master_addr,
                                                       .port = info.master_port,
                                                       .timeout = o.timeout,
                                                       .rank = info.rank,
                                                       .key_prefix = agent_store_key_prefix()});
    else
      store = std::make_shared<TcpStore>(TcpStoreOptions{.host = info.master_addr,
                                                         .port = info.master_port,
                                                         .is_master = info.rank == 0,
                                                         .timeout = o.timeout,
                                                         .rank = info.rank});
  } else if (scheme == "file") {
    MINIDL_CHECK(!rest.empty(), "rendezvous: ", init_method, " needs a path (file:///tmp/x)");
    store = info.rank == 0 ? file_rendezvous_master(rest, info.rank, o.timeout, guard)
                           : file_rendezvous_client(rest, info.rank, o.timeout);
    info.master_addr = store->host();
  } else {
    MINIDL_FAIL("rendezvous: unknown scheme '", scheme, "' in '", init_method,
                "' (use env://, tcp://host:port or file:///path)");
  }
  if (store) info.master_port = store->port();
  Store& kv = agent_store ? static_cast<Store&>(*agent_store) : *store;
  bool joined = false;
  std::vector<PeerAddress> peers;
  try {
    register_with_peers(kv, info, o.timeout, init_method, &joined, &peers);
  } catch (const Error&) {
    if (info.rank == 0)
      linger_for_peers(kv, joined);
    else if (joined)
      acknowledge_failure(kv);
    throw;
  }
  if (agent_store) {  // no PeerWatch: it needs a minidl TcpStore (c10d has no heartbeat keys)
    info.store = std::move(agent_store);
    return info;
  }
  start_heartbeat(info, *store, std::move(peers), o.timeout);
  info.store = std::move(store);
  return info;
}

}  // namespace minidl::dist
