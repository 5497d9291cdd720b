// The CPU backend switch (MINIDL_CPU_BACKEND, set_cpu_backend), the `auto` decision table, and
// with oneDNN the engine, primitive cache and execution (user scratchpad from minidl's
// allocator; oneDNN's OpenMP runtime is libgomp, minidl's, so set_num_threads governs it).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tensor/cpu/onednn.h"
#include "tensor/ops.h"

#ifdef MINIDL_WITH_ONEDNN
#include "tensor/cpu/onednn_internal.h"
#endif

namespace minidl {
namespace {

std::atomic<int64_t> g_executions{0};
// -1: not set by set_cpu_backend (the environment decides).
std::atomic<int> g_forced{-1};
// -1: not set by set_onednn_bf16_compute (the environment decides).
std::atomic<int> g_bf16{-1};

Bf16Compute bf16_from_env() {
  const char* s = std::getenv("MINIDL_ONEDNN_BF16");
  if (!s || !*s || std::strcmp(s, "auto") == 0) return Bf16Compute::automatic;
  if (std::strcmp(s, "bf16") == 0) return Bf16Compute::bf16;
  if (std::strcmp(s, "f32") == 0) return Bf16Compute::f32;
  MINIDL_FAIL("MINIDL_ONEDNN_BF16: expected bf16, f32 or auto, got `", s, "`");
}

CpuBackend checked(CpuBackend b, const char* where) {
  MINIDL_CHECK(b != CpuBackend::onednn || onednn_available(), where,
               ": the `onednn` CPU backend was requested but this build of minidl has no oneDNN "
               "(configure with libdnnl-dev installed and -DMINIDL_ONEDNN=ON)");
  return b;
}

CpuBackend from_env() {
  const char* s = std::getenv("MINIDL_CPU_BACKEND");
  if (!s || !*s || std::strcmp(s, "auto") == 0) return CpuBackend::automatic;
  if (std::strcmp(s, "eigen") == 0) return CpuBackend::eigen;
  if (std::strcmp(s, "onednn") == 0) return checked(CpuBackend::onednn, "MINIDL_CPU_BACKEND");
  MINIDL_FAIL("MINIDL_CPU_BACKEND: expected eigen, onednn or auto, got `", s, "`");
}

}  // namespace

bool onednn_available() {
#ifdef MINIDL_WITH_ONEDNN
  return true;
#else
  return false;
#endif
}

CpuBackend cpu_backend() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  if (forced >= 0) return CpuBackend(forced);
  static const CpuBackend env = from_env();
  return env;
}

void set_cpu_backend(CpuBackend backend) {
  g_forced.store(int(checked(backend, "set_cpu_backend")), std::memory_order_relaxed);
}

const char* cpu_backend_name(CpuBackend backend) {
  switch (backend) {
    case CpuBackend::eigen:
      return "eigen";
    case CpuBackend::onednn:
      return "onednn";
    case CpuBackend::automatic:
      return "auto";
  }
  return "?";
}

int64_t onednn_executions() {
  return g_executions.load(std::memory_order_relaxed);
}

void set_onednn_bf16_compute(Bf16Compute compute) {
  g_bf16.store(int(compute), std::memory_order_relaxed);
}

bool onednn_native_bf16() {
#ifdef MINIDL_WITH_ONEDNN
  // The ISA oneDNN dispatches to (CPUID, capped by ONEDNN_MAX_CPU_ISA): avx512_core_bf16 and
  // avx512_core_amx contain all of avx512_core_bf16's bits.
  static const bool native = [] {
    const auto bits = unsigned(dnnl_get_effective_cpu_isa());
    return (bits & unsigned(dnnl_cpu_isa_avx512_core_bf16)) ==
           unsigned(dnnl_cpu_isa_avx512_core_bf16);
  }();
  return native;
#else
  return false;
#endif
}

bool onednn_bf16_in_f32() {
  const int forced = g_bf16.load(std::memory_order_relaxed);
  static const Bf16Compute env = bf16_from_env();
  const Bf16Compute c = forced >= 0 ? Bf16Compute(forced) : env;
  if (c == Bf16Compute::automatic) return !onednn_native_bf16();
  return c == Bf16Compute::f32;
}

namespace cpu::onednn {

// The `auto` table (README.md, CPU math; numbers in bench/results/cpu-onednn-2026-11-24.md,
// 2 threads on the 2-core AMD EPYC with avx512_bf16; oneDNN's JIT kernels use AVX-512 where
// minidl's Eigen is built for AVX2). Convolutions with >= 16 input channels per group (MNIST
// conv2): oneDNN for all three ops, f32 1.4-2x and bf16 2.3-6.6x faster than Eigen. Fewer
// channels (MNIST conv1, depthwise): Eigen, whose im2col GEMM wins backward-input 3-5x there
// (oneDNN's f32 backward-weight of conv1 is 1.4-1.7x faster, but 0.1 ms, and its blocked sum
// order misses the existing conv tests' 1e-5 per-element f32 tolerance on cancelled sums).
// matmul: oneDNN from 64^3 multiply-adds (f32 2x Eigen from 64x128x800 up, even at 64^3) and
// always for bf16 (its bf16 dot products against Eigen's convert-to-f32 path).
bool auto_prefers_onednn(OpClass op, DType dtype, const int64_t* dims) {
  if (dtype != kFloat32 && dtype != kBFloat16) return false;
  if (op == OpClass::matmul)
    return dtype == kBFloat16 || dims[0] * dims[1] * dims[2] * dims[3] >= (int64_t(1) << 18);
  const int64_t cg = dims[1];
  const bool depthwise = dims[4] != 0;
  return cg >= 16 && !depthwise;
}

#ifndef MINIDL_WITH_ONEDNN
bool conv2d(const Tensor&, const Tensor&, const Tensor&, Tensor&, const Conv2dParams&) {
  return false;
}
bool conv2d_backward_input(const Tensor&, const Tensor&, Tensor&, const Conv2dParams&) {
  return false;
}
bool conv2d_backward_weight(const Tensor&, const Tensor&, Tensor&, const Conv2dParams&) {
  return false;
}
bool bmm(const Tensor&, const Tensor&, Tensor&) {
  return false;
}
bool linear_bias(const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  return false;
}
#else

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

std::optional<dnnl::memory::data_type> to_dnnl(DType dtype) {
  if (dtype == kFloat32) return dnnl::memory::data_type::f32;
  if (dtype == kBFloat16) return dnnl::memory::data_type::bf16;
  return std::nullopt;
}

bool wanted(OpClass op, DType dtype, const int64_t* dims) {
  if (!to_dnnl(dtype)) return false;  // f64 (gradcheck), f16, integers: Eigen only
  switch (cpu_backend()) {
    case CpuBackend::eigen:
      return false;
    case CpuBackend::onednn:
      return true;
    case CpuBackend::automatic:
      return auto_prefers_onednn(op, dtype, dims);
  }
  return false;
}

std::shared_ptr<const Prim> PrimCache::get(
    const Key& key, const std::function<std::shared_ptr<const Prim>()>& make) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it != map_.end()) return it->second;
  std::shared_ptr<const Prim> p;
  try {
    p = make();
  } catch (const dnnl::error&) {
    p = nullptr;  // unimplemented in this oneDNN: the caller falls back to Eigen
  }
  map_.emplace(key, p);
  return p;
}

dnnl::primitive_attr default_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::memory::desc plain(const std::vector<int64_t>& dims, dnnl::memory::data_type dt) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;)
    strides[i - 1] = strides[i] * std::max<int64_t>(dims[i], 1);
  return dnnl::memory::desc(dims, dt, strides);
}

dnnl::memory::desc strided(const std::vector<int64_t>& dims, dnnl::memory::data_type dt,
                           const std::vector<int64_t>& strides) {
  return dnnl::memory::desc(dims, dt, strides);
}

namespace {
// Bytes from minidl's CPU allocator (its large-block cache makes per-call scratchpads and
// reorder buffers cheap), kept alive by the returned tensor.
Tensor bytes(size_t n) {
  return empty({int64_t(n)}, kUInt8, kCPU);
}
}  // namespace

void execute(const Prim& p, const std::vector<Arg>& args) {
  dnnl::engine& eng = engine();
  dnnl::stream strm(eng);
  std::unordered_map<int, dnnl::memory> exec_args;
  std::vector<Tensor> keep;
  struct Back {
    dnnl::memory from, to;
  };
  std::vector<Back> write_back;
  for (const Arg& a : args) {
    dnnl::memory user(a.user, eng, const_cast<void*>(a.ptr));
    const dnnl::memory::desc want = p.pd.query_md(dnnl::query::exec_arg_md, a.id);
    if (want == a.user) {
      exec_args.emplace(a.id, user);
      continue;
    }
    keep.push_back(bytes(want.get_size()));
    dnnl::memory tmp(want, eng, keep.back().data_ptr());
    if (a.output)
      write_back.push_back({tmp, user});
    else
      dnnl::reorder(user, tmp).execute(strm, user, tmp);
    exec_args.emplace(a.id, tmp);
  }
  const dnnl::memory::desc sp = p.pd.scratchpad_desc();
  if (sp.get_size() > 0) {
    keep.push_back(bytes(sp.get_size()));
    exec_args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(sp, eng, keep.back().data_ptr()));
  }
  p.prim.execute(strm, exec_args);
  for (Back& b : write_back) dnnl::reorder(b.from, b.to).execute(strm, b.from, b.to);
  strm.wait();
  g_executions.fetch_add(1, std::memory_order_relaxed);
}

#endif  // MINIDL_WITH_ONEDNN

}  // namespace cpu::onednn
}  // namespace minidl
