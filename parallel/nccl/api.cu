// Fills the NCCL table of parallel/nccl/api.cuh on first use: dlopen of libnccl.so.<NCCL_MAJOR>
// through tensor/cuda/runtime/dynlib's search (loader path, beside libcudart, the toolkit
// directory).
#include "parallel/nccl/api.cuh"

#include <atomic>
#include <string>

namespace minidl::dist {
namespace {

struct LoadedNccl {
  cuda::DynLib lib;
  NcclApi api;
};

std::atomic<bool> g_loaded{false};

const LoadedNccl& nccl() {
  static const LoadedNccl loaded = [] {
    LoadedNccl l{cuda::open_cuda_library("NCCL", "libnccl.so." + std::to_string(NCCL_MAJOR)), {}};
#define MINIDL_RESOLVE(name) \
  l.api.name = reinterpret_cast<decltype(&::name)>(cuda::dynlib_symbol(l.lib, #name));
    MINIDL_NCCL_FUNCTIONS(MINIDL_RESOLVE)
#undef MINIDL_RESOLVE
    g_loaded.store(true, std::memory_order_release);
    return l;
  }();
  return loaded;
}

}  // namespace

const NcclApi& nccl_api() {
  return nccl().api;
}
const cuda::DynLib& nccl_library() {
  return nccl().lib;
}
bool nccl_loaded() {
  return g_loaded.load(std::memory_order_acquire);
}

std::vector<cuda::DynSymbol> nccl_symbols() {
  const NcclApi& api = nccl_api();
  std::vector<cuda::DynSymbol> out;
#define MINIDL_LIST(name) out.push_back({#name, reinterpret_cast<void*>(api.name)});
  MINIDL_NCCL_FUNCTIONS(MINIDL_LIST)
#undef MINIDL_LIST
  return out;
}

}  // namespace minidl::dist
