// Opens CUDA toolkit libraries on first use (dlopen by soname, then beside libcudart, then in the
// toolkit directory known at configure time: MINIDL_CUDA_LIBDIR; dlsym with named errors) and
// fills the cuBLAS / cuBLASLt / cuDNN tables of tensor/cuda/runtime/handles.cuh; sonames from
// CUBLAS_VER_MAJOR and CUDNN_MAJOR.
#include "tensor/cuda/runtime/dynlib.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "tensor/cuda/runtime/handles.cuh"
#include "tensor/error.h"

// Table member <- dlsym(library, "name"); and {name, address} for the symbol lists.
#define MINIDL_RESOLVE(name) \
  l.api.name = reinterpret_cast<decltype(&::name)>(dynlib_symbol(l.lib, #name));
#define MINIDL_LIST(name) out.push_back({#name, reinterpret_cast<void*>(api.name)});

namespace minidl::cuda {
namespace {

std::string dlerror_text() {
  const char* e = dlerror();
  return e ? e : "(no dlerror text)";
}

void add_dir(std::vector<std::string>& dirs, std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (!dir.empty() && std::find(dirs.begin(), dirs.end(), dir) == dirs.end())
    dirs.push_back(std::move(dir));
}

}  // namespace

std::vector<std::string> cuda_library_dirs() {
  std::vector<std::string> dirs;
  // The runtime is linked (shared, or static into the executable): its directory is where the
  // rest of this toolkit lives, also on machines whose loader path does not name it.
  Dl_info info{};
  // Linked statically (the default), the runtime is part of the executable: no directory.
  if (dladdr(reinterpret_cast<const void*>(&cudaGetDeviceCount), &info) != 0 && info.dli_fname) {
    const std::string file = info.dli_fname;
    const size_t slash = file.rfind('/');
    if (slash != std::string::npos && file.find("libcudart", slash) != std::string::npos)
      add_dir(dirs, file.substr(0, slash));
  }
#ifdef MINIDL_CUDA_LIBDIR
  add_dir(dirs, MINIDL_CUDA_LIBDIR);
#endif
  return dirs;
}

DynLib open_cuda_library(const std::string& what, const std::string& soname) {
  std::vector<std::string> tried{soname};
  for (const std::string& dir : cuda_library_dirs()) tried.push_back(dir + "/" + soname);
  std::string errors;
  for (const std::string& path : tried) {
    dlerror();  // clear a stale message
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return {what, path, handle};
    errors += "\n  dlopen(\"" + path + "\"): " + dlerror_text();
  }
  MINIDL_FAIL("cannot load ", what, " (", soname, "), needed on first use of the CUDA backend; ",
              "tried:", errors,
              "\n(set LD_LIBRARY_PATH to the directory holding it, or install the CUDA toolkit's ",
              what, ")");
}

void* dynlib_symbol(const DynLib& lib, const char* name) {
  MINIDL_CHECK(lib.handle != nullptr, "cannot resolve ", name, ": ", lib.what, " is not loaded");
  dlerror();
  void* p = dlsym(lib.handle, name);
  if (p == nullptr) {
    const std::string err = dlerror_text();
    MINIDL_FAIL(lib.what, " (", lib.path, ") has no symbol ", name, ": ", err, " (a ", lib.what,
                " older than the headers minidl was built with?)");
  }
  return p;
}

// ---- the cuBLAS / cuBLASLt tables
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
std::atomic<bool> g_cudnn_loaded{false};

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

#ifdef MINIDL_WITH_CUDNN
struct LoadedCudnn {
  DynLib lib;
  CudnnApi api;
};
const LoadedCudnn& cudnn() {
  static const LoadedCudnn loaded = [] {
    LoadedCudnn l{open_cuda_library("cuDNN", "libcudnn.so." + std::to_string(CUDNN_MAJOR)), {}};
    MINIDL_CUDNN_FUNCTIONS(MINIDL_RESOLVE)
    g_cudnn_loaded.store(true, std::memory_order_release);
    return l;
  }();
  return loaded;
}
#endif

}  // namespace

#ifdef MINIDL_WITH_CUDNN
const CudnnApi& cudnn_api() {
  return cudnn().api;
}
const DynLib& cudnn_library() {
  return cudnn().lib;
}
std::vector<DynSymbol> cudnn_symbols() {
  const CudnnApi& api = cudnn_api();
  std::vector<DynSymbol> out;
  MINIDL_CUDNN_FUNCTIONS(MINIDL_LIST)
  return out;
}
#else
const DynLib& cudnn_library() {
  MINIDL_FAIL("cuDNN: minidl was built without cuDNN");
}
std::vector<DynSymbol> cudnn_symbols() {
  MINIDL_FAIL("cuDNN: minidl was built without cuDNN");
}
#endif
bool cudnn_loaded() {
  return g_cudnn_loaded.load(std::memory_order_acquire);
}

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
