// The x86-64 instruction-set class minidl's CPU code dispatches on: the running CPU's features
// (CPUID), capped by MINIDL_CPU_ISA / ONEDNN_MAX_CPU_ISA or set_cpu_isa_cap, so that one host
// can run (and test) the paths of every lesser CPU class.
#pragma once
#include <cstdint>
#include <string>

namespace minidl {

// Ordered: each class has every feature of the ones before it.
//   baseline:    x86-64 below AVX2 (only a MINIDL_PORTABLE build runs there)
//   avx2:        AVX2 + FMA (x86-64-v3: AMD Zen 1-3, Intel Haswell..Alder Lake)
//   avx512:      AVX-512 F/BW/VL/DQ (oneDNN's avx512_core: Skylake-SP, Ice Lake, Sapphire Rapids
//                without AMX's bf16 counted separately below)
//   avx512_bf16: avx512 + AVX512_BF16 (native bf16 dot products: Cooper Lake, Sapphire Rapids,
//                AMD Zen 4/5)
enum class CpuIsa : uint8_t { baseline, avx2, avx512, avx512_bf16 };

// What the running CPU supports (CPUID and the OS's saved AVX-512 state), uncapped.
CpuIsa cpu_isa_detected();

// The class minidl's kernels and oneDNN dispatch to: the detected one, capped by the lowest of
// set_cpu_isa_cap(), MINIDL_CPU_ISA (avx2 | avx512 | avx512_bf16 | native; read once) and
// oneDNN's own ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA.
CpuIsa cpu_isa();

// The cap MINIDL_CPU_ISA asks for (native: none); throws on an unknown value.
CpuIsa cpu_isa_env_cap();

// Caps minidl's own dispatch in this process (tests compare paths with it); `native` lifts the
// setter's cap. oneDNN's kernels are chosen once, at its first use, from the environment caps
// only: the per-ISA runs of tools/test-cpu-backends.sh set MINIDL_CPU_ISA for a whole process.
void set_cpu_isa_cap(CpuIsa cap);
void clear_cpu_isa_cap();

// "avx2", "avx512", "avx512_bf16", "baseline".
const char* cpu_isa_name(CpuIsa isa);
// Parses those names ("native" gives the detected class); throws naming the setting on others.
CpuIsa parse_cpu_isa(const std::string& name, const char* setting);

// One line for banners and --help: "avx512_bf16 (CPU: avx512_bf16)" or
// "avx2 (CPU: avx512_bf16, capped by MINIDL_CPU_ISA=avx2)".
std::string cpu_isa_summary();

}  // namespace minidl
