// Opens CUDA toolkit libraries on first use: dlopen by soname, then beside libcudart, then in the
// toolkit directory known at configure time (MINIDL_CUDA_LIBDIR); dlsym with named errors.
#include "tensor/cuda/dynlib.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <string>

#include "tensor/error.h"

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
  if (dladdr(reinterpret_cast<const void*>(&cudaGetDeviceCount), &info) != 0 && info.dli_fname) {
    const std::string file = info.dli_fname;
    const size_t slash = file.rfind('/');
    if (slash != std::string::npos) add_dir(dirs, file.substr(0, slash));
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

}  // namespace minidl::cuda
