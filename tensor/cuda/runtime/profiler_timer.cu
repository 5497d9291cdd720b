// The CUDA device timer of the op profiler (tensor/profiler.h): a pair of timing events around
// each op on the current device's compute stream, taken from a pool and returned after reading.
#include <mutex>
#include <vector>

#include "tensor/cuda_api.h"
#include "tensor/cuda/runtime/common.cuh"
#include "tensor/profiler.h"

namespace minidl::cuda {
namespace {

struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  bool recorded = false;
};

std::mutex g_pool_mu;
std::vector<EventPair*>& pool() {
  static auto* p = new std::vector<EventPair*>();  // never freed: used until exit
  return *p;
}

EventPair* take() {
  {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    if (!pool().empty()) {
      EventPair* e = pool().back();
      pool().pop_back();
      return e;
    }
  }
  auto* e = new EventPair();
  if (cudaEventCreate(&e->start) != cudaSuccess || cudaEventCreate(&e->stop) != cudaSuccess) {
    (void)cudaGetLastError();
    delete e;
    return nullptr;
  }
  return e;
}

void give_back(EventPair* e) {
  e->recorded = false;
  std::lock_guard<std::mutex> lock(g_pool_mu);
  pool().push_back(e);
}

// No timing while the compute stream is captured (events there would become graph nodes).
void* timer_begin() {
  const int d = current_device();
  if (is_capturing(d)) return nullptr;
  EventPair* e = take();
  if (!e) return nullptr;
  if (cudaEventRecord(e->start, compute_stream(d)) != cudaSuccess) {
    (void)cudaGetLastError();
    give_back(e);
    return nullptr;
  }
  return e;
}

void timer_end(void* token) {
  auto* e = static_cast<EventPair*>(token);
  e->recorded = cudaEventRecord(e->stop, compute_stream(current_device())) == cudaSuccess;
  if (!e->recorded) (void)cudaGetLastError();
}

double timer_elapsed_ms(void* token) {
  auto* e = static_cast<EventPair*>(token);
  float ms = 0;
  if (!e->recorded || cudaEventSynchronize(e->stop) != cudaSuccess ||
      cudaEventElapsedTime(&ms, e->start, e->stop) != cudaSuccess) {
    (void)cudaGetLastError();
    ms = 0;
  }
  give_back(e);
  return double(ms);
}

}  // namespace

void install_profiler_timer() {
  profiler::detail::set_device_timer(DeviceType::cuda,
                                     {&timer_begin, &timer_end, &timer_elapsed_ms});
}

}  // namespace minidl::cuda
