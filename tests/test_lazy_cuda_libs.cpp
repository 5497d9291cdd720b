// cuBLAS / cuBLASLt, cuDNN and NCCL are dlopen'ed on first use (tensor/cuda/runtime/dynlib.h,
// parallel/nccl/library.h), not linked, and the CUDA runtime is static: the test binary names no
// CUDA library as needed, the loader resolves every symbol minidl uses from those libraries, and
// a missing library or symbol fails with an error naming it. Runs without a GPU (dlopen needs
// none).
#include <doctest/doctest.h>

#ifdef MINIDL_TEST_WITH_CUDA
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "parallel/nccl/library.h"
#include "skip.h"
#include "tensor/cuda/runtime/dynlib.h"
#include "tensor/device.h"
#include "tensor/error.h"

namespace {

// The DT_NEEDED entries of an ELF64 file, read from disk (the loader's in-memory copy is
// relocated differently by each libc).
std::vector<std::string> needed_libraries(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > sizeof(Elf64_Ehdr));
  const char* base = bytes.data();
  Elf64_Ehdr eh;
  std::memcpy(&eh, base, sizeof eh);
  REQUIRE(std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0);
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  for (size_t i = 0; i < ph.size(); ++i)
    std::memcpy(&ph[i], base + eh.e_phoff + i * eh.e_phentsize, sizeof(Elf64_Phdr));
  auto file_offset = [&](Elf64_Addr vaddr) -> size_t {  // through the PT_LOAD that maps it
    for (const Elf64_Phdr& p : ph)
      if (p.p_type == PT_LOAD && vaddr >= p.p_vaddr && vaddr < p.p_vaddr + p.p_filesz)
        return size_t(vaddr - p.p_vaddr + p.p_offset);
    FAIL("address outside every PT_LOAD segment");
    return 0;
  };
  std::vector<Elf64_Dyn> dyn;
  for (const Elf64_Phdr& p : ph) {
    if (p.p_type != PT_DYNAMIC) continue;
    dyn.resize(p.p_filesz / sizeof(Elf64_Dyn));
    std::memcpy(dyn.data(), base + p.p_offset, dyn.size() * sizeof(Elf64_Dyn));
  }
  size_t strtab = 0;
  for (const Elf64_Dyn& d : dyn)
    if (d.d_tag == DT_STRTAB) strtab = file_offset(d.d_un.d_ptr);
  REQUIRE(strtab != 0);
  std::vector<std::string> out;
  for (const Elf64_Dyn& d : dyn)
    if (d.d_tag == DT_NEEDED) out.emplace_back(base + strtab + d.d_un.d_val);
  return out;
}

std::string file_of(const void* address) {
  Dl_info info{};
  REQUIRE(dladdr(address, &info) != 0);
  return info.dli_fname ? info.dli_fname : "";
}

bool nccl_loaded() {
#ifdef MINIDL_TEST_WITH_NCCL
  return minidl::dist::nccl_loaded();
#else
  return false;
#endif
}

std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const minidl::Error& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace

TEST_SUITE("lazy_cuda_libs") {
  TEST_CASE("no CUDA library is linked, and none but the driver's is loaded at start-up") {
    const std::vector<std::string> needed = needed_libraries("/proc/self/exe");
    CHECK(!needed.empty());  // libc at least: the parser works
    for (const std::string& lib : needed) {
      INFO("DT_NEEDED ", lib);
      for (const char* cuda_lib : {"libcublas", "libcudnn", "libnccl", "libcudart"})
        CHECK(lib.find(cuda_lib) == std::string::npos);
    }
    // Without a GPU nothing but the loader could map them: not before its first use.
    if (minidl::device_count(minidl::DeviceType::cuda) > 0 || minidl::cuda::cublaslt_loaded() ||
        minidl::cuda::cudnn_loaded() || nccl_loaded())
      MINIDL_SKIP("a GPU case or an earlier case may have loaded them: mappings not checked");
    std::vector<std::string> mapped;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* out) {
          if (info->dlpi_name)
            for (const char* lib : {"libcublas", "libcudnn", "libnccl", "libcudart"})
              if (std::strstr(info->dlpi_name, lib))
                static_cast<std::vector<std::string>*>(out)->push_back(info->dlpi_name);
          return 0;
        },
        &mapped);
    CHECK(mapped.empty());
    for (const auto& m : mapped) MESSAGE("mapped: " << m);
  }

  TEST_CASE("the loader resolves every cuBLASLt and cuBLAS symbol from those libraries") {
    // Every symbol is resolved, from a file whose name starts with `library` (e.g.
    // "libcublas.so.").
    auto check_resolved_from = [](const std::vector<minidl::cuda::DynSymbol>& symbols,
                                  const std::string& library) {
      for (const auto& s : symbols) {
        INFO("symbol ", s.name);
        REQUIRE(s.address != nullptr);
        CHECK(std::filesystem::path(file_of(s.address)).filename().string().starts_with(library));
      }
    };
    const std::vector<minidl::cuda::DynSymbol> lt = minidl::cuda::cublaslt_symbols();
    CHECK(minidl::cuda::cublaslt_loaded());
    CHECK(minidl::cuda::cublaslt_library().path.find("libcublasLt.so.") != std::string::npos);
    CHECK(lt.size() == 14);
    check_resolved_from(lt, "libcublasLt.so.");
    const std::vector<minidl::cuda::DynSymbol> blas = minidl::cuda::cublas_symbols();
    CHECK(blas.size() == 4);
    check_resolved_from(blas, "libcublas.so.");
  }

#if defined(MINIDL_TEST_WITH_CUDNN) && defined(MINIDL_TEST_WITH_NCCL)
  TEST_CASE("the loader resolves every cuDNN and NCCL symbol from those libraries") {
    for (const auto& s : minidl::cuda::cudnn_symbols()) {
      INFO("symbol ", s.name);
      REQUIRE(s.address != nullptr);
      // cuDNN 9's libcudnn.so.9 is the front that exports the whole API.
      CHECK(std::filesystem::path(file_of(s.address))
                .filename()
                .string()
                .starts_with("libcudnn.so."));
    }
    CHECK(minidl::cuda::cudnn_symbols().size() == 24);
    CHECK(minidl::cuda::cudnn_loaded());
    CHECK(minidl::cuda::cudnn_library().path.find("libcudnn.so.") != std::string::npos);
    const auto nccl = minidl::dist::nccl_symbols();
    CHECK(nccl.size() == 13);
    for (const auto& s : nccl) {
      INFO("symbol ", s.name);
      REQUIRE(s.address != nullptr);
      CHECK(
          std::filesystem::path(file_of(s.address)).filename().string().starts_with("libnccl.so."));
    }
    CHECK(minidl::dist::nccl_loaded());
  }
#endif

  TEST_CASE("the fallback directories hold the toolkit that was loaded") {
    const std::vector<std::string> dirs = minidl::cuda::cuda_library_dirs();
    REQUIRE(!dirs.empty());
    const std::vector<minidl::cuda::DynSymbol> lt = minidl::cuda::cublaslt_symbols();
    REQUIRE(!lt.empty());
    namespace fs = std::filesystem;
    const fs::path loaded = fs::canonical(file_of(lt[0].address));
    // The configure-time toolkit directory (or a shared libcudart's, when linked so) holds it.
    bool found = false;
    for (const std::string& d : dirs) {
      INFO("dir ", d);
      CHECK(fs::is_directory(d));
      found = found || fs::equivalent(fs::canonical(d), loaded.parent_path());
    }
    CHECK(found);
  }

  TEST_CASE("a missing library or symbol fails naming it and dlerror's text") {
    const std::string lib_err =
        error_of([] { minidl::cuda::open_cuda_library("cuNotThere", "libminidl_not_there.so.7"); });
    INFO(lib_err);
    CHECK(lib_err.find("cannot load cuNotThere (libminidl_not_there.so.7)") != std::string::npos);
    CHECK(lib_err.find("dlopen(\"libminidl_not_there.so.7\"): libminidl_not_there.so.7: cannot "
                       "open shared object file") != std::string::npos);
    for (const std::string& d : minidl::cuda::cuda_library_dirs())
      CHECK(lib_err.find("dlopen(\"" + d + "/libminidl_not_there.so.7\")") != std::string::npos);

    const minidl::cuda::DynLib& lt = minidl::cuda::cublaslt_library();
    const std::string sym_err =
        error_of([&] { minidl::cuda::dynlib_symbol(lt, "cublasLtNoSuchFunction"); });
    INFO(sym_err);
    CHECK(sym_err.find("cuBLASLt (" + lt.path + ") has no symbol cublasLtNoSuchFunction") !=
          std::string::npos);
    CHECK(sym_err.find("undefined symbol: cublasLtNoSuchFunction") != std::string::npos);
  }
}
#endif  // MINIDL_TEST_WITH_CUDA
