// Abstract key-value store (like c10d::Store) used for rendezvous and process-group setup:
// set / blocking get / atomic add / compare_set / wait / check / delete, all bounded by a
// timeout. Values are raw bytes; string overloads are conveniences.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace minidl::dist {

using Bytes = std::vector<uint8_t>;

inline Bytes to_bytes(const std::string& s) {
  return Bytes(s.begin(), s.end());
}
inline std::string to_string(const Bytes& b) {
  return std::string(b.begin(), b.end());
}

// Seconds as a short human string for error messages ("30 s", "1.5 s").
inline std::string format_seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", double(ms.count()) / 1000.0);
  return buf;
}

class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{300000};  // 5 min, as TCPStore

  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Blocks until `key` exists or the timeout passes; throws
  // "store get('key') timed out after 30 s (rank r)".
  virtual Bytes get(const std::string& key) = 0;
  // Atomic add on an integer stored as decimal text (a missing key counts as 0).
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `desired` when the current value equals `expected` (a missing key matches an empty
  // `expected`); returns the value after the operation (`expected` when missing and not set).
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;

  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

  void set(const std::string& key, const std::string& value) { set(key, to_bytes(value)); }
  std::string get_string(const std::string& key) { return to_string(get(key)); }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) {
    return to_string(compare_set(key, to_bytes(expected), to_bytes(desired)));
  }

  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // The rank named in error messages (-1: unknown).
  void set_rank(int rank) { rank_ = rank; }
  int rank() const { return rank_; }

 protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
  int rank_ = -1;
};

}  // namespace minidl::dist
