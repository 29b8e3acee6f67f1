"""What ``python -m ci doctor`` needs to know about a machine, read in the user's own interpreter.

Run it with the interpreter whose torch you want judged; it prints one JSON object on stdout::

    python ci/doctor/probe.py            # or: python -m ci.doctor.probe (from the farm's checkout)

The doctor command runs it for you (``--python``, default the ``python`` first on your PATH); a file it printed
is a *recorded environment* that ``doctor --env FILE`` judges instead of this machine (tests/fixtures/doctor/).

Fields (each may be null; ``notes`` says why)::

    python    executable, version, implementation, abi (cp311, cp313t)
    platform  os (sys.platform), machine, libc ("glibc", or null), glibc ("2.35")
    tags      packaging.tags.sys_tags() of this interpreter, best first (null without packaging)
    torch     {version, cuda (torch.version.cuda: null for a CPU-only build)}, or null when not installed
    driver    {version (nvidia-smi's driver_version), cuda (cuDriverGetVersion: the newest CUDA it runs)}
    gpus      [{index, name, capability "9.0"}] from torch, else from nvidia-smi

It never fails: a field it cannot read is null with a note. Standard library only (``packaging`` and
``torch`` are used when the interpreter has them), and Python 3.8 syntax: it runs in whatever the user has.
Every command it starts is printed first, on stderr, as a line that can be run again by hand.
"""

from __future__ import annotations

import os
import sys

# Run as a file, Python puts this folder (the farm's ci/) first on sys.path: its modules (coverage.py, build.py,
# shell.py) would shadow the user's packages of those names while torch imports.
if __name__ == "__main__" and sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(
        os.path.abspath(__file__)):
    del sys.path[0]

import contextlib
import ctypes
import json
import platform
import shlex
import shutil
import subprocess
import sysconfig
from collections.abc import Callable
from typing import Any, TypeVar

FORMAT = 1
NVIDIA_SMI_FIELDS = "index,name,compute_cap,driver_version"
T = TypeVar("T")


def _python(notes: list[str]) -> dict[str, Any]:
    version = platform.python_version()
    abi = None
    if sys.implementation.name == "cpython":
        threaded = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
        abi = f"cp{sys.version_info[0]}{sys.version_info[1]}{threaded}"
    else:
        notes.append(f"python: {sys.implementation.name} is not CPython: only py3-none wheels can fit")
    return {"executable": sys.executable, "version": version, "implementation": sys.implementation.name, "abi": abi}


def _tags(notes: list[str]) -> list[str] | None:
    try:
        from packaging import tags
    except ImportError:
        notes.append("tags: packaging is not installed in this interpreter; the doctor derives them from the "
                     "Python, libc and machine fields")
        return None
    try:
        return [str(t) for t in tags.sys_tags()]
    except Exception as exc:  # a broken or very old packaging must not cost the rest of the probe
        notes.append(f"tags: packaging.tags.sys_tags() failed ({type(exc).__name__}: {exc})")
        return None


def _platform(notes: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {"os": sys.platform, "machine": platform.machine(), "libc": None, "glibc": None}
    if not sys.platform.startswith("linux"):
        return found
    text = ""
    with contextlib.suppress(AttributeError, ValueError, OSError):
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    if not text.startswith("glibc "):
        lib, version = platform.libc_ver()
        text = f"glibc {version}" if lib == "glibc" and version else ""
    if text:
        found["libc"], found["glibc"] = "glibc", text.split()[-1]
    else:
        notes.append("glibc: not found (a musl system?): manylinux wheels need glibc")
    return found


def _torch(notes: list[str]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """torch's version and CUDA, and the GPUs torch sees (empty when it sees none)."""
    try:
        from importlib import metadata

        version = metadata.version("torch")
    except Exception:
        notes.append(f"torch: not installed in {sys.executable}")
        return None, []
    found: dict[str, Any] = {"version": version, "cuda": None}
    try:
        import torch
    except Exception as exc:  # installed but broken: judge by its version's label (+cu130, +cpu)
        notes.append(f"torch: `import torch` failed ({type(exc).__name__}: {exc}); CUDA read from its version label")
        local = version.partition("+")[2]
        if local.startswith("cu") and local[2:].isdigit() and len(local) > 3:
            found["cuda"] = f"{local[2:-1]}.{local[-1]}"
        return found, []
    found["cuda"] = getattr(torch.version, "cuda", None)
    if getattr(torch.version, "hip", None):
        found["hip"] = torch.version.hip
        notes.append(f"torch: a ROCm build (HIP {torch.version.hip}): CUDA wheels do not run on it")
    gpus: list[dict[str, Any]] = []
    try:
        if found["cuda"] and torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                major, minor = torch.cuda.get_device_capability(i)
                gpus.append({"index": i, "name": torch.cuda.get_device_name(i), "capability": f"{major}.{minor}"})
        elif found["cuda"]:
            notes.append("torch: torch.cuda.is_available() is False (no GPU, or a driver too old for its CUDA)")
    except Exception as exc:
        notes.append(f"torch: reading the GPUs failed ({type(exc).__name__}: {exc})")
    return found, gpus


def _nvidia_smi(notes: list[str]) -> tuple[str | None, list[dict[str, Any]]]:
    """The driver version and the GPUs as nvidia-smi lists them."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        notes.append("nvidia-smi: not on PATH (no NVIDIA driver, or not in this container)")
        return None, []
    # Drivers before 510 have no compute_cap field: then only the driver version and the names.
    for fields in (NVIDIA_SMI_FIELDS, "index,name,driver_version"):
        cmd = [smi, f"--query-gpu={fields}", "--format=csv,noheader"]
        print("$ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            notes.append(f"nvidia-smi: failed to run ({type(exc).__name__}: {exc})")
            return None, []
        if done.returncode == 0:
            break
    else:
        notes.append(f"nvidia-smi: exit status {done.returncode}: {(done.stdout + done.stderr).strip()[:300]}")
        return None, []
    names = fields.split(",")
    driver = None
    gpus: list[dict[str, Any]] = []
    for line in done.stdout.splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(names):
            continue
        row = {name: values[i] for i, name in enumerate(names)}
        driver = driver or row.get("driver_version")
        cap = row.get("compute_cap")
        gpus.append({"index": int(row["index"]) if row["index"].isdigit() else len(gpus), "name": row["name"],
                     "capability": cap if cap and cap[0].isdigit() else None})
    return driver, gpus


def _driver_cuda(notes: list[str]) -> str | None:
    """The newest CUDA the installed driver runs (cuDriverGetVersion: 13000 is 13.0); no CUDA context is made."""
    name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
        value = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(value)) != 0 or value.value <= 0:
            notes.append(f"driver: cuDriverGetVersion in {name} failed")
            return None
    except (OSError, AttributeError):
        notes.append(f"driver: {name} could not be loaded (no NVIDIA driver)")
        return None
    return f"{value.value // 1000}.{value.value % 1000 // 10}"


def _guard(read: Callable[[list[str]], T], default: T, notes: list[str], what: str) -> T:
    """``read(notes)``, or ``default`` with a note: one field that cannot be read must not cost the others."""
    try:
        return read(notes)
    except Exception as exc:
        notes.append(f"{what}: the probe failed ({type(exc).__name__}: {exc})")
        return default


def probe() -> dict[str, Any]:
    notes: list[str] = []
    python = _guard(_python, {"executable": sys.executable, "version": platform.python_version(),
                              "implementation": sys.implementation.name, "abi": None}, notes, "python")
    tags = _guard(_tags, None, notes, "tags")
    where = _guard(_platform, {"os": sys.platform, "machine": None, "libc": None, "glibc": None}, notes, "platform")
    no_torch: tuple[dict[str, Any] | None, list[dict[str, Any]]] = (None, [])
    no_smi: tuple[str | None, list[dict[str, Any]]] = (None, [])
    torch, torch_gpus = _guard(_torch, no_torch, notes, "torch")
    driver, smi_gpus = _guard(_nvidia_smi, no_smi, notes, "nvidia-smi")
    wanted = driver or smi_gpus or torch_gpus or sys.platform == "win32"
    driver_cuda = _guard(_driver_cuda, None, notes, "driver") if wanted else None
    gpus, source = (torch_gpus, "torch") if torch_gpus else (smi_gpus, "nvidia-smi" if smi_gpus else None)
    return {"format": FORMAT, "python": python, "platform": where, "tags": tags, "torch": torch,
            "driver": {"version": driver, "cuda": driver_cuda}, "gpus": gpus, "gpus_from": source, "notes": notes}


def main() -> int:
    # torch and CUDA libraries may write to file descriptor 1 while they load; stdout must hold only the JSON.
    sys.stdout.flush()
    saved = None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        saved = os.dup(1)
        os.dup2(2, 1)
    try:
        found = probe()
    finally:
        sys.stdout.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)
    sys.stdout.write(json.dumps(found, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
