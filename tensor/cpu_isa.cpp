// CPU class detection (CPUID) and its caps: MINIDL_CPU_ISA, oneDNN's ONEDNN_MAX_CPU_ISA and the
// in-process setter used by tests.
#include "tensor/cpu_isa.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <optional>

#include "tensor/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace minidl {
namespace {

// -1: no in-process cap.
std::atomic<int> g_cap{-1};

CpuIsa detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 registers (XCR0).
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!avx2) return CpuIsa::baseline;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (!avx512) return CpuIsa::avx2;
  unsigned a = 0, b = 0, c = 0, d = 0;
  // Leaf 7, sub-leaf 1, EAX bit 5: AVX512_BF16.
  const bool bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)) != 0;
  return bf16 ? CpuIsa::avx512_bf16 : CpuIsa::avx512;
#else
  return CpuIsa::baseline;
#endif
}

std::string upper(std::string s) {
  for (char& ch : s) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

// oneDNN's cap (its names: SSE41, AVX, AVX2, AVX2_VNNI, AVX512_CORE, AVX512_CORE_VNNI,
// AVX512_CORE_BF16, AVX512_CORE_AMX, ALL, ...) mapped onto minidl's classes; nullopt when unset.
std::optional<CpuIsa> onednn_env_cap(const char*& which) {
  for (const char* var : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    const char* s = std::getenv(var);
    if (!s || !*s) continue;
    which = var;
    const std::string v = upper(s);
    if (v == "ALL" || v.find("AMX") != std::string::npos ||
        v.find("AVX512_CORE_BF16") != std::string::npos ||
        v.find("AVX512_CORE_FP16") != std::string::npos)
      return CpuIsa::avx512_bf16;
    if (v.find("AVX512") != std::string::npos) return CpuIsa::avx512;
    if (v.find("AVX2") != std::string::npos) return CpuIsa::avx2;
    return CpuIsa::baseline;  // SSE41, AVX
  }
  return std::nullopt;
}

struct EnvCaps {
  CpuIsa minidl = CpuIsa::avx512_bf16;  // MINIDL_CPU_ISA (native: no cap)
  bool minidl_set = false;
  std::optional<CpuIsa> onednn;
  const char* onednn_var = "";
};

const EnvCaps& env_caps() {
  static const EnvCaps caps = [] {
    EnvCaps c;
    const char* s = std::getenv("MINIDL_CPU_ISA");
    if (s && *s && std::string(s) != "native") {
      c.minidl = parse_cpu_isa(s, "MINIDL_CPU_ISA");
      c.minidl_set = true;
    }
    c.onednn = onednn_env_cap(c.onednn_var);
    return c;
  }();
  return caps;
}

}  // namespace

CpuIsa cpu_isa_detected() {
  static const CpuIsa isa = detect();
  return isa;
}

CpuIsa cpu_isa_env_cap() {
  return env_caps().minidl;
}

CpuIsa cpu_isa() {
  const EnvCaps& env = env_caps();
  CpuIsa isa = std::min(cpu_isa_detected(), env.minidl);
  if (env.onednn) isa = std::min(isa, *env.onednn);
  const int cap = g_cap.load(std::memory_order_relaxed);
  if (cap >= 0) isa = std::min(isa, CpuIsa(cap));
  return isa;
}

void set_cpu_isa_cap(CpuIsa cap) {
  g_cap.store(int(cap), std::memory_order_relaxed);
}

void clear_cpu_isa_cap() {
  g_cap.store(-1, std::memory_order_relaxed);
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::baseline:
      return "baseline";
    case CpuIsa::avx2:
      return "avx2";
    case CpuIsa::avx512:
      return "avx512";
    case CpuIsa::avx512_bf16:
      return "avx512_bf16";
  }
  return "?";
}

CpuIsa parse_cpu_isa(const std::string& name, const char* setting) {
  if (name == "native") return cpu_isa_detected();
  for (CpuIsa isa : {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512, CpuIsa::avx512_bf16})
    if (name == cpu_isa_name(isa)) return isa;
  MINIDL_FAIL(setting, ": expected avx2, avx512, avx512_bf16 or native, got `", name, "`");
}

std::string cpu_isa_summary() {
  const EnvCaps& env = env_caps();
  std::string s =
      std::string(cpu_isa_name(cpu_isa())) + " (CPU: " + cpu_isa_name(cpu_isa_detected());
  if (env.minidl_set && env.minidl < cpu_isa_detected())
    s += std::string(", capped by MINIDL_CPU_ISA=") + cpu_isa_name(env.minidl);
  if (env.onednn && *env.onednn < cpu_isa_detected())
    s += std::string(", capped by ") + env.onednn_var + "=" + std::getenv(env.onednn_var);
  const int cap = g_cap.load(std::memory_order_relaxed);
  if (cap >= 0 && CpuIsa(cap) < cpu_isa_detected())
    s += std::string(", capped by set_cpu_isa_cap(") + cpu_isa_name(CpuIsa(cap)) + ")";
  return s + ")";
}

}  // namespace minidl
