// Fuzz target of the TCP store server's message parser: the input is a receive buffer, split
// into frames and parsed like the server does; every accepted request re-encodes to its bytes.
#include <stdexcept>

#include "fuzz_targets.h"
#include "parallel/store/protocol.h"
#include "parallel/store/tcp_store_server.h"

namespace minidl::fuzz {
namespace {

using namespace dist::proto;

// The client's encoding of a request (parallel/store/tcp_store.cpp).
dist::Bytes encode(const dist::detail::StoreRequest& q) {
  Writer w;
  w.u8(q.cmd);
  switch (q.cmd) {
    case kSet:
      w.str(q.keys.at(0));
      w.blob(q.value);
      break;
    case kAdd:
      w.str(q.keys.at(0));
      w.i64(q.delta);
      break;
    case kCompareSet:
      w.str(q.keys.at(0));
      w.blob(q.expected);
      w.blob(q.value);
      break;
    case kGet:
      w.str(q.keys.at(0));
      w.i64(q.timeout_ms);
      break;
    case kWait:
    case kCheck:
      w.u32(uint32_t(q.keys.size()));
      for (const std::string& k : q.keys) w.str(k);
      if (q.cmd == kWait) w.i64(q.timeout_ms);
      break;
    case kDelete:
      w.str(q.keys.at(0));
      break;
    case kNumKeys:
      break;
    default:
      throw std::logic_error("fuzz_store_message: parser accepted unknown command");
  }
  return w.finish();
}

}  // namespace

int fuzz_store_message(const uint8_t* data, size_t size) {
  size_t pos = 0;
  for (;;) {
    const int64_t len = dist::detail::store_frame_length(data + pos, size - pos);
    if (len <= 0) break;
    if (len > int64_t(kMaxFrame) || size_t(len) > size - pos - 4)
      throw std::logic_error("fuzz_store_message: frame length beyond the buffer");
    auto q = dist::detail::parse_store_request(data + pos + 4, size_t(len));
    if (q) {
      for (const std::string& k : q->keys)
        if (k.size() > kMaxKey) throw std::logic_error("fuzz_store_message: key over the limit");
      if (q->timeout_ms < 0) throw std::logic_error("fuzz_store_message: negative timeout");
      const dist::Bytes original(data + pos, data + pos + 4 + len);
      if (q->timeout_ms < (int64_t(1) << 40) && encode(*q) != original)
        throw std::logic_error("fuzz_store_message: request does not re-encode to its bytes");
    }
    pos += 4 + size_t(len);
  }
  return 0;
}

}  // namespace minidl::fuzz
