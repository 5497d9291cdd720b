// The TCP store's server (internal): listens at construction (a busy port throws at once),
// then serves every client from one background thread until destruction.
#pragma once
#include <list>
#include <map>
#include <string>
#include <thread>
#include <unordered_map>

#include "parallel/socket.h"
#include "parallel/store.h"

namespace minidl::dist::detail {

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
