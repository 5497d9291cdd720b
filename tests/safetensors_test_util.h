// Shared helpers of the safetensors tests: byte images of files, raw tensor bytes, error
// capture, and a temporary directory that counts leftover temp files.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "tensor/atomic_file.h"
#include "tensor/safetensors.h"
#include "test_util.h"

using namespace minidl;
using testutil::from_f64;
using testutil::random_tensor;
namespace fs = std::filesystem;

namespace sttest {

inline const DType kAllDTypes[] = {kFloat64, kFloat32, kFloat16, kBFloat16,
                                   kInt64,   kInt32,   kUInt8,   kBool};

inline std::string le64(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}
inline std::string image(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}
template <typename T>
inline std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
// Raw row-major bytes of a tensor.
inline std::string raw(const Tensor& t) {
  Tensor c = t.to(kCPU).contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}
inline std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
inline void write_file(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

// Message of the minidl::Error thrown by f ("<no exception>" / "<other exception>" otherwise).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<other exception> ") + e.what();
  }
  return "<no exception>";
}
// Loading `bytes` must throw an Error naming the source and containing every part.
inline void expect_load_error(const std::string& bytes, std::initializer_list<const char*> parts) {
  const std::string msg = error_of([&] { load_safetensors_bytes(bytes, nullptr, "bad.st"); });
  bool ok = msg.find("'bad.st'") != std::string::npos;
  for (const char* p : parts) ok = ok && msg.find(p) != std::string::npos;
  CHECK_MESSAGE(ok, "expected: ", std::string(*parts.begin()), "; message: ", msg);
}

// A fresh directory under the system temp dir, removed with its contents at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "minidl_st_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  size_t temp_files() const {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(path)) {
      n += e.path().filename().string().find(".tmp.") != std::string::npos;
    }
    return n;
  }
};

// A small valid file with several dtypes (and a metadata entry) for the fuzz tests.
inline std::string sample_image() {
  std::map<std::string, Tensor> m{{"w", random_tensor({3, 4}, kFloat32, 1)},
                                  {"b", random_tensor({4}, kFloat16, 2)},
                                  {"idx", random_tensor({5}, kInt64, 3, -100, 100)},
                                  {"mask", random_tensor({6}, kBool, 4)},
                                  {"empty", random_tensor({0, 2}, kBFloat16, 5)}};
  return save_safetensors_bytes(m, {{"format", "pt"}});
}

}  // namespace sttest
using namespace sttest;
