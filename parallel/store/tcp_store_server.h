// The TCP store's server (internal): listens at construction (a busy port throws at once),
// then serves every client from one background thread until destruction.
#pragma once
#include <list>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "parallel/store/socket.h"
#include "parallel/store/store.h"

namespace minidl::dist::detail {

// One request frame body, parsed (wire format in protocol.h). Fields by command: set:
// keys[0], value; add: keys[0], delta; compare_set: keys[0], expected, value (desired);
// get: keys[0], timeout_ms; wait / check: keys, (wait) timeout_ms; delete: keys[0].
struct StoreRequest {
  uint8_t cmd = 0;
  std::vector<std::string> keys;
  Bytes value, expected;
  int64_t delta = 0;
  int64_t timeout_ms = 0;  // >= 0, capped at 2^40
};
// Parses one frame body of n bytes; nullopt when malformed (unknown command, a length beyond
// the data or the limits, a negative timeout, trailing bytes). Never reads outside [p, p+n).
std::optional<StoreRequest> parse_store_request(const uint8_t* p, size_t n);
// The body length of the frame at the start of a receive buffer of n bytes: 0 when more bytes
// are needed, -1 when the length field is invalid (0 or beyond kMaxFrame: drop the client).
int64_t store_frame_length(const uint8_t* p, size_t n);

class TcpStoreServer {
 public:
  TcpStoreServer(const std::string& host, int port);
  ~TcpStoreServer();  // wakes the loop, joins the thread, closes every socket
  int port() const { return port_; }

 private:
  struct Client {
    net::Fd fd;
    Bytes in;   // received, not yet parsed
    Bytes out;  // replies not yet sent
  };
  struct Waiter {  // a get / wait held until its keys exist or its deadline passes
    int fd;
    uint8_t cmd;
    std::vector<std::string> keys;
    net::Clock::time_point deadline;
  };

  void loop();
  void accept_clients();
  bool read_client(Client& c);  // false: drop the client
  bool handle_frame(Client& c, const uint8_t* p, size_t n);
  void reply_when_ready(Waiter w);  // answers now if ready, else parks the waiter
  void notify();                    // answers parked waiters whose keys now exist
  void expire(net::Clock::time_point now);
  bool ready(const Waiter& w) const;
  void answer(const Waiter& w, bool timed_out);
  void drop(int fd);

  int port_ = 0;
  net::Fd listen_;
  net::Fd wake_read_, wake_write_;
  std::map<int, Client> clients_;
  std::list<Waiter> waiters_;
  std::unordered_map<std::string, Bytes> data_;
  std::thread thread_;
};

}  // namespace minidl::dist::detail
