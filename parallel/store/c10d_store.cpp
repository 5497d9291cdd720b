// C10dStore: minidl's Store spoken in PyTorch's c10d TCPStore wire protocol, as a client of
// the store torchrun's agent hosts (c10d_store.h). Frames are little-endian: a command byte,
// then per argument a u64 length and its bytes (keys, values) or a raw i64 / u64; replies are
// a u64-length blob, a raw i64 or one status byte. Every send and receive is bounded.
#include "parallel/store/c10d_store.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "tensor/error.h"

namespace minidl::dist {

namespace {

using std::chrono::milliseconds;

constexpr uint8_t kValidate = 0;  // 2.x only: the first query of a connection
constexpr uint8_t kPing = 13;     // 2.x: echoes a u32 nonce
constexpr uint32_t kValidationMagic = 0x3C85F7CE;
constexpr uint8_t kReady = 0, kNotReady = 1;            // CHECK's reply
constexpr uint8_t kStopWaiting = 0, kWaitCanceled = 1;  // WAIT's / CANCEL_WAIT's replies
constexpr uint64_t kMaxReplyBytes = uint64_t(1) << 31;  // a sanity bound on a blob reply

// Little-endian frame builder (c10d sends host-order integers; x86 and ARM are little-endian).
struct Frame {
  Bytes buf;
  explicit Frame(uint8_t command) { buf.push_back(command); }
  Frame& raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) buf.push_back(b[i]);  // (GCC 12 misreads insert's bounds)
    return *this;
  }
  Frame& u32(uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; ++i) b[i] = uint8_t(v >> (8 * i));
    return raw(b, 4);
  }
  Frame& u64(uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = uint8_t(v >> (8 * i));
    return raw(b, 8);
  }
  Frame& blob(const void* p, size_t n) { return u64(n).raw(p, n); }
  Frame& str(const std::string& s) { return blob(s.data(), s.size()); }
  Frame& bytes(const Bytes& b) { return blob(b.data(), b.size()); }
};

// How long past a wait's own bound its last replies (GET's value, CANCEL_WAIT's answer) may
// take: a tenth of it, 0.1 to 5 s, as minidl's TcpStore allows.
milliseconds reply_grace(milliseconds wait) {
  return std::clamp(wait / 10, milliseconds(100), milliseconds(5000));
}

uint64_t read_u64(const uint8_t* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

std::string key_list(const std::vector<std::string>& keys) {
  std::string s = "[";
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", '" : "'") + keys[i] + "'";
  return s + "]";
}

}  // namespace

const char* c10d_protocol_name(C10dProtocol p) {
  switch (p) {
    case C10dProtocol::v1_13:
      return "PyTorch 1.13 protocol";
    case C10dProtocol::v2:
      return "PyTorch 2.x protocol";
    default:
      return "protocol not yet known";
  }
}

bool use_agent_store() {
  const char* v = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (!v) return false;
  std::string s(v);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s == "true";
}

std::string agent_store_key_prefix() {
  const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return std::string("/minidl/attempt_") + (attempt && *attempt ? attempt : "0") + "/";
}

C10dStore::C10dStore(C10dStoreOptions options) : options_(std::move(options)) {
  rank_ = options_.rank;
  timeout_ = options_.timeout;
  std::lock_guard<std::mutex> lock(mu_);
  connect_locked();
}

std::shared_ptr<C10dStore> C10dStore::connect_another() const {
  C10dStoreOptions o = options_;
  o.timeout = timeout_;
  o.rank = rank_;
  return std::make_shared<C10dStore>(std::move(o));
}

uint8_t C10dStore::opcode(Op op) const {
  // 2.x inserted VALIDATE at 0 (shifting SET..GETNUMKEYS by one) and dropped WATCH_KEY (1.13's
  // 7), so DELETE_KEY is 8 in both; CANCEL_WAIT exists only in 2.x.
  const bool v2 = options_.protocol == C10dProtocol::v2;
  switch (op) {
    case Op::set:
      return v2 ? 1 : 0;
    case Op::compare_set:
      return v2 ? 2 : 1;
    case Op::get:
      return v2 ? 3 : 2;
    case Op::add:
      return v2 ? 4 : 3;
    case Op::check:
      return v2 ? 5 : 4;
    case Op::wait:
      return v2 ? 6 : 5;
    case Op::num_keys:
      return v2 ? 7 : 6;
    case Op::delete_key:
      return 8;
    case Op::cancel_wait:
      return 12;
  }
  return 0xff;
}

std::string C10dStore::where() const {
  return "c10d store " + options_.host + ":" + std::to_string(options_.port) + " (rank " +
         std::to_string(rank_) + ", " + c10d_protocol_name(options_.protocol) + ")";
}

void C10dStore::fail_locked(const std::string& what, const std::string& why) {
  sock_.reset();  // the stream's position is unknown: the next request reconnects
  MINIDL_FAIL(what, " at ", where(), ": ", why);
}

void C10dStore::send_locked(const Bytes& frame, net::Clock::time_point deadline,
                            const std::string& what) {
  if (auto r = net::send_all(sock_.get(), frame.data(), frame.size(), deadline);
      r != net::IoResult::ok)
    fail_locked(what, r == net::IoResult::closed
                          ? "the server closed the connection (did torchrun's agent exit?)"
                          : "could not send within " + format_seconds(timeout_));
}

void C10dStore::recv_locked(void* data, size_t n, net::Clock::time_point deadline,
                            const std::string& what) {
  if (auto r = net::recv_all(sock_.get(), data, n, deadline); r != net::IoResult::ok)
    fail_locked(what, r == net::IoResult::closed
                          ? "the server closed the connection (did torchrun's agent exit?)"
                          : "no answer within " + format_seconds(timeout_));
}

int64_t C10dStore::recv_i64_locked(net::Clock::time_point deadline, const std::string& what) {
  uint8_t b[8];
  recv_locked(b, 8, deadline, what);
  return int64_t(read_u64(b));
}

uint8_t C10dStore::recv_u8_locked(net::Clock::time_point deadline, const std::string& what) {
  uint8_t b = 0;
  recv_locked(&b, 1, deadline, what);
  return b;
}

Bytes C10dStore::recv_blob_locked(net::Clock::time_point deadline, const std::string& what) {
  uint8_t head[8];
  recv_locked(head, 8, deadline, what);
  const uint64_t n = read_u64(head);
  if (n > kMaxReplyBytes)
    fail_locked(what, "malformed reply (a value of " + std::to_string(n) + " bytes)");
  Bytes value(n);
  if (n) recv_locked(value.data(), n, deadline, what);
  return value;
}

bool C10dStore::try_validated_handshake(net::Clock::time_point deadline) {
  // A 1.13 server reads these bytes as SET with a key length made of the magic, PING and the
  // nonce's low three bytes; bit 23 of the nonce makes that length exceed 2^63, so 1.13 fails
  // at once (vector length error) and resets, instead of allocating gigabytes and waiting.
  const uint32_t nonce =
      (uint32_t(::getpid()) ^ uint32_t(net::Clock::now().time_since_epoch().count())) | 0x800000u;
  Frame f(kValidate);
  f.u32(kValidationMagic);
  f.buf.push_back(kPing);
  f.u32(nonce);
  uint8_t echo[4];
  if (net::send_all(sock_.get(), f.buf.data(), f.buf.size(), deadline) != net::IoResult::ok)
    return false;
  switch (net::recv_all(sock_.get(), echo, 4, deadline)) {
    case net::IoResult::ok:
      break;
    case net::IoResult::closed:
      return false;  // 1.13 resets a connection opening so
    case net::IoResult::timeout:
      fail_locked("connect", "no answer to the handshake within " + format_seconds(timeout_));
  }
  uint32_t got = 0;
  for (int i = 3; i >= 0; --i) got = (got << 8) | echo[i];
  if (got != nonce) fail_locked("connect", "the server answered the PING with a wrong nonce");
  return true;
}

void C10dStore::connect_locked() {
  const auto deadline = net::Clock::now() + timeout_;
  auto open = [&] {
    try {
      sock_ = net::connect_tcp(options_.host, options_.port, timeout_);
    } catch (const Error& e) {
      MINIDL_FAIL("connect to ", where(), " (torchrun's agent store) failed: ", e.what());
    }
    net::set_nodelay(sock_.get());
  };
  open();
  if (options_.protocol == C10dProtocol::v2) {
    if (!try_validated_handshake(deadline))
      fail_locked("connect", "the server closed the connection during the handshake");
    return;
  }
  if (options_.protocol == C10dProtocol::v1_13) return;
  if (try_validated_handshake(deadline)) {
    options_.protocol = C10dProtocol::v2;
    return;
  }
  // Refused: an unvalidated (1.13-numbered) server; confirm with a harmless GETNUMKEYS.
  open();
  options_.protocol = C10dProtocol::v1_13;
  send_locked(Frame(opcode(Op::num_keys)).buf, deadline, "connect");
  uint8_t b[8];
  if (net::recv_all(sock_.get(), b, 8, deadline) != net::IoResult::ok) {
    options_.protocol = C10dProtocol::unknown;
    fail_locked("connect",
                "the server refused PyTorch 2.x's validated handshake and did not answer 1.13's "
                "GETNUMKEYS: an unsupported c10d TCPStore version?");
  }
}

void C10dStore::set(const std::string& key, const Bytes& value) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sock_.valid()) connect_locked();
  send_locked(Frame(opcode(Op::set)).str(options_.key_prefix + key).bytes(value).buf,
              net::Clock::now() + timeout_, "set('" + key + "')");
}

bool C10dStore::wait_locked(const std::vector<std::string>& keys, milliseconds timeout,
                            const std::string& what) {
  Frame f(opcode(Op::wait));
  f.u64(keys.size());
  for (const std::string& k : keys) f.str(options_.key_prefix + k);
  const auto start = net::Clock::now();
  send_locked(f.buf, start + timeout_, what);
  uint8_t reply = 0;
  switch (net::recv_all(sock_.get(), &reply, 1, start + std::max(timeout, milliseconds(0)))) {
    case net::IoResult::ok:
      if (reply != kStopWaiting) fail_locked(what, "unexpected reply to WAIT");
      return true;
    case net::IoResult::closed:
      fail_locked(what, "the server closed the connection");
    case net::IoResult::timeout:
      break;
  }
  if (options_.protocol != C10dProtocol::v2) {
    sock_.reset();  // 1.13 cannot cancel a wait; closing makes the server forget it
    return false;
  }
  const auto grace = net::Clock::now() + reply_grace(timeout);
  send_locked(Frame(opcode(Op::cancel_wait)).buf, grace, what + " (cancelling)");
  reply = recv_u8_locked(grace, what + " (cancelling)");
  if (reply == kStopWaiting) reply = recv_u8_locked(grace, what + " (cancelling)");  // raced
  if (reply != kWaitCanceled) fail_locked(what, "unexpected reply to CANCEL_WAIT");
  return false;
}

Bytes C10dStore::get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sock_.valid()) connect_locked();
  const std::string what = "get('" + key + "')";
  // One bound for both requests: the timeout plus a grace for the value once the key is there.
  const auto deadline = net::Clock::now() + timeout_ + reply_grace(timeout_);
  if (!wait_locked({key}, timeout_, what))
    MINIDL_FAIL("store ", what, " timed out after ", format_seconds(timeout_), " (rank ", rank_,
                ") waiting on ", where());
  send_locked(Frame(opcode(Op::get)).str(options_.key_prefix + key).buf, deadline, what);
  return recv_blob_locked(deadline, what);
}

int64_t C10dStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sock_.valid()) connect_locked();
  const std::string what = "add('" + key + "')";
  const auto deadline = net::Clock::now() + timeout_;
  send_locked(Frame(opcode(Op::add)).str(options_.key_prefix + key).u64(uint64_t(delta)).buf,
              deadline, what);
  return recv_i64_locked(deadline, what);
}

Bytes C10dStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sock_.valid()) connect_locked();
  const std::string what = "compare_set('" + key + "')";
  const auto deadline = net::Clock::now() + timeout_;
  Frame f(opcode(Op::compare_set));
  f.str(options_.key_prefix + key).bytes(expected).bytes(desired);
  send_locked(f.buf, deadline, what);
  return recv_blob_locked(deadline, what);
}

void C10dStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sock_.valid()) connect_locked();
  const std::string what = "wait(" + key_list(keys) + ")";
  if (!wait_locked(keys, timeout, what))
    MINIDL_FAIL("store ", what, " timed out after ", format_seconds(timeout), " (rank ", rank_,
                ") waiting on ", where());
}

bool C10dStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sock_.valid()) connect_locked();
  const std::string what = "check(" + key_list(keys) + ")";
  const auto deadline = net::Clock::now() + timeout_;
  Frame f(opcode(Op::check));
  f.u64(keys.size());
  for (const std::string& k : keys) f.str(options_.key_prefix + k);
  send_locked(f.buf, deadline, what);
  const uint8_t reply = recv_u8_locked(deadline, what);
  if (reply != kReady && reply != kNotReady) fail_locked(what, "unexpected reply to CHECK");
  return reply == kReady;
}

bool C10dStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sock_.valid()) connect_locked();
  const std::string what = "delete_key('" + key + "')";
  const auto deadline = net::Clock::now() + timeout_;
  send_locked(Frame(opcode(Op::delete_key)).str(options_.key_prefix + key).buf, deadline, what);
  return recv_i64_locked(deadline, what) == 1;
}

int64_t C10dStore::num_keys() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sock_.valid()) connect_locked();
  const auto deadline = net::Clock::now() + timeout_;
  send_locked(Frame(opcode(Op::num_keys)).buf, deadline, "num_keys()");
  return recv_i64_locked(deadline, "num_keys()");  // every key in the store, not only ours
}

}  // namespace minidl::dist
