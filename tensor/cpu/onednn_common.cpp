// The CPU backend switch (MINIDL_CPU_BACKEND, set_cpu_backend), the `auto` decision table, and
// with oneDNN the engine, primitive cache and execution (user scratchpad from minidl's
// allocator; oneDNN's OpenMP runtime is libgomp, minidl's, so set_num_threads governs it).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tensor/cpu/loops.h"
#include "tensor/cpu/onednn.h"
#include "tensor/cpu_isa.h"
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

#ifdef MINIDL_WITH_ONEDNN
namespace {
// MINIDL_CPU_ISA caps oneDNN's kernels too: applied once, before oneDNN's first primitive or ISA
// query (oneDNN takes its own ONEDNN_MAX_CPU_ISA from the environment by itself).
void cap_onednn_isa() {
  static const bool done = [] {
    if (cpu_isa_env_cap() >= cpu_isa_detected()) return true;
    dnnl_cpu_isa_t isa = dnnl_cpu_isa_sse41;
    switch (cpu_isa_env_cap()) {
      case CpuIsa::baseline:
        isa = dnnl_cpu_isa_sse41;
        break;
      case CpuIsa::avx2:
        isa = dnnl_cpu_isa_avx2;
        break;
      case CpuIsa::avx512:
        isa = dnnl_cpu_isa_avx512_core;
        break;
      case CpuIsa::avx512_bf16:
        isa = dnnl_cpu_isa_avx512_core_bf16;
        break;
    }
    // Refused only after oneDNN has chosen its kernels: then ONEDNN_MAX_CPU_ISA governs.
    (void)dnnl_set_max_cpu_isa(isa);
    return true;
  }();
  (void)done;
}

// At load time too: dnnl_sgemm (the attention blocks) can be oneDNN's first call.
[[maybe_unused]] const bool g_isa_capped_at_load = (cap_onednn_isa(), true);

// Whether oneDNN's effective ISA (CPUID, its own caps and minidl's) holds every bit of `isa`.
bool onednn_has(dnnl_cpu_isa_t isa) {
  cap_onednn_isa();
  static const unsigned bits = unsigned(dnnl_get_effective_cpu_isa());
  return (bits & unsigned(isa)) == unsigned(isa);
}
}  // namespace
#endif

bool onednn_native_bf16() {
#ifdef MINIDL_WITH_ONEDNN
  // avx512_core_bf16 and avx512_core_amx contain all of avx512_core_bf16's bits.
  return onednn_has(dnnl_cpu_isa_avx512_core_bf16) && cpu_isa() >= CpuIsa::avx512_bf16;
#else
  return false;
#endif
}

bool onednn_bf16_kernels() {
#ifdef MINIDL_WITH_ONEDNN
  // oneDNN 2.6 implements bf16 convolutions and matmuls from avx512_core up (emulated there).
  return onednn_has(dnnl_cpu_isa_avx512_core) && cpu_isa() >= CpuIsa::avx512;
#else
  return false;
#endif
}

bool onednn_bf16_in_f32() {
  if (!onednn_bf16_kernels()) return true;  // the only way oneDNN computes bf16 on this CPU
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
bool bmm_widened(const Tensor&, const Tensor&, Tensor&) {
  return false;
}
bool linear_bias(const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  return false;
}
#else

dnnl::engine& engine() {
  cap_onednn_isa();
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

// Elements from a plain (strided) descriptor's first element to its last, inclusive: the
// memory a view covers, gaps between its rows included (0 when a dim is 0).
int64_t extent(const dnnl::memory::desc& d) {
  const auto& dims = d.data.dims;
  const auto& strides = d.data.format_desc.blocking.strides;
  int64_t last = 0;
  for (int i = 0; i < d.data.ndims; ++i) {
    if (dims[i] == 0) return 0;
    last += (dims[i] - 1) * strides[i];
  }
  return last + 1;
}

bool is_plain(const dnnl::memory::desc& d) {
  return d.data.format_kind == dnnl_blocked && d.data.format_desc.blocking.inner_nblks == 0;
}

// The same dims and strides, f32 elements.
dnnl::memory::desc as_f32(const dnnl::memory::desc& d) {
  const auto& strides = d.data.format_desc.blocking.strides;
  return dnnl::memory::desc(d.dims(), dnnl::memory::data_type::f32,
                            dnnl::memory::dims(strides, strides + d.data.ndims));
}

// bf16 <-> f32 with BFloat16's own conversions (exact widening; nearest-even rounding, NaN kept,
// branch-free so the loops vectorise on AVX2): oneDNN 2.6's own bf16 <-> f32 reorders fall back
// to a scalar reference implementation on CPUs without AVX-512 (70-180 ms per MNIST-sized
// activation). Restrict locals: no reloads through the captured pointers after each store.
void widen_bf16(const BFloat16* src, float* dst, int64_t n) {
  parallel_for(n, 1 << 16, [src, dst](int64_t b, int64_t e) {
    const BFloat16* __restrict s = src;
    float* __restrict d = dst;
    for (int64_t i = b; i < e; ++i) d[i] = float(s[i]);
  });
}
void round_to_bf16(const float* src, BFloat16* dst, int64_t n) {
  parallel_for(n, 1 << 16, [src, dst](int64_t b, int64_t e) {
    const float* __restrict s = src;
    BFloat16* __restrict d = dst;
    for (int64_t i = b; i < e; ++i) d[i] = BFloat16(s[i]);
  });
}

// A plain bf16 user descriptor that the primitive wants as f32: minidl converts between the
// user's bf16 memory and an f32 copy with the same strides; oneDNN reorders only f32 (its JIT
// reorders) between that copy and the primitive's layout. Outputs need dense user memory (the
// rounding writes every element of the extent).
bool convert_ourselves(const Arg& a, const dnnl::memory::desc& want) {
  using dt = dnnl::memory::data_type;
  if (a.user.data_type() != dt::bf16 || want.data_type() != dt::f32 || !is_plain(a.user))
    return false;
  if (!a.output) return true;
  int64_t n = 1;
  for (int i = 0; i < a.user.data.ndims; ++i) n *= a.user.data.dims[i];
  return extent(a.user) == n;
}
}  // namespace

void execute(const Prim& p, const std::vector<Arg>& args) {
  note_thread_team(get_num_threads());  // oneDNN's primitives run on OpenMP
  dnnl::engine& eng = engine();
  dnnl::stream strm(eng);
  std::unordered_map<int, dnnl::memory> exec_args;
  std::vector<Tensor> keep;
  struct Back {
    dnnl::memory from, to;  // to: null when `from` is the f32 copy that `round_into` receives
    const float* f32 = nullptr;
    BFloat16* round_into = nullptr;
    int64_t n = 0;
  };
  std::vector<Back> write_back;
  auto scratch = [&](const dnnl::memory::desc& d, int64_t min_bytes) {
    keep.push_back(bytes(std::max<size_t>(d.get_size(), size_t(min_bytes))));
    return keep.back().data_ptr();
  };
  for (const Arg& a : args) {
    const dnnl::memory::desc want = p.pd.query_md(dnnl::query::exec_arg_md, a.id);
    if (want == a.user) {
      exec_args.emplace(a.id, dnnl::memory(a.user, eng, const_cast<void*>(a.ptr)));
      continue;
    }
    if (convert_ourselves(a, want)) {
      const int64_t n = extent(a.user);
      const dnnl::memory::desc f32 = as_f32(a.user);
      void* f32_ptr = scratch(f32, n * 4);
      dnnl::memory f32_mem(f32, eng, f32_ptr);
      dnnl::memory tmp = f32_mem;
      if (want != f32) tmp = dnnl::memory(want, eng, scratch(want, 0));
      if (a.output) {
        write_back.push_back({tmp, want != f32 ? f32_mem : dnnl::memory(),
                              static_cast<const float*>(f32_ptr),
                              static_cast<BFloat16*>(const_cast<void*>(a.ptr)), n});
      } else {
        widen_bf16(static_cast<const BFloat16*>(a.ptr), static_cast<float*>(f32_ptr), n);
        if (want != f32) dnnl::reorder(f32_mem, tmp).execute(strm, f32_mem, tmp);
      }
      exec_args.emplace(a.id, tmp);
      continue;
    }
    dnnl::memory user(a.user, eng, const_cast<void*>(a.ptr));
    dnnl::memory tmp(want, eng, scratch(want, 0));
    if (a.output)
      write_back.push_back({tmp, user});
    else
      dnnl::reorder(user, tmp).execute(strm, user, tmp);
    exec_args.emplace(a.id, tmp);
  }
  const dnnl::memory::desc sp = p.pd.scratchpad_desc();
  if (sp.get_size() > 0)
    exec_args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(sp, eng, scratch(sp, 0)));
  p.prim.execute(strm, exec_args);
  for (Back& b : write_back) {
    if (b.to) dnnl::reorder(b.from, b.to).execute(strm, b.from, b.to);
    if (b.round_into) {
      strm.wait();
      round_to_bf16(b.f32, b.round_into, b.n);
    }
  }
  strm.wait();
  g_executions.fetch_add(1, std::memory_order_relaxed);
}

#endif  // MINIDL_WITH_ONEDNN

}  // namespace cpu::onednn
}  // namespace minidl
