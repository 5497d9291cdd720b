// Where the gloo backend listens (gloo_host_address) and its full-mesh connect through minidl's
// store (connect_gloo_context).
#include "parallel/gloo/context.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "parallel/store/c10d_store.h"
#include "parallel/store/socket.h"
#include "parallel/store/tcp_store.h"
#include "tensor/error.h"

#if MINIDL_WITH_GLOO
#include <gloo/common/error.h>
#include <gloo/transport/tcp/device.h>

#include "parallel/gloo/gloo_store.h"
#endif

namespace minidl::dist {

namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// The local address the kernel would use to reach host:port (a connected UDP socket sends
// nothing); empty when it cannot tell.
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return "";
  std::string out;
  int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char buf[INET_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)))
      out = buf;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

}  // namespace

std::string gloo_host_address(Store& store) {
  if (const char* ifname = std::getenv("MINIDL_GLOO_IFNAME"); ifname && *ifname)
    return std::string("if:") + ifname;
  if (auto* tcp = dynamic_cast<TcpStore*>(&store)) {
    if (is_loopback(tcp->host())) return "127.0.0.1";
    std::string addr = local_address_towards(tcp->host(), tcp->port());
    if (!addr.empty()) return addr;
  }
  if (auto* c10d = dynamic_cast<C10dStore*>(&store)) {  // torchrun's agent store
    if (is_loopback(c10d->host())) return "127.0.0.1";
    std::string addr = local_address_towards(c10d->host(), c10d->port());
    if (!addr.empty()) return addr;
  }
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0 && name[0]) return name;
  return "127.0.0.1";
}

#if MINIDL_WITH_GLOO
std::shared_ptr<gloo::rendezvous::Context> connect_gloo_context(std::shared_ptr<Store> store,
                                                                int rank, int world_size,
                                                                const std::string& prefix,
                                                                std::chrono::milliseconds timeout) {
  net::SigpipeBlocked
      no_sigpipe;  // gloo's device thread inherits the block (parallel/store/socket.h)
  gloo::transport::tcp::attr attr;
  const std::string host = gloo_host_address(*store);
  if (host.rfind("if:", 0) == 0)
    attr.iface = host.substr(3);
  else
    attr.hostname = host;
  try {
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
    context->setTimeout(timeout);
    GlooStore gstore(store, prefix);
    context->connectFullMesh(gstore, device);
    return context;
  } catch (const gloo::Exception& e) {
    MINIDL_FAIL("gloo: rank ", rank, " of ", world_size, " could not connect the full mesh on ",
                host, " (keys '", prefix, "*'): ", e.what());
  }
}
#endif  // MINIDL_WITH_GLOO

}  // namespace minidl::dist
