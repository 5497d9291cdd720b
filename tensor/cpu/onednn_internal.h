// Shared oneDNN plumbing for tensor/cpu/onednn_{conv,matmul}.cpp (only built with oneDNN):
// the engine, a per-shape primitive cache, and execution with user scratchpads and reorders
// whose memory comes from minidl's CPU allocator.
#pragma once
#ifndef MINIDL_WITH_ONEDNN
#error "tensor/cpu/onednn_internal.h needs MINIDL_WITH_ONEDNN"
#endif
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensor/cpu/onednn.h"
#include "tensor/tensor.h"

namespace minidl::cpu::onednn {

dnnl::engine& engine();
// f32 / bf16 -> oneDNN data type; nullopt for every other dtype (those stay on Eigen).
std::optional<dnnl::memory::data_type> to_dnnl(DType dtype);
// The backend choice for one call: dtype supported, build has oneDNN, backend or auto says so.
bool wanted(OpClass op, DType dtype, const int64_t* dims);

// A cache key: the op's integers (kind, dtypes, dims, strides, parameters).
struct Key {
  std::vector<int64_t> v;
  // push_back loops: GCC 12 reports a false -Wstringop-overflow on vector::insert here.
  Key& add(std::initializer_list<int64_t> xs) {
    for (int64_t x : xs) v.push_back(x);
    return *this;
  }
  Key& add(const std::vector<int64_t>& xs) {
    v.push_back(int64_t(xs.size()));
    for (int64_t x : xs) v.push_back(x);
    return *this;
  }
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& k) const noexcept {
    size_t h = 1469598103934665603ull;
    for (int64_t x : k.v) h = (h ^ size_t(x)) * 1099511628211ull;
    return h;
  }
};

// A primitive with its descriptor (null when oneDNN has no implementation for the case).
struct Prim {
  dnnl::primitive prim;
  dnnl::primitive_desc_base pd;
};

// Per-shape cache of primitives: make() runs once per key (under the lock; it returns nullptr
// when oneDNN refuses the case, which is cached as well).
class PrimCache {
 public:
  std::shared_ptr<const Prim> get(const Key& key,
                                  const std::function<std::shared_ptr<const Prim>()>& make);

 private:
  std::mutex mu_;
  std::unordered_map<Key, std::shared_ptr<const Prim>, KeyHash> map_;
};

// The primitive attributes every minidl primitive uses: user scratchpad, f32 accumulation.
dnnl::primitive_attr default_attr();

// One execution argument: its plain (user) layout and data pointer. Outputs whose layout the
// primitive wants differently are computed into a temporary and reordered back.
struct Arg {
  int id;
  dnnl::memory::desc user;
  const void* ptr;
  bool output = false;
};
// Executes p with args, a scratchpad from minidl's allocator and reorders between user and
// primitive layouts where they differ; counts one execution.
void execute(const Prim& p, const std::vector<Arg>& args);

// Plain descriptors.
dnnl::memory::desc plain(const std::vector<int64_t>& dims, dnnl::memory::data_type dt);
dnnl::memory::desc strided(const std::vector<int64_t>& dims, dnnl::memory::data_type dt,
                           const std::vector<int64_t>& strides);

}  // namespace minidl::cpu::onednn
