// The gloo backend's transport: where gloo listens (gloo_host_address), the full-mesh connect,
// and tensors on the wire (staging, half-precision reduction, avg). Declared in
// parallel/process_group_gloo.h and parallel/gloo_transport.h.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "parallel/process_group_gloo.h"
#include "parallel/socket.h"
#include "parallel/c10d_store.h"
#include "parallel/tcp_store.h"
#include "tensor/error.h"

#if MINIDL_WITH_GLOO
#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/transport/tcp/device.h>

#include "parallel/gloo_store.h"
#include "parallel/gloo_transport.h"
#include "tensor/pinned.h"
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
  net::SigpipeBlocked no_sigpipe;  // gloo's device thread inherits the block (parallel/socket.h)
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

namespace gloo_wire {
namespace {

using Func = gloo::AllreduceOptions::Func;
using RawFunc = void (*)(void*, const void*, const void*, size_t);

template <typename T>
constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Element-wise reduction of 16-bit floats: computed in f32, rounded once per pair.
template <typename H, ReduceOp op>
void half_reduce(void* c, const void* a, const void* b, size_t n) {
  H* out = static_cast<H*>(c);
  const H* x = static_cast<const H*>(a);
  const H* y = static_cast<const H*>(b);
  for (size_t i = 0; i < n; ++i) {
    const float u = float(x[i]), v = float(y[i]);
    float r = u + v;
    if constexpr (op == ReduceOp::max) r = (u != u || u > v) ? u : v;
    if constexpr (op == ReduceOp::min) r = (u != u || u < v) ? u : v;
    out[i] = H(r);
  }
}

template <typename T>
RawFunc reduce_func(ReduceOp op) {
  if constexpr (is_half_v<T>) {
    if (op == ReduceOp::max) return &half_reduce<T, ReduceOp::max>;
    if (op == ReduceOp::min) return &half_reduce<T, ReduceOp::min>;
    return &half_reduce<T, ReduceOp::sum>;
  } else {
    if (op == ReduceOp::max) return &gloo::max<T>;
    if (op == ReduceOp::min) return &gloo::min<T>;
    return &gloo::sum<T>;
  }
}

// avg = sum / size; integers use floor division (like torch.div(rounding_mode="floor")).
void divide_by(Tensor& wire, int size) {
  visit_wire(wire.dtype(), [&]<typename T>() {
    T* p = wire.data_ptr<T>();
    const int64_t n = wire.numel();
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (is_half_v<T>) {
        p[i] = T(float(p[i]) / float(size));
      } else if constexpr (std::is_floating_point_v<T>) {
        p[i] /= T(size);
      } else {
        T q = T(p[i] / T(size));
        if constexpr (std::is_signed_v<T>)
          if (p[i] % T(size) != 0 && p[i] < 0) --q;
        p[i] = q;
      }
    }
  });
}

}  // namespace

Tensor to_wire(const Tensor& t) {
  if (t.is_cpu()) return t;
  Tensor host = empty_pinned(t.shape(), t.dtype());
  host.copy_(t);
  return host;
}

void from_wire(Tensor& t, const Tensor& wire) {
  if (!wire.is_same(t)) t.copy_(wire);
}

void allreduce_wire(const std::shared_ptr<gloo::Context>& ctx, Tensor& wire, ReduceOp op,
                    uint32_t tag, std::chrono::milliseconds timeout) {
  if (wire.numel() > 0) {
    gloo::AllreduceOptions opts(ctx);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    visit_wire(wire.dtype(), [&]<typename T>() {
      opts.setOutput(wire.data_ptr<T>(), size_t(wire.numel()));
      opts.setReduceFunction(Func(reduce_func<T>(op)));
    });
    gloo::allreduce(opts);
  }
  if (op == ReduceOp::avg) divide_by(wire, ctx->size);
}

}  // namespace gloo_wire
#endif  // MINIDL_WITH_GLOO

}  // namespace minidl::dist
