// Fills the cuBLAS / cuBLASLt function tables on first use: the sonames come from the headers'
// CUBLAS_VER_MAJOR (libcublasLt.so.13 for cuBLAS 13), the search order from open_cuda_library.
#include <atomic>
#include <string>

#include "tensor/cuda/blas_api.cuh"

// Table member <- dlsym(library, "name"); and {name, address} for the symbol lists.
#define MINIDL_RESOLVE(name) \
  l.api.name = reinterpret_cast<decltype(&::name)>(dynlib_symbol(l.lib, #name));
#define MINIDL_LIST(name) out.push_back({#name, reinterpret_cast<void*>(api.name)});

namespace minidl::cuda {
namespace {

std::string soname(const char* stem) {
  return std::string(stem) + ".so." + std::to_string(CUBLAS_VER_MAJOR);
}

struct LoadedCublas {
  DynLib lib;
  CublasApi api;
};
struct LoadedCublasLt {
  DynLib lib;
  CublasLtApi api;
};

std::atomic<bool> g_lt_loaded{false};

// Function-local statics: initialised once under the compiler's guard; an exception leaves them
// uninitialised, so the next call loads again.
const LoadedCublas& cublas() {
  static const LoadedCublas loaded = [] {
    LoadedCublas l{open_cuda_library("cuBLAS", soname("libcublas")), {}};
    MINIDL_CUBLAS_FUNCTIONS(MINIDL_RESOLVE)
    return l;
  }();
  return loaded;
}

const LoadedCublasLt& cublaslt() {
  static const LoadedCublasLt loaded = [] {
    LoadedCublasLt l{open_cuda_library("cuBLASLt", soname("libcublasLt")), {}};
    MINIDL_CUBLASLT_FUNCTIONS(MINIDL_RESOLVE)
    g_lt_loaded.store(true, std::memory_order_release);
    return l;
  }();
  return loaded;
}

}  // namespace

const CublasApi& cublas_api() {
  return cublas().api;
}
const CublasLtApi& cublaslt_api() {
  return cublaslt().api;
}
const DynLib& cublas_library() {
  return cublas().lib;
}
const DynLib& cublaslt_library() {
  return cublaslt().lib;
}
bool cublaslt_loaded() {
  return g_lt_loaded.load(std::memory_order_acquire);
}

std::vector<DynSymbol> cublas_symbols() {
  const CublasApi& api = cublas_api();
  std::vector<DynSymbol> out;
  MINIDL_CUBLAS_FUNCTIONS(MINIDL_LIST)
  return out;
}

std::vector<DynSymbol> cublaslt_symbols() {
  const CublasLtApi& api = cublaslt_api();
  std::vector<DynSymbol> out;
  MINIDL_CUBLASLT_FUNCTIONS(MINIDL_LIST)
  return out;
}

}  // namespace minidl::cuda

#undef MINIDL_RESOLVE
#undef MINIDL_LIST
