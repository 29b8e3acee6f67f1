"""Which DLLs an extension may import on Windows, and which a repaired wheel must never carry.

* Windows itself: the API sets (``api-ms-win-*``, ``ext-ms-*``) and the DLLs every
  supported Windows has (delvewheel's own list for x64, the same list its
  repair uses);
* the Visual C++ runtime (``vcruntime140*.dll``, ``msvcp140*.dll``,
  ``concrt140.dll``, ``vcomp140.dll``, ``ucrtbase.dll``): CPython ships
  ``vcruntime140*.dll`` and torch's own DLLs need the rest, so an extension that
  loads next to torch finds them;
* CPython: ``python3.dll`` (the stable ABI) or ``python3XY.dll``;
* torch's DLLs (``c10.dll``, ``torch_cpu.dll`` ...) and the CUDA DLLs torch's
  CUDA wheels ship for the cell's major (``cudart64_13.dll`` ...): they come from
  the user's torch install, never from the wheel.

When the build has the target's torch at hand, the torch and CUDA DLLs are the
files of its ``torch/lib`` (and ``nvidia/*/bin``) folders, not these lists.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

#: torch's own DLLs (torch/lib of the Windows wheels).
TORCH_DLLS = (
    "c10.dll", "c10_cuda.dll", "torch.dll", "torch_cpu.dll", "torch_cuda.dll", "torch_python.dll",
    "torch_global_deps.dll", "shm.dll", "fbgemm.dll", "asmjit.dll", "libiomp5md.dll", "uv.dll", "caffe2_nvrtc.dll",
)

#: CUDA DLL families (any major): never vendored, whatever the cell.
CUDA_DLL_PATTERNS = (
    "cudart64_*.dll", "cublas64_*.dll", "cublaslt64_*.dll", "cufft64_*.dll", "cufftw64_*.dll", "curand64_*.dll",
    "cusolver64_*.dll", "cusolvermg64_*.dll", "cusparse64_*.dll", "nvrtc64_*.dll", "nvrtc-builtins64_*.dll",
    "nvjitlink_*.dll", "cudnn*64_*.dll", "nvtoolsext64_*.dll", "cupti64_*.dll", "nvfatbin_*.dll", "nvcuda.dll",
)

_VC_RUNTIME = re.compile(r"(vcruntime140(_1)?|msvcp140(_1|_2|_atomic_wait|_codecvt_ids)?|concrt140|vcomp140|ucrtbase)"
                         r"\.dll")
_API_SET = re.compile(r"(api|ext)-ms-win-.*\.dll")
_PYTHON = re.compile(r"python3(\d+)?t?\.dll")
#: delvewheel names vendored DLLs ``name-<32 hex digits>.dll``.
_MANGLED = re.compile(r"(?P<stem>.+)-[0-9a-f]{32}\.dll")

# A few that delvewheel's list may lack on older versions; the rest comes from delvewheel.
_SYSTEM_FALLBACK = frozenset({
    "kernel32.dll", "user32.dll", "advapi32.dll", "shell32.dll", "ole32.dll", "oleaut32.dll", "ws2_32.dll",
    "bcrypt.dll", "dbghelp.dll", "ntdll.dll", "psapi.dll", "shlwapi.dll", "version.dll", "winmm.dll", "gdi32.dll",
    "crypt32.dll", "secur32.dll", "setupapi.dll", "cfgmgr32.dll", "dxgi.dll", "d3d11.dll", "d3d12.dll", "opengl32.dll",
})


def _system_names() -> frozenset[str]:
    try:
        from delvewheel import _dll_list  # the list delvewheel's repair itself trusts

        names = _dll_list.ignore_names[_dll_list.MachineType.AMD64]
        return frozenset(n.lower() for n in names) | _SYSTEM_FALLBACK
    except (ImportError, AttributeError, KeyError):  # pragma: no cover - another delvewheel layout
        return _SYSTEM_FALLBACK


SYSTEM_DLLS = _system_names()


def unmangled(name: str) -> str:
    """``helper-1a2b...32hex.dll`` -> ``helper.dll`` (a DLL delvewheel vendored and renamed)."""
    m = _MANGLED.fullmatch(name.lower())
    return f"{m.group('stem')}.dll" if m else name.lower()


def is_system(name: str) -> bool:
    low = name.lower()
    return low in SYSTEM_DLLS or bool(_API_SET.fullmatch(low))


def is_vc_runtime(name: str) -> bool:
    return bool(_VC_RUNTIME.fullmatch(name.lower()))


def python_dll(name: str) -> str | None:
    """``python3`` (stable ABI), ``python312`` ... or None."""
    m = _PYTHON.fullmatch(name.lower())
    return None if m is None else name.lower()[:-4]


def is_torch(name: str) -> bool:
    return name.lower() in TORCH_DLLS


def is_cuda(name: str) -> bool:
    low = name.lower()
    return any(fnmatch.fnmatch(low, p) for p in CUDA_DLL_PATTERNS)


def cudart(cuda_major: int) -> str:
    return f"cudart64_{cuda_major}.dll"


def cudart_major(name: str) -> int | None:
    """The CUDA runtime major a DLL name is (``cudart64_13.dll`` -> 13; CUDA 11's ``cudart64_110.dll`` -> 11), or
    None for any other DLL."""
    m = re.fullmatch(r"cudart64_(\d\d)\d?\.dll", name.lower())
    return int(m.group(1)) if m else None


def cuda_dlls_of_major(cuda_major: int) -> tuple[str, ...]:
    """Patterns of the CUDA DLLs torch's CUDA ``cuda_major`` wheels ship (used without a torch install at hand)."""
    libs = {13: ("cublas64_13.dll", "cublaslt64_13.dll", "cufft64_12.dll", "cufftw64_12.dll", "cusolver64_12.dll",
                 "cusolvermg64_12.dll", "cusparse64_12.dll", "nvrtc64_130_*.dll", "nvrtc-builtins64_13*.dll",
                 "nvjitlink_130_*.dll"),
            12: ("cublas64_12.dll", "cublaslt64_12.dll", "cufft64_11.dll", "cufftw64_11.dll", "cusolver64_11.dll",
                 "cusolvermg64_11.dll", "cusparse64_12.dll", "nvrtc64_120_*.dll", "nvrtc-builtins64_12*.dll",
                 "nvjitlink_120_*.dll")}
    return (cudart(cuda_major), *libs.get(cuda_major, ()), "curand64_10.dll", "cudnn*64_9.dll",
            "nvtoolsext64_1.dll", "cupti64_*.dll", "nvcuda.dll")


def repair_excludes() -> tuple[str, ...]:
    """What ``delvewheel repair`` must never vendor: torch's DLLs and every CUDA DLL."""
    return (*TORCH_DLLS, *CUDA_DLL_PATTERNS)


def matches_any(name: str, patterns: Iterable[str]) -> bool:
    low = name.lower()
    return any(fnmatch.fnmatch(low, p.lower()) for p in patterns)
