// Which instruction set the CPU kernels run with.
//
// The wheel is built for the x86-64 baseline (SSE2), which every user's CPU
// has. The elementwise kernels are plain loops that the compiler vectorises;
// compiled once more for AVX2+FMA (8 floats a vector instead of 4, fused
// multiply-add, blends) they run about twice as fast on the CPUs that have it,
// and once more for AVX-512 (16 floats a vector, mask registers), which
// torch.compile's own CPU code uses where the CPU has it (without it, swish
// ran 1.56x slower than compiled on a 2-core AVX-512 Xeon). So each kernel
// header is compiled three times:
//
// * by the op's own file (bias_act.cpp, ...) into namespace cpu::base,
// * by avx2.cpp, under `#pragma GCC target("avx2,fma")`, into cpu::avx2,
// * by avx512.cpp, under an AVX-512 target pragma, into cpu::avx512,
//
// each with explicit instantiations of the entry points (isa_entry_points.inc),
// and the op picks one at run time (use_avx512(), use_avx2()). The copies live
// in different namespaces, so the linker can never substitute one for another.
// FUSEDOPS_CPU_ISA=baseline forces the baseline kernels, =avx2 the AVX2 ones
// (the tests run both that way, to cover every build); unset, the best the CPU
// has is used.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>

#ifndef FUSEDOPS_CPU_ISA
#define FUSEDOPS_CPU_ISA base
#endif

// AVX2 variants exist for GCC on x86-64 (Clang has no `#pragma GCC target`;
// other architectures have one vector baseline, e.g. NEON on aarch64).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FUSEDOPS_HAVE_AVX2_KERNELS 1
#else
#define FUSEDOPS_HAVE_AVX2_KERNELS 0
#endif

#if defined(__GNUC__) || defined(__clang__)
#define FUSEDOPS_CPU_INLINE inline __attribute__((always_inline))
#else
#define FUSEDOPS_CPU_INLINE inline
#endif

namespace fusedops {
namespace cpu {

// 0: baseline, 1: AVX2+FMA, 2: AVX-512 (F, DQ, BW, VL), capped by FUSEDOPS_CPU_ISA.
inline int detect_isa() {
#if FUSEDOPS_HAVE_AVX2_KERNELS
  const char* env = std::getenv("FUSEDOPS_CPU_ISA");
  int cap = 2;
  if (env != nullptr && (std::strcmp(env, "baseline") == 0 || std::strcmp(env, "base") == 0)) cap = 0;
  if (env != nullptr && std::strcmp(env, "avx2") == 0) cap = 1;
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return std::min(cap, avx512 ? 2 : (avx2 ? 1 : 0));
#else
  return 0;
#endif
}

// Decided once per process.
inline int isa_level() {
  static const int value = detect_isa();
  return value;
}

inline bool use_avx512() { return isa_level() == 2; }
inline bool use_avx2() { return isa_level() == 1; }

inline const char* isa_name() {
  static const char* const names[] = {"baseline", "avx2", "avx512"};
  return names[isa_level()];
}

}  // namespace cpu
}  // namespace fusedops
