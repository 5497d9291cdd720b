// Wire format of the TCP store (internal). Frame = u32 body length + body, little endian.
// Request body: u8 command + fields; reply body: u8 status + fields. Strings are u32 length +
// bytes, integers i64. Readers bound-check everything: malformed input is rejected, not trusted.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "parallel/store/store.h"

namespace minidl::dist::proto {

enum Cmd : uint8_t { kSet = 1, kGet, kAdd, kCompareSet, kWait, kCheck, kDelete, kNumKeys };
enum Status : uint8_t { kOk = 0, kTimeout = 1, kBadRequest = 2 };

constexpr uint32_t kMaxFrame = 64u << 20;  // 64 MiB per message
constexpr uint32_t kMaxKey = 4096;         // bytes per key

struct Writer {
  Bytes buf = Bytes(4, 0);  // room for the frame length
  void u8(uint8_t v) { buf.push_back(v); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) buf.push_back(uint8_t(v >> (8 * i)));
  }
  void i64(int64_t v) {
    for (int i = 0; i < 8; ++i) buf.push_back(uint8_t(uint64_t(v) >> (8 * i)));
  }
  void bytes(const void* p, size_t n) {
    u32(uint32_t(n));
    buf.insert(buf.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  void blob(const Bytes& b) { bytes(b.data(), b.size()); }
  // Writes the frame length and returns the finished frame.
  Bytes finish() {
    uint32_t n = uint32_t(buf.size() - 4);
    for (int i = 0; i < 4; ++i) buf[size_t(i)] = uint8_t(n >> (8 * i));
    return std::move(buf);
  }
};

inline uint32_t read_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

struct Reader {
  const uint8_t* p;
  const uint8_t* end;
  bool ok = true;
  bool need(size_t n) {
    if (!ok || size_t(end - p) < n) ok = false;
    return ok;
  }
  uint8_t u8() { return need(1) ? *p++ : 0; }
  uint32_t u32() {
    if (!need(4)) return 0;
    uint32_t v = read_u32(p);
    p += 4;
    return v;
  }
  int64_t i64() {
    if (!need(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
    p += 8;
    return int64_t(v);
  }
  Bytes blob(uint32_t max = kMaxFrame) {
    uint32_t n = u32();
    if (n > max || !need(n)) {
      ok = false;
      return {};
    }
    Bytes b(p, p + n);
    p += n;
    return b;
  }
  std::string str(uint32_t max = kMaxKey) { return to_string(blob(max)); }
  bool done() const { return ok && p == end; }
};

}  // namespace minidl::dist::proto
