"""The rules of ``python -m ci doctor`` (listed in ci/doctor/diagnose.py's docstring): the machine as the probe
describes it,
one function per rule giving the reasons a wheel does not fit, and the order of the wheels that fit.

Standard library plus ``packaging``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from packaging.tags import Tag, compatible_tags, cpython_tags, parse_tag
from packaging.version import InvalidVersion, Version

from ci.doctor import wheels as doctor_wheels
from ci.doctor.wheels import UNKNOWN, WheelFacts

# Table 1 of https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html: the oldest
# driver branch that runs every minor release of a CUDA major. A wheel's CUDA minor can be above torch's (or the
# driver's) for SASS; PTX is JIT-compiled by the driver, which must know that minor's PTX.
MIN_DRIVER = {11: 450, 12: 525, 13: 580}
OS_NAMES = {"linux": "Linux", "win32": "Windows", "darwin": "macOS"}
ARCHES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}
#: What a fitting wheel's rank (Verdict.tier) means, best first.
TIERS = ("native code for every GPU, or a CPU build for a CPU-only machine", "PTX JIT",
         "GPU code unknown, or CUDA kernels that cannot run here", "a CPU build beside a GPU")


def _cc(pair: tuple[int, int]) -> str:
    return f"{pair[0]}.{pair[1]}"


def _version_tuple(text: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text or ""))


@dataclasses.dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    capability: tuple[int, int] | None

    def label(self) -> str:
        cap = "?" if self.capability is None else _cc(self.capability)
        return f"GPU {self.index} ({self.name}, compute capability {cap})"


@dataclasses.dataclass(frozen=True)
class Machine:
    source: str
    raw: dict[str, Any]
    python: tuple[int, int]
    python_text: str
    implementation: str
    abi: str
    os: str
    arch: str
    glibc: tuple[int, int] | None
    tags: tuple[Tag, ...]
    torch: str | None
    torch_cuda: str | None
    torch_hip: str | None
    driver: str | None
    driver_cuda: str | None
    gpus: tuple[Gpu, ...]
    notes: tuple[str, ...]

    @classmethod
    def from_json(cls, raw: Any, source: str) -> Machine:
        """The machine a probe (or a recorded environment) describes; ValueError names what is wrong."""
        if not isinstance(raw, dict) or not isinstance(raw.get("python"), dict):
            raise ValueError("no 'python' object")
        py, where = raw["python"], raw.get("platform") or {}
        version = _version_tuple(py.get("version"))
        if len(version) < 2:
            raise ValueError(f"python.version is {py.get('version')!r}")
        impl = str(py.get("implementation") or "cpython")
        os_name = str(where.get("os") or "linux")
        machine = str(where.get("machine") or "?").lower()
        glibc = _version_tuple(where.get("glibc"))[:2]
        torch = raw.get("torch") or None
        driver = raw.get("driver") or {}
        gpus = tuple(Gpu(int(g.get("index", i)), str(g.get("name") or "?"),
                         _cap(g.get("capability"))) for i, g in enumerate(raw.get("gpus") or []))
        abi = str(py.get("abi") or f"cp{version[0]}{version[1]}")
        m = cls(source, raw, (version[0], version[1]), str(py["version"]), impl, abi,
                "linux" if os_name.startswith("linux") else os_name,
                ARCHES.get(machine, machine), (glibc[0], glibc[1]) if len(glibc) == 2 else None, (),
                torch.get("version") if torch else None, torch.get("cuda") if torch else None,
                torch.get("hip") if torch else None, driver.get("version"), driver.get("cuda"), gpus,
                tuple(str(n) for n in raw.get("notes") or ()))
        recorded = raw.get("tags")
        tags = [t for text in recorded for t in parse_tag(text)] if isinstance(recorded, list) else None
        if tags is not None and not m.knows_threading(tags):
            # A packaging older than free-threaded CPython (before 24.0) gives a cp313t interpreter the GIL build's
            # cp313 and abi3 tags: the doctor would offer it wheels that do not load, and none that do.
            m = dataclasses.replace(m, notes=(*m.notes, f"tags: those recorded are not {m.abi}'s (the probe's "
                                                        "packaging predates free-threaded CPython): derived from the "
                                                        "Python, libc and machine fields"))
            tags = None
        return dataclasses.replace(m, tags=tuple(m.derived_tags() if tags is None else tags))

    @property
    def free_threaded(self) -> bool:
        """A free-threaded CPython (``cp313t``, PEP 703): it loads ``cp313-cp313t`` wheels, no GIL build's."""
        return self.implementation == "cpython" and self.abi.startswith("cp") and self.abi.endswith("t")

    def knows_threading(self, tags: list[Tag]) -> bool:
        """Whether recorded ``tags`` are this interpreter's build: a free-threaded one's name its ``cp313t`` ABI,
        a GIL build's never do."""
        if self.implementation != "cpython" or not self.abi.startswith("cp"):
            return True
        threaded = any(t.abi == (self.abi if self.free_threaded else f"{self.abi}t") for t in tags)
        return threaded == self.free_threaded

    def derived_tags(self) -> list[Tag]:
        """The tags pip would accept here, from the recorded fields (packaging.tags with this machine's values)."""
        plats = platforms(self.os, self.arch, self.glibc)
        if self.implementation == "cpython":
            tags = list(cpython_tags(self.python, [self.abi], plats))
        else:
            tags = []
        return tags + list(compatible_tags(self.python, f"cp{self.python[0]}{self.python[1]}", plats))

    def describe(self) -> list[str]:
        glibc = f", glibc {_cc(self.glibc)}" if self.glibc else ""
        impl = "CPython" if self.implementation == "cpython" else self.implementation
        threaded = " free-threaded" if self.free_threaded else ""
        lines = [f"machine: {OS_NAMES.get(self.os, self.os)} {self.arch}{glibc}, {impl} {self.python_text}{threaded} "
                 f"({self.abi}; {self.source})"]
        cuda = "CPU-only" if not self.torch_cuda else f"CUDA {self.torch_cuda}"
        lines.append(f"torch: {self.torch} ({cuda})" if self.torch else "torch: not installed")
        driver = f"{self.driver or 'version unknown'}" + (f" (runs CUDA <= {self.driver_cuda})" if self.driver_cuda
                                                          else "")
        lines.append(f"NVIDIA driver: {driver}" if self.driver or self.driver_cuda else "NVIDIA driver: none found")
        lines += [g.label() for g in self.gpus] or ["GPUs: none found"]
        need = MIN_DRIVER.get(_major(self.torch_cuda) or 0)
        if need and self.driver and _version_tuple(self.driver)[:1] < (need,):
            lines.append(f"note: torch's CUDA {self.torch_cuda} needs an NVIDIA driver >= {need}: torch.cuda cannot "
                         "use the GPU with this driver")
        return lines + [f"note: {n}" for n in self.notes]


def platforms(os_name: str, arch: str, glibc: tuple[int, int] | None) -> list[str]:
    """Platform tags of a machine, best first (what packaging.tags gives on it; manylinux down to its floor)."""
    if os_name == "win32":
        return {"x86_64": ["win_amd64"], "aarch64": ["win_arm64"], "x86": ["win32"]}.get(arch, [])
    if os_name != "linux":
        return []
    found = []
    if glibc and glibc[0] == 2:
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        for minor in range(glibc[1], 4 if arch in ("x86_64", "i686") else 16, -1):
            found.append(f"manylinux_2_{minor}_{arch}")
            if minor in legacy and (minor == 17 or arch in ("x86_64", "i686")):
                found.append(f"{legacy[minor]}_{arch}")
    return [*found, f"linux_{arch}"]


def _cap(value: object) -> tuple[int, int] | None:
    parts = _version_tuple(str(value)) if value is not None else ()
    return (parts[0], parts[1]) if len(parts) >= 2 else None


def _major(cuda: str | None) -> int | None:
    parts = _version_tuple(cuda)
    return parts[0] if parts else None


# --- the rules -------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Verdict:
    wheel: WheelFacts
    reasons: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    tier: int = 0
    how: str = ""
    #: Whether a reason is the interpreter's (its Python, its torch): another interpreter of the machine may fit.
    by_interpreter: bool = False
    #: Whether the wheel's CUDA kernels run here (False: it loads, but there is no GPU, or torch is CPU-only).
    kernels_run: bool = True

    @property
    def fits(self) -> bool:
        return not self.reasons

    def as_dict(self) -> dict[str, Any]:
        return {**self.wheel.as_dict(), "fits": self.fits, "how": self.how, "tier": TIERS[self.tier],
                "reasons": self.reasons, "notes": self.notes}


def _platform_part(tag: str) -> tuple[str, str, tuple[int, int] | None, str]:
    """OS, CPU, the glibc a platform tag needs and its libc kind: ``manylinux_2_31_x86_64`` -> Linux x86_64 2.31."""
    legacy = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}
    if m := re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", tag):
        return "Linux", m.group(3), (int(m.group(1)), int(m.group(2))), "glibc"
    if m := re.fullmatch(r"(manylinux\d+)_(\w+)", tag):
        return "Linux", m.group(2), legacy.get(m.group(1)), "glibc"
    if m := re.fullmatch(r"(musllinux|linux)_(?:\d+_\d+_)?(\w+)", tag):
        return "Linux", m.group(2), None, "musl" if m.group(1) == "musllinux" else ""
    win = {"win_amd64": "x86_64", "win_arm64": "aarch64", "win32": "x86"}
    if tag in win:
        return "Windows", win[tag], None, ""
    if tag.startswith("macosx_"):
        arch = tag.rsplit("_", 1)[-1]
        return "macOS", ARCHES.get(arch, arch), None, ""
    return tag, "", None, ""


def platform_reason(w: WheelFacts, m: Machine) -> str | None:
    mine = {t.platform for t in m.tags}
    plats = sorted({t.platform for t in w.tags})
    if mine & set(plats):
        return None
    here_os = OS_NAMES.get(m.os, m.os)
    parts = [(p, *_platform_part(p)) for p in plats]
    same = [x for x in parts if x[1] == here_os and x[2] == m.arch]
    if same:
        glibc = sorted((x for x in same if x[3]), key=lambda x: x[3] or (0, 0))
        if glibc:
            tag, need = glibc[0][0], _cc(glibc[0][3] or (0, 0))
            have = f"this machine has {_cc(m.glibc)}" if m.glibc else "this machine has no glibc (or it is unknown)"
            return f"needs glibc {need} ({tag}), {have}"
        if any(x[4] == "musl" for x in same):
            return f"built for musl libc ({same[0][0]}), this machine uses glibc"
    arch = [x for x in parts if x[1] == here_os]
    if arch:
        return f"built for {arch[0][2]} ({arch[0][0]}), this machine is {m.arch}"
    return f"built for {parts[0][1]} {parts[0][2]} ({parts[0][0]}), this machine is {here_os} {m.arch}"


def python_reason(w: WheelFacts, m: Machine) -> str | None:
    mine = {(t.interpreter, t.abi) for t in m.tags}
    pairs = sorted({(t.interpreter, t.abi) for t in w.tags})
    if mine & set(pairs):
        return None
    this = f"{'CPython' if m.implementation == 'cpython' else m.implementation} {m.python[0]}.{m.python[1]}"
    found = []
    for interp, abi in pairs:
        cp = re.fullmatch(r"cp(\d)(\d+)", interp)
        floor = (int(cp.group(1)), int(cp.group(2))) if cp else None
        if abi == "abi3" and floor and m.free_threaded:
            found.append(f"abi3 wheels ({interp}-abi3) do not load in free-threaded {this} ({m.abi})")
        elif floor and abi == f"{interp}t" and not m.free_threaded:
            found.append(f"a free-threaded wheel ({interp}-{abi}): it loads only in free-threaded CPython "
                         f"{floor[0]}.{floor[1]} (python{floor[0]}.{floor[1]}t), this is {this} with the GIL ({m.abi})")
        elif floor and abi == interp and m.free_threaded:
            found.append(f"built for CPython {floor[0]}.{floor[1]} with the GIL ({interp}-{abi}), this is "
                         f"free-threaded {this} ({m.abi})")
        elif abi == "abi3" and floor and m.python < floor:
            found.append(f"needs CPython >= {floor[0]}.{floor[1]} (abi3 floor {interp}), this is {this}")
        elif floor and abi != "abi3":
            found.append(f"built for CPython {floor[0]}.{floor[1]} ({interp}-{abi}), this is {this} ({m.abi})")
        else:
            found.append(f"built for {interp}-{abi}, this is {this} ({m.abi})")
    return " or ".join(dict.fromkeys(found))


def _arch(text: str) -> tuple[int, int, str] | None:
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+)\.(\d+)([af]?)", text) or re.fullmatch(
        r"(?:sm_|compute_)?(\d+)(\d)([af]?)", text)
    return (int(m.group(1)), int(m.group(2)), m.group(3)) if m else None


def _sass_runs(arch: tuple[int, int, str], cap: tuple[int, int]) -> bool:
    # SASS runs on its major's later minors; an arch-specific 9.0a cubin only on 9.0 itself ('f': its family).
    major, minor, suffix = arch
    return (major, minor) == cap if suffix == "a" else major == cap[0] and minor <= cap[1]


def _ptx_runs(arch: tuple[int, int, str], cap: tuple[int, int]) -> bool:
    major, minor, suffix = arch
    return _sass_runs(arch, cap) if suffix else (major, minor) <= cap


def judge(w: WheelFacts, m: Machine) -> Verdict:
    v = Verdict(w)
    if w.unreadable:
        v.reasons.append(f"cannot be read: {w.unreadable}")
        return v
    platform = platform_reason(w, m)
    if platform:
        v.reasons.append(platform)
    before = len(v.reasons)
    python = python_reason(w, m)
    if python:
        v.reasons.append(python)
    if not v.reasons and w.requires_python is not None and not w.requires_python.contains(
            m.python_text, prereleases=True):
        v.reasons.append(f"requires Python {w.requires_python}, this is {m.python_text}")
    _torch_rule(v, w, m)
    v.by_interpreter = len(v.reasons) > before
    if w.majors is not None and m.torch_cuda:  # a wheel across CUDA majors: its build for this torch's major
        major = _major(m.torch_cuda) or 0
        chosen = w.for_major(major)
        if chosen is None:
            v.reasons.append(f"built for CUDA {', '.join(str(k) for k in sorted(w.majors))}, this torch is built for "
                             f"CUDA {m.torch_cuda} (torch.version.cuda): no build of that major in the wheel")
            v.by_interpreter = True
            return v
        v.notes.append(f"carries builds for CUDA {', '.join(str(k) for k in sorted(w.majors))}: its CUDA {major} "
                       f"build ({chosen.cuda}) loads with this torch")
        w = chosen
    if w.cuda is None:
        gpu_torch = bool(m.torch_cuda) or (m.torch is None and bool(m.gpus))
        v.tier, v.how = (3, "CPU build: runs on the CPU, not on the GPU") if gpu_torch else (0, "CPU build")
    elif w.cuda == UNKNOWN:
        v.tier, v.how = 2, f"CUDA version unknown ({w.cuda_from})"
    else:
        _cuda_rules(v, w, m)
    return v


def _torch_rule(v: Verdict, w: WheelFacts, m: Machine) -> None:
    req = w.torch_requirement
    if req is None:
        v.notes.append("declares no torch requirement")
    elif m.torch is None:
        v.notes.append(f"torch is not installed: pip installs torch{req} with it")
    else:
        try:
            have = Version(Version(m.torch).public)
        except InvalidVersion:
            v.notes.append(f"torch's version {m.torch!r} is not a PEP 440 version: torch{req} not checked")
            return
        if not req.contains(have, prereleases=True):
            v.reasons.append(f"needs torch{req} ({w.torch_requirement_from}), this environment has torch {m.torch}")


def _cuda_rules(v: Verdict, w: WheelFacts, m: Machine) -> None:
    cuda = w.cuda or ""
    major = _major(cuda) or 0
    if m.torch is not None and not m.torch_cuda:
        kind = f"a ROCm build (HIP {m.torch_hip})" if m.torch_hip else f"CPU-only ({m.torch})"
        if m.torch_hip or w.abi == "classic":
            v.reasons.append(f"built for CUDA {cuda}, this torch is {kind}: a {w.abi} CUDA build needs torch's "
                             "CUDA libraries")
        v.tier, v.how, v.kernels_run = 2, "loads with a CPU-only torch, but its CUDA kernels won't run", False
        v.by_interpreter = v.by_interpreter or bool(m.torch_hip or w.abi == "classic")
        return
    if m.torch_cuda and _major(m.torch_cuda) != major:
        v.reasons.append(f"built for CUDA {cuda}, this torch is built for CUDA {m.torch_cuda} (torch.version.cuda): "
                         "the CUDA majors must match")
        v.by_interpreter = True
    need = MIN_DRIVER.get(major)
    if need and m.driver and _version_tuple(m.driver)[:1] < (need,):
        v.reasons.append(f"CUDA {major}.x needs an NVIDIA driver >= {need} (minor-version compatibility), this "
                         f"machine has {m.driver}")
    elif need and not m.driver and m.driver_cuda and (_major(m.driver_cuda) or 0) < major:
        v.reasons.append(f"CUDA {major}.x needs an NVIDIA driver >= {need}, this driver runs CUDA {m.driver_cuda} "
                         "at most")
    if not m.gpus:
        v.tier, v.how, v.kernels_run = (0 if m.torch_cuda else 2), "no NVIDIA GPU found: its CUDA kernels won't " \
            "run here", False
        return
    if w.sass is None and w.ptx is None:
        v.tier, v.how = 2, f"GPU code unknown (no {doctor_wheels.FARM_FILE} in the wheel): SASS and PTX not checked"
        return
    sass = [a for a in map(_arch, w.sass or ()) if a]
    ptx = [a for a in map(_arch, w.ptx or ()) if a]
    jit: list[str] = []
    for gpu in m.gpus:
        cap = gpu.capability
        if cap is None:
            v.notes.append(f"{gpu.label()}: its compute capability is unknown, not checked")
        elif any(_sass_runs(a, cap) for a in sass):
            continue
        elif any(_ptx_runs(a, cap) for a in ptx):
            jit.append(_cc(cap))
            if m.driver_cuda and _version_tuple(m.driver_cuda)[:2] < _version_tuple(cuda)[:2]:
                v.reasons.append(f"{gpu.label()} needs its PTX JIT-compiled, and PTX of CUDA {cuda} needs a driver "
                                 f"for CUDA {cuda} or newer; this driver runs CUDA {m.driver_cuda} at most")
            elif not m.driver_cuda:
                v.notes.append(f"PTX JIT needs a driver for CUDA {cuda} or newer (this driver's is unknown)")
        else:
            only = [a for a in w.sass or () if (_arch(a) or (0, 0, ""))[2] == "a"]
            hint = f" ({', '.join(only)}: arch-specific, only on that exact GPU)" if only else ""
            v.reasons.append(f"no code for {gpu.label()}: SASS {' '.join(w.sass or ()) or 'none'}{hint}, "
                             f"PTX {' '.join(w.ptx or ()) or 'none'}")
    caps = " ".join(sorted({_cc(g.capability) for g in m.gpus if g.capability}))
    if jit:
        v.tier, v.how = 1, f"runs via PTX JIT on compute capability {' '.join(jit)}: first call compiles, slower start"
    else:
        v.tier, v.how = 0, f"SASS for compute capability {caps}"


def rank_key(v: Verdict, m: Machine) -> tuple[Any, ...]:
    w = v.wheel
    priority = {t: i for i, t in enumerate(m.tags)}
    best_tag = min((priority.get(t, len(priority)) for t in w.tags), default=len(priority))
    cuda = _version_tuple(w.cuda) if w.cuda not in (None, UNKNOWN) else ()
    exact = bool(m.torch_cuda) and w.cuda == m.torch_cuda
    return (v.tier, _neg(Version(w.version.public)), not exact, tuple(-c for c in cuda), best_tag, _neg(w.version),
            w.file)


class _neg:
    """Sorts in reverse of the Version it holds (newest first inside an ascending key)."""

    def __init__(self, version: Version) -> None:
        self.version = version

    def __lt__(self, other: _neg) -> bool:
        return self.version > other.version

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _neg) and self.version == other.version

    __hash__ = None  # type: ignore[assignment]
