// The CPU class minidl dispatches on: detection against the compiler's CPUID view, the caps
// (MINIDL_CPU_ISA for a whole process — tools/test-cpu-backends.sh runs these under each —,
// set_cpu_isa_cap in-process), oneDNN following the environment cap, and the capped AVX2 path of
// the fused attention agreeing with the AVX-512 one.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "nn/attention.h"
#include "tensor/cpu/onednn.h"
#include "tensor/cpu_isa.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {
// Caps minidl's dispatch for a scope.
struct IsaCapScope {
  explicit IsaCapScope(CpuIsa cap) { set_cpu_isa_cap(cap); }
  ~IsaCapScope() { clear_cpu_isa_cap(); }
};
}  // namespace

TEST_CASE("cpu isa: detection matches the CPU's feature bits") {
  const CpuIsa d = cpu_isa_detected();
  INFO("detected ", cpu_isa_name(d), "; in force ", cpu_isa_summary());
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  CHECK((d >= CpuIsa::avx2) == avx2);
  CHECK((d >= CpuIsa::avx512) == avx512);
#if defined(__AVX2__)
  CHECK(d >= CpuIsa::avx2);  // this binary runs AVX2 code (x86-64-v3 build)
#endif
  CHECK(cpu_isa() <= d);
}

TEST_CASE("cpu isa: names parse both ways, unknown values name the setting") {
  for (CpuIsa isa : {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512, CpuIsa::avx512_bf16})
    CHECK(parse_cpu_isa(cpu_isa_name(isa), "X") == isa);
  CHECK(parse_cpu_isa("native", "X") == cpu_isa_detected());
  try {
    parse_cpu_isa("avx3", "MINIDL_CPU_ISA");
    FAIL("no error");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("MINIDL_CPU_ISA") != std::string::npos);
    CHECK(m.find("avx3") != std::string::npos);
  }
}

TEST_CASE("cpu isa: the environment cap holds for minidl and oneDNN alike") {
  const char* env = std::getenv("MINIDL_CPU_ISA");
  const CpuIsa want = env && *env
                          ? std::min(cpu_isa_detected(), parse_cpu_isa(env, "MINIDL_CPU_ISA"))
                          : cpu_isa_detected();
  INFO("MINIDL_CPU_ISA=", env ? env : "(unset)", "; in force ", cpu_isa_summary());
  if (!std::getenv("ONEDNN_MAX_CPU_ISA") && !std::getenv("DNNL_MAX_CPU_ISA"))
    CHECK(cpu_isa() == want);
  // oneDNN's kernels were capped at its first use: bf16 kernels exist from AVX-512 up
  if (onednn_available()) {
    CHECK(onednn_bf16_kernels() == (cpu_isa() >= CpuIsa::avx512));
    CHECK(onednn_native_bf16() == (cpu_isa() >= CpuIsa::avx512_bf16));
  }
}

TEST_CASE("cpu isa: set_cpu_isa_cap lowers the class in force and says so") {
  const CpuIsa before = cpu_isa();
  {
    IsaCapScope cap(CpuIsa::avx2);
    CHECK(cpu_isa() == std::min(before, CpuIsa::avx2));
    if (cpu_isa_detected() > CpuIsa::avx2)
      CHECK(cpu_isa_summary().find("set_cpu_isa_cap(avx2)") != std::string::npos);
    CHECK_FALSE(onednn_bf16_kernels());
    CHECK(onednn_bf16_in_f32());
  }
  CHECK(cpu_isa() == before);
  IsaCapScope cap(CpuIsa::avx512_bf16);  // a cap above the CPU changes nothing
  CHECK(cpu_isa() == before);
}

TEST_CASE("cpu isa: fused attention's AVX2 path (capped) agrees with the native path (f32)") {
  Tensor q = random_tensor({2, 2, 70, 16}, kFloat32, 61, -1.5, 1.5);
  Tensor k = random_tensor({2, 2, 90, 16}, kFloat32, 62, -1.5, 1.5);
  Tensor v = random_tensor({2, 2, 90, 24}, kFloat32, 63, -1.5, 1.5);
  Tensor native = scaled_dot_product_attention(q, k, v, {}, 0.0, false);
  Tensor capped;
  {
    IsaCapScope cap(CpuIsa::avx2);
    capped = scaled_dot_product_attention(q, k, v, {}, 0.0, false);
  }
  Tensor ref = scaled_dot_product_attention_math(q.to(kFloat64), k.to(kFloat64), v.to(kFloat64), {},
                                                 0.0, false);
  check_close(capped, ref, 1e-5, 1e-5);
  check_close(native, ref, 1e-5, 1e-5);
  check_close(capped, native, 1e-6, 1e-6);
}
