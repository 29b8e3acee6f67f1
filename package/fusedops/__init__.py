"""fusedops: fused PyTorch C++/CUDA ops built on the LibTorch stable ABI.

One wheel per platform and CUDA major serves every torch >= 2.10 and every
CPython >= 3.10. CPU kernels are always available; CUDA kernels load when the
installed torch is a CUDA build of the same CUDA major.
"""

from __future__ import annotations

from typing import Any

import torch  # noqa: F401  (loads libtorch before our libraries)

from ._loader import load as _load

_state = _load()

from . import reference  # noqa: E402
from ._bias_act import activation_funcs, bias_act  # noqa: E402
from ._lltm import LLTM, lltm  # noqa: E402
from ._round_ste import round_ste  # noqa: E402
from ._upfirdn2d import downsample2d, filter2d, setup_filter, upfirdn2d, upsample2d  # noqa: E402

__version__ = "0.1.0"
__all__ = [
    "LLTM",
    "activation_funcs",
    "bias_act",
    "build_info",
    "cuda_kernels_available",
    "downsample2d",
    "filter2d",
    "lltm",
    "reference",
    "round_ste",
    "setup_filter",
    "upfirdn2d",
    "upsample2d",
]


def cuda_kernels_available() -> bool:
    """True when the CUDA kernels were loaded (a CUDA build of torch of the wheel's CUDA major)."""
    return _state.cuda_kernels


def build_info() -> dict[str, Any]:
    """How this copy was built: torch, CUDA, nvcc and architectures, plus why CUDA kernels are (not) loaded."""
    return {**_state.build_info, "cuda_kernels_loaded": _state.cuda_kernels, "cuda_kernels_reason": _state.reason}
