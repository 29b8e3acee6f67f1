"""The environment a Windows build or JIT command runs in: vcvars64, the CUDA toolkit, the build variables.

Pure: the captured vcvarsall changes (``windows/vcvars.py``) applied over the
caller's environment, the toolkit's ``bin`` in front of PATH, ``CUDA_HOME`` and
``CUDA_PATH``, and ``DISTUTILS_USE_SDK=1``. The last one makes setuptools and
torch's ``BuildExtension`` use the compiler on PATH instead of running their own
vcvarsall lookup, which would pick the newest toolset installed (VS 2026's
14.5x, which CUDA 13.0 refuses); torch also checks that it is set whenever
``VSCMD_ARG_TGT_ARCH`` says a VC environment is active.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath

from windows import vcvars
from windows.toolkit import layout


def compose(base: Mapping[str, str], vc: vcvars.VcvarsEnv, cuda_home: PurePath,
            extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = vc.apply(base)
    env["PATH"] = ";".join(vcvars.dedupe([*layout.path_entries(cuda_home), *vcvars.split_list(env["PATH"])]))
    env.update(layout.toolkit_env(cuda_home))
    env["DISTUTILS_USE_SDK"] = "1"
    env.update({k.upper(): v for k, v in (extra or {}).items()})
    return env


def changed(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, str]:
    """The variables ``after`` sets differently from ``before`` (names compared case-insensitively)."""
    old = vcvars.upper_env(before)
    return {k: v for k, v in vcvars.upper_env(after).items() if old.get(k) != v}


def batch_lines(env: Mapping[str, str]) -> list[str]:
    """``set "NAME=value"`` lines a cmd.exe user can paste (``python -m ci jit --print-env``)."""
    return [f'set "{k}={v}"' for k, v in sorted(env.items())]


def powershell_lines(env: Mapping[str, str]) -> list[str]:
    return ["$env:{}='{}'".format(k, v.replace("'", "''")) for k, v in sorted(env.items())]
