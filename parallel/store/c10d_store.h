// A client of PyTorch's c10d TCPStore (the store torchrun's agent hosts on MASTER_PORT when it
// sets TORCHELASTIC_USE_AGENT_STORE=True): minidl's Store interface spoken in c10d's wire
// protocol, every key under a prefix. No server here: every rank, rank 0 included, connects.
//
// Protocol versions (detected on the first connection, then kept):
//   - 2.x servers that validate and answer PING (tested: 2.6's classic backend; the libuv
//     backend reads the same frames by its source): VALIDATE with the magic 0x3C85F7CE, then a
//     PING whose nonce the server echoes; commands numbered from SET=1; a timed-out wait is
//     withdrawn with CANCEL_WAIT.
//   - 1.13 (and other unvalidated servers numbering from SET=0): no handshake; a 1.13 server
//     resets a connection that opens with VALIDATE, so the client reconnects and speaks 1.13.
//     1.13 cannot cancel a wait: a timed-out wait drops the connection (the server forgets the
//     waiter) and the next request reconnects.
// Untested, and expected to fail with an error naming the store (not to work): 2.x builds that
// validate but know no PING, or that prefix every query with a magic number.
// Not used: APPEND, MULTI_GET / MULTI_SET, queues (rendezvous and barriers do not need them).
#pragma once
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "parallel/store/socket.h"
#include "parallel/store/store.h"

namespace minidl::dist {

enum class C10dProtocol { unknown, v1_13, v2 };
const char* c10d_protocol_name(C10dProtocol p);

struct C10dStoreOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;  // connect, requests, get, wait
  int rank = -1;                                               // named in error messages
  // Prepended to every key on the wire (c10d's own clients prefix theirs with "/").
  std::string key_prefix = "/minidl/";
  C10dProtocol protocol = C10dProtocol::unknown;  // unknown: detect on connect
};

// The prefix for minidl's keys in torchrun's agent store: one namespace per restart attempt
// (TORCHELASTIC_RESTART_COUNT), as PyTorch's own workers use, so a restarted group never reads
// the keys of the attempt before.
std::string agent_store_key_prefix();
// True when TORCHELASTIC_USE_AGENT_STORE is "true" (any case).
bool use_agent_store();

class C10dStore : public Store {
 public:
  explicit C10dStore(C10dStoreOptions options);  // connects (and detects the protocol)
  ~C10dStore() override = default;
  C10dStore(const C10dStore&) = delete;
  C10dStore& operator=(const C10dStore&) = delete;

  const std::string& host() const { return options_.host; }
  int port() const { return options_.port; }
  C10dProtocol protocol() const { return options_.protocol; }
  // Another connection to the same store (same prefix and protocol), for a thread of its own.
  std::shared_ptr<C10dStore> connect_another() const;

  using Store::compare_set;
  using Store::set;
  using Store::wait;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

 private:
  enum class Op { set, compare_set, get, add, check, wait, num_keys, delete_key, cancel_wait };
  uint8_t opcode(Op op) const;
  std::string where() const;
  void connect_locked();  // (re)connects; detects the protocol the first time
  bool try_validated_handshake(net::Clock::time_point deadline);
  // Request plumbing; all under mu_, all bounded by `deadline`.
  void send_locked(const Bytes& frame, net::Clock::time_point deadline, const std::string& what);
  void recv_locked(void* data, size_t n, net::Clock::time_point deadline, const std::string& what);
  Bytes recv_blob_locked(net::Clock::time_point deadline, const std::string& what);
  int64_t recv_i64_locked(net::Clock::time_point deadline, const std::string& what);
  uint8_t recv_u8_locked(net::Clock::time_point deadline, const std::string& what);
  // WAIT for (prefixed) keys; false when `timeout` passed (the wait is withdrawn).
  bool wait_locked(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                   const std::string& what);
  [[noreturn]] void fail_locked(const std::string& what, const std::string& why);

  C10dStoreOptions options_;
  std::mutex mu_;
  net::Fd sock_;
};

}  // namespace minidl::dist
