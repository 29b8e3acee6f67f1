// Which instruction set the CPU kernels run with.
//
// The wheel is built for the x86-64 baseline (SSE2), which every user's CPU
// has. The elementwise kernels are plain loops that the compiler vectorises;
// compiled once more for AVX2+FMA (8 floats a vector instead of 4, fused
// multiply-add, blends) they run about twice as fast on the CPUs that have it.
// So each kernel header is compiled twice:
//
// * by the op's own file (bias_act.cpp, ...) into namespace cpu::base, and
// * by avx2.cpp, under `#pragma GCC target("avx2,fma")`, into namespace
//   cpu::avx2, with explicit instantiations of the entry points,
//
// and the op picks one at run time (use_avx2()). The two copies live in
// different namespaces, so the linker can never substitute AVX2 code for
// baseline code. Set FUSEDOPS_CPU_ISA=baseline to force the baseline kernels
// (the tests do, to cover both), =avx2 to insist on AVX2 when available.
#pragma once

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

inline bool detect_avx2() {
#if FUSEDOPS_HAVE_AVX2_KERNELS
  const char* env = std::getenv("FUSEDOPS_CPU_ISA");
  if (env != nullptr && (std::strcmp(env, "baseline") == 0 || std::strcmp(env, "base") == 0)) return false;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// Decided once per process.
inline bool use_avx2() {
  static const bool value = detect_avx2();
  return value;
}

inline const char* isa_name() { return use_avx2() ? "avx2" : "baseline"; }

}  // namespace cpu
}  // namespace fusedops
