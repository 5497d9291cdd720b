// CUDA toolkit libraries opened on first use (dlopen/dlsym) instead of linked, so a CPU-only run
// of a CUDA-enabled build neither maps nor relocates them at start-up (cuBLASLt alone is ~150 MiB
// of resident memory). No CUDA header here: tests include it.
#pragma once
#include <string>
#include <vector>

namespace minidl::cuda {

// A library opened with dlopen and never closed; `what` names it in errors ("cuBLASLt").
struct DynLib {
  std::string what;
  std::string path;  // what was passed to dlopen: the soname or a full path
  void* handle = nullptr;
};

// The directories tried after the plain soname: the one a shared libcudart was loaded from
// (dladdr on a runtime symbol; none when the runtime is linked statically, minidl's default),
// then the toolkit's library directory known at configure time. No duplicates.
std::vector<std::string> cuda_library_dirs();

// dlopen(soname) (the dynamic loader's own search: LD_LIBRARY_PATH, RUNPATH, ld.so.cache), then
// dir/soname for each of cuda_library_dirs(). Throws an Error naming the library, every path
// tried and dlerror()'s text for each.
DynLib open_cuda_library(const std::string& what, const std::string& soname);

// dlsym, or throws an Error naming the library, its path, the symbol and dlerror()'s text.
void* dynlib_symbol(const DynLib& lib, const char* name);

// The BLAS tables (tensor/cuda/runtime/handles.cuh), seen without CUDA headers: each loads its
// library and resolves every symbol on the first call (thread-safe; a failure throws and the next
// call tries again) and lists the symbols with their addresses.
struct DynSymbol {
  const char* name;
  void* address;
};
const DynLib& cublas_library();
const DynLib& cublaslt_library();
std::vector<DynSymbol> cublas_symbols();
std::vector<DynSymbol> cublaslt_symbols();
// cuDNN likewise (builds with cuDNN; elsewhere they throw naming the missing backend).
const DynLib& cudnn_library();
std::vector<DynSymbol> cudnn_symbols();
// Whether cudnn_library() has been loaded by this process (loading nothing).
bool cudnn_loaded();
// Whether cublaslt_library() has been loaded by this process (loading nothing).
bool cublaslt_loaded();

}  // namespace minidl::cuda
