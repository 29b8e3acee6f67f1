// The AVX-512 build of the CPU kernels (see isa.h): the same kernel headers as
// the baseline build, compiled for AVX-512 F/DQ/BW/VL with 512-bit vectors
// preferred (GCC otherwise keeps to 256-bit ones) into namespace cpu::avx512,
// plus the entry points the ops call when the CPU has it (isa_entry_points.inc).
// Every header these kernels need from torch or the standard library is
// included before the pragma, so only our kernels get AVX-512 code.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "../bias_act_common.h"
#include "../common.h"
#include "../lltm_impl.h"
#include "../upfirdn2d_impl.h"
#include "isa.h"

#if FUSEDOPS_HAVE_AVX2_KERNELS

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,prefer-vector-width=512")

#undef FUSEDOPS_CPU_ISA
#define FUSEDOPS_CPU_ISA avx512

#include "bias_act_kernels.h"
#include "lltm_kernels.h"
#include "round_ste_kernels.h"
#include "upfirdn2d_kernels.h"

#include "isa_entry_points.inc"

#pragma GCC pop_options

#endif  // FUSEDOPS_HAVE_AVX2_KERNELS
