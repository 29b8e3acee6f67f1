"""A new torch release adopted from PyPI (``cuda-ext-farm adopt-torch``): its ``TORCH_RELEASES`` entry read from
PyPI's metadata, written into ``ci/universe/matrix.py`` exactly as the table writes entries, then the locks and
workflows made again.

What each field comes from (no wheel is downloaded; the index page, one small ``.metadata`` file per wheel, and
about 10 MB of one wheel per CPU architecture read in place by range requests, as ``torch_archs`` does):

* ``version``: the newest patch of each minor on the index pip uses (``lockcheck.Index``: pip's index-url and CA
  bundle, retries); minors older than the table's oldest are not the farm's;
* ``cuda``: the CUDA requirement of its manylinux x86_64 wheel's ``Requires-Dist`` (PEP 658 ``.metadata``, else the
  wheel's ``METADATA`` read in place): ``cuda-toolkit[...]==13.0.2`` (2.11 onwards), ``nvidia-cuda-runtime==13.0.x``
  or ``nvidia-cuda-runtime-cu12==12.8.90`` (2.8-2.10) give 13.0, 12.8;
* ``pythons``: the CPythons (GIL builds) with both a manylinux_2_28 x86_64 and a win_amd64 wheel;
* ``aarch64``: whether the manylinux_2_28_aarch64 wheel's requirements pull a CUDA runtime on Linux aarch64 (2.8-2.10's
  aarch64 wheels are CPU builds: their CUDA requirements are marked ``platform_machine == "x86_64"``);
* ``sass``, ``sass_aarch64``: ``CUDA_ARCH_FLAGS`` compiled into ``libtorch_python.so`` (``torch_archs.arch_flags``);
* ``cxx``: the ``-std=c++NN`` torch's own ``torch/utils/cpp_extension.py`` passes (the value it uses most: the
  module's docstrings also show flags), read from the same wheel. torch's headers carry no ``__cplusplus`` check
  from 2.12 on (2.11's ``c10/util/C++17.h`` required C++17), so the flag torch builds extensions with is the one
  source that says which standard the headers are written for: 17 up to 2.11, 20 from 2.12.

A release whose CUDA version no cell of ``CELLS`` has gets a new PyPI toolkit cell (the newest NVIDIA wheels of that
CUDA version, laid out as the newest PyPI cell of its major), or one line saying what PyPI lacks.

The replay test (tests/unit/universe/test_adoption.py) runs all of it against ``Recorded``, a trimmed snapshot of
PyPI under tests/fixtures/pypi_torch/ (``record`` writes it).
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import io
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Mapping, Sequence
from email.parser import HeaderParser
from pathlib import Path
from typing import Protocol

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ci.errors import CommandFailed
from ci.universe import lockcheck, matrix, shapes, torch_archs

MATRIX_FILE = Path(matrix.__file__).resolve()
ROOT = MATRIX_FILE.parents[2]
#: The platform tag of each kind of wheel read.
PLATFORM_TAGS = {"x86_64": "manylinux_2_28_x86_64", "aarch64": "manylinux_2_28_aarch64", "win_amd64": "win_amd64"}
#: The CPython whose wheel is read first (any other CPython's when it has none).
READ_PYTHON = "3.12"
#: The marker environment of a Linux machine of each architecture (CPython READ_PYTHON).
_LINUX = {"os_name": "posix", "sys_platform": "linux", "platform_system": "Linux", "python_version": READ_PYTHON,
          "python_full_version": f"{READ_PYTHON}.0", "implementation_name": "cpython",
          "platform_python_implementation": "CPython", "extra": ""}
_CUDA_PIN = re.compile(r"^(?:cuda-toolkit|nvidia-cuda-runtime(?:-cu\d+)?)$")
_STD_FLAG = re.compile(r"""['"][-/]std[=:]c\+\+(\d+)['"]""")
#: The NVIDIA wheels of a PyPI toolkit cell (``matrix._pypi_cuda13``'s arguments, by package).
_TOOLKIT_WHEELS = {"nvcc": "nvidia-cuda-nvcc", "runtime": "nvidia-cuda-runtime", "cccl": "nvidia-cuda-cccl"}


class Source(Protocol):
    """What the adoption reads from PyPI (``Live``) or a recorded snapshot of it (``Recorded``)."""

    def files(self, project: str) -> list[lockcheck.IndexFile]: ...

    def metadata(self, wheel: lockcheck.IndexFile) -> str: ...

    def wheel_facts(self, wheel: lockcheck.IndexFile) -> WheelFacts: ...


@dataclasses.dataclass(frozen=True)
class WheelFacts:
    """What one torch wheel's bytes say: ``CUDA_ARCH_FLAGS`` and the C++ standard cpp_extension passes."""

    flags: tuple[str, ...]
    cxx: int

    def as_dict(self) -> dict[str, object]:
        return {"flags": " ".join(self.flags), "cxx": self.cxx}


def cxx_of(cpp_extension: str) -> int:
    """The C++ standard ``torch/utils/cpp_extension.py`` passes: its most frequent ``'-std=c++NN'`` literal."""
    counts = collections.Counter(int(m) for m in _STD_FLAG.findall(cpp_extension))
    if not counts:
        raise CommandFailed("torch's cpp_extension.py names no -std=c++ flag", "torch/utils/cpp_extension.py",
                            "PyTorch changed how it builds extensions: record cxx in TORCH_RELEASES by hand")
    return max(counts, key=lambda std: (counts[std], std))


def _get(url: str, index: lockcheck.Index) -> bytes | None:
    """A URL's body (None on 404), three attempts, with pip's CA bundle."""
    request = urllib.request.Request(url, headers={"User-Agent": "cuda-ext-farm adopt-torch"})
    for attempt in range(3):
        try:
            with urllib.request.urlopen(request, timeout=60, context=index.ssl_context) as response:
                body: bytes = response.read()
                return body
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            error: Exception = exc
        except (urllib.error.URLError, OSError) as exc:
            error = exc
        if attempt == 2:
            raise CommandFailed(f"could not read {url.rsplit('/', 1)[-1]} ({error})", url,
                                "check the network, or PIP_INDEX_URL / pip's index-url and cert") from None
    return None


class Live:
    """PyPI (the index pip uses) and torch's wheels read in place."""

    def __init__(self, index: lockcheck.Index | None = None) -> None:
        self.index = index or lockcheck.Index()

    def files(self, project: str) -> list[lockcheck.IndexFile]:
        return self.index.files(project)

    def _zip(self, wheel: lockcheck.IndexFile) -> zipfile.ZipFile:
        remote = torch_archs.RangeFile(wheel.url, self.index.ssl_context)
        return zipfile.ZipFile(io.BufferedReader(remote, buffer_size=1 << 16))

    def metadata(self, wheel: lockcheck.IndexFile) -> str:
        body = _get(wheel.url + ".metadata", self.index)  # PEP 658; PyPI's file host has it for most wheels
        if body is not None:
            return body.decode()
        with self._zip(wheel) as zf:
            member = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            return zf.read(member).decode()

    def wheel_facts(self, wheel: lockcheck.IndexFile) -> WheelFacts:
        with self._zip(wheel) as zf:
            library = next((n for n in zf.namelist() if n.endswith("/lib/libtorch_python.so")), None)
            if library is None:
                raise CommandFailed("no libtorch_python.so in the torch wheel", wheel.filename,
                                    "PyTorch changed its layout")
            flags = tuple(torch_archs.arch_flags(zf.read(library)))
            cxx = cxx_of(zf.read("torch/utils/cpp_extension.py").decode())
        return WheelFacts(flags, cxx)


class Recorded:
    """A snapshot of PyPI (``record`` writes it): ``simple/<project>.json`` (PEP 691 pages, trimmed),
    ``metadata/<wheel>.metadata`` (its requirements), ``wheels.json`` (each read wheel's ``WheelFacts``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.facts = json.loads((folder / "wheels.json").read_text())

    def files(self, project: str) -> list[lockcheck.IndexFile]:
        page = self.folder / "simple" / f"{project}.json"
        if not page.is_file():
            return []
        return lockcheck.parse_page(page.read_bytes(), "application/vnd.pypi.simple.v1+json",
                                    f"https://files.example/{project}/")

    def metadata(self, wheel: lockcheck.IndexFile) -> str:
        return (self.folder / "metadata" / f"{wheel.filename}.metadata").read_text()

    def wheel_facts(self, wheel: lockcheck.IndexFile) -> WheelFacts:
        found = self.facts[wheel.filename]
        return WheelFacts(tuple(found["flags"].split()), int(found["cxx"]))


# --- reading a release -------------------------------------------------------------------------------------------


def _wheel_tags(filename: str) -> tuple[Version, int, set[tuple[str, str, str]]] | None:
    try:
        _, version, build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    return version, build[0] if build else 0, {(t.interpreter, t.abi, t.platform) for t in tags}


def torch_versions(source: Source) -> list[str]:
    """Every final torch release with wheels on the index, oldest first."""
    found = set()
    for f in source.files("torch"):
        parsed = _wheel_tags(f.filename)
        if parsed and not parsed[0].is_prerelease and not parsed[0].local:
            found.add(parsed[0])
    return [str(v) for v in sorted(found)]


def newest_patches(versions: Sequence[str], floor: str) -> list[str]:
    """The newest patch of each minor from ``floor`` (``2.8``) on."""
    newest: dict[str, str] = {}
    for version in sorted(versions, key=Version):
        if shapes.version_key(version) >= shapes.version_key(floor):
            newest[shapes.minor_of(version)] = version
    return list(newest.values())


def cpythons(files: Sequence[lockcheck.IndexFile], version: str, platform: str) -> set[str]:
    """The CPythons (``3.12``; GIL builds) with a torch ``version`` wheel for ``platform``."""
    found = set()
    for f in files:
        parsed = _wheel_tags(f.filename)
        if parsed is None or str(parsed[0]) != version:
            continue
        for interpreter, abi, tag in parsed[2]:
            if tag == platform and abi == interpreter and interpreter.startswith("cp"):
                found.add(f"{interpreter[2]}.{interpreter[3:]}")
    return found


def wheel_for(files: Sequence[lockcheck.IndexFile], version: str, arch: str) -> lockcheck.IndexFile | None:
    """The wheel read for ``arch``: CPython READ_PYTHON's (else the newest CPython's), the highest build number (the
    one pip installs)."""
    platform = PLATFORM_TAGS[arch]
    best: tuple[tuple[int, ...], int, lockcheck.IndexFile] | None = None
    for f in files:
        parsed = _wheel_tags(f.filename)
        if parsed is None or str(parsed[0]) != version:
            continue
        for interpreter, abi, tag in parsed[2]:
            if tag != platform or abi != interpreter or not interpreter.startswith("cp"):
                continue
            python = f"{interpreter[2]}.{interpreter[3:]}"
            rank = (python == READ_PYTHON, *shapes.version_key(python))
            if best is None or (rank, parsed[1]) > (best[0], best[1]):
                best = (rank, parsed[1], f)
    return best[2] if best else None


def cuda_of(metadata: str, machine: str) -> str | None:
    """The CUDA version (``13.0``) of the runtime a wheel's requirements pull on Linux ``machine``; None for none."""
    environment = {**_LINUX, "platform_machine": machine}
    for line in HeaderParser().parsestr(metadata).get_all("Requires-Dist") or ():
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if not _CUDA_PIN.match(requirement.name.lower()):
            continue
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        pinned = [s.version for s in requirement.specifier if s.operator == "=="]
        if pinned:
            return ".".join(pinned[0].split(".")[:2])
    return None


def observe(version: str, source: Source) -> shapes.TorchRelease:
    """torch ``version`` as PyPI has it, as a ``TorchRelease``."""
    files = [f for f in source.files("torch") if f.filename.startswith(f"torch-{version}-")]
    x86 = wheel_for(files, version, "x86_64")
    if x86 is None:
        raise CommandFailed("PyPI has no manylinux_2_28 x86_64 wheel of this torch", version,
                            "wait for PyTorch's upload to finish, then run `cuda-ext-farm adopt-torch` again")
    cuda = cuda_of(source.metadata(x86), "x86_64")
    if cuda is None:
        raise CommandFailed("torch's x86_64 wheel requires no CUDA runtime", x86.filename,
                            "PyTorch changed how its wheels pull CUDA: record the release by hand")
    pythons = cpythons(files, version, PLATFORM_TAGS["x86_64"]) & cpythons(files, version, "win_amd64")
    facts = source.wheel_facts(x86)
    arm = wheel_for(files, version, "aarch64")
    aarch64 = arm is not None and cuda_of(source.metadata(arm), "aarch64") is not None
    sass_aarch64 = _sass(source.wheel_facts(arm).flags) if aarch64 and arm is not None else ()
    return shapes.TorchRelease(version, cuda, tuple(sorted(pythons, key=shapes.version_key)), aarch64=aarch64,
                               sass=_sass(facts.flags), sass_aarch64=sass_aarch64, cxx=facts.cxx)


def _sass(flags: Sequence[str]) -> tuple[str, ...]:
    return tuple(torch_archs.sm_to_arch(f) for f in flags if f.startswith("sm_"))


# --- the table's text --------------------------------------------------------------------------------------------


def vocabulary(text: str) -> dict[tuple[str, ...], str]:
    """The named tuples of strings matrix.py defines before ``TORCH_RELEASES`` (``_PY_3_10_14``, ``_CU130_SASS``):
    an entry names them instead of spelling them out."""
    names: dict[tuple[str, ...], str] = {}
    head = text.split("\nTORCH_RELEASES", 1)[0]
    for m in re.finditer(r"^(_[A-Z0-9_]+) = (\(.*\))$", head, re.M):
        value = ast.literal_eval(m.group(2))
        if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
            names.setdefault(value, m.group(1))
    return names


def _tuple(values: tuple[str, ...], names: Mapping[tuple[str, ...], str]) -> str:
    if values in names:
        return names[values]
    inner = ", ".join(f'"{v}"' for v in values)
    return f"({inner},)" if len(values) == 1 else f"({inner})"


def render(release: shapes.TorchRelease, names: Mapping[tuple[str, ...], str], width: int = 120) -> str:
    """``release`` as a line (or lines) of ``TORCH_RELEASES``: four spaces, ``TorchRelease(`` and its arguments
    filled to ``width`` columns, continuation lines under the first argument."""
    args = [f'"{release.version}"', f'"{release.cuda}"', _tuple(release.pythons, names)]
    if release.aarch64:
        args.append("aarch64=True")
    if release.sass:
        args.append(f"sass={_tuple(release.sass, names)}")
    if release.sass_aarch64:
        args.append(f"sass_aarch64={_tuple(release.sass_aarch64, names)}")
    if release.cxx != shapes.TorchRelease.__dataclass_fields__["cxx"].default:
        args.append(f"cxx={release.cxx}")
    lines: list[str] = []
    line = "    TorchRelease("
    indent = " " * len(line)
    for i, arg in enumerate(args):
        piece = arg + (")," if i == len(args) - 1 else ",")
        separator = "" if line.endswith("(") else " "
        if len(line + separator + piece) > width and not line.endswith("("):
            lines.append(line)
            line = indent + piece
        else:
            line += separator + piece
    lines.append(line)
    return "\n".join(lines) + "\n"


def table_span(text: str) -> tuple[int, int]:
    """Offsets of the entries of ``TORCH_RELEASES`` in matrix.py's text (from the first entry to the closing
    parenthesis)."""
    start = text.index("\nTORCH_RELEASES")
    start = text.index("\n", start + 1) + 1
    end = text.index("\n)\n", start) + 1
    return start, end


def entries(text: str) -> dict[str, str]:
    """Each entry's text by torch version, in the table's order."""
    start, end = table_span(text)
    found: dict[str, str] = {}
    for m in re.finditer(r'^    TorchRelease\("([^"]+)".*?\),\n', text[start:end], re.M | re.S):
        found[m.group(1)] = m.group(0)
    return found


def with_entry(text: str, release: shapes.TorchRelease, names: Mapping[tuple[str, ...], str]) -> str:
    """matrix.py's text with ``release``'s entry: in place of its minor's entry, else after the last one."""
    rendered = render(release, names)
    for version, entry in entries(text).items():
        if shapes.minor_of(version) == release.minor:
            return text.replace(entry, rendered, 1)
    _, end = table_span(text)
    return text[:end] + rendered + text[end:]


# --- a toolkit cell for a new CUDA version -----------------------------------------------------------------------


def newest_of(source: Source, project: str, series: str) -> str | None:
    """The newest final release of ``project`` in ``series`` (``13.3``) with a manylinux x86_64 wheel."""
    found = []
    for f in source.files(project):
        parsed = _wheel_tags(f.filename)
        if parsed is None or parsed[0].is_prerelease or not str(parsed[0]).startswith(series + "."):
            continue
        if any("x86_64" in tag for _, _, tag in parsed[2]):
            found.append(parsed[0])
    return str(max(found)) if found else None


def cell_for(cuda: str, source: Source, text: str) -> tuple[str | None, str]:
    """(the ``CELLS`` entry to add for CUDA ``cuda``, or None; one line saying what was done or what is missing)."""
    major = cuda.split(".")[0]
    template = next((c for c in reversed(matrix.CELLS) if c.toolkit.kind == "pypi" and str(c.cuda_major) == major),
                    None)
    if template is None or int(major) < 13:
        return None, (f"CUDA {cuda} has no toolkit cell and no PyPI cell of CUDA {major} to copy: add a cell to CELLS "
                      "in ci/universe/matrix.py by hand")
    pins = {key: newest_of(source, project, cuda) for key, project in _TOOLKIT_WHEELS.items()}
    missing = [_TOOLKIT_WHEELS[key] for key, version in pins.items() if version is None]
    if missing:
        return None, (f"CUDA {cuda} has no toolkit cell, and PyPI has no {', '.join(missing)} {cuda}.*: "
                      "the toolkit is not on PyPI yet; run `cuda-ext-farm adopt-torch` again when it is")
    block = _cell_block(text, template.cuda)
    if block is None:
        return None, f"the cell of CUDA {template.cuda} is not written as expected in ci/universe/matrix.py"
    cell = block.group(0).replace(f'cuda="{template.cuda}"', f'cuda="{cuda}"', 1)
    cell = re.sub(r"_pypi_cuda13\(nvcc=\"[^\"]+\", runtime=\"[^\"]+\", cccl=\"[^\"]+\"",
                  f'_pypi_cuda13(nvcc="{pins["nvcc"]}", runtime="{pins["runtime"]}", cccl="{pins["cccl"]}"', cell)
    cell = cell.replace("        release=True,\n", "")
    return cell, (f"new toolkit cell cu{cuda.replace('.', '')}: nvcc {pins['nvcc']}, runtime {pins['runtime']}, "
                  f"cccl {pins['cccl']} (laid out as cu{template.cuda.replace('.', '')})")


def _cell_block(text: str, cuda: str) -> re.Match[str] | None:
    return re.search(r"^    Cell\(\n        cuda=\"" + re.escape(cuda) + r"\",\n.*?^    \),\n", text, re.M | re.S)


def with_cell(text: str, cell: str, cuda: str, like: str) -> str:
    """matrix.py's text with ``cell`` after the cell of CUDA ``like``, and ``cuda``'s ``MAX_GCC`` that of ``like``."""
    block = _cell_block(text, like)
    if block is None:
        raise CommandFailed(f"the cell of CUDA {like} is not written as expected", MATRIX_FILE.name,
                            "add the new cell by hand")
    text = text[:block.end()] + cell + text[block.end():]
    return re.sub(r'(MAX_GCC: Mapping\[str, int\] = \{[^}]*)"' + re.escape(like) + r'": (\d+)',
                  lambda m: f'{m.group(0)}, "{cuda}": {m.group(2)}', text, count=1)


# --- the command -------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Finding:
    """One release where PyPI and the table differ: new, a newer patch, or fields that differ."""

    observed: shapes.TorchRelease
    recorded: shapes.TorchRelease | None
    differences: tuple[str, ...]

    def line(self) -> str:
        if self.recorded is None:
            return f"torch {self.observed.version} is on PyPI, not in TORCH_RELEASES"
        if self.recorded.version != self.observed.version:
            return f"torch {self.observed.version} replaces {self.recorded.version} (a newer patch on PyPI)"
        return f"torch {self.observed.version}: " + "; ".join(self.differences)


def compare(recorded: shapes.TorchRelease | None, observed: shapes.TorchRelease) -> Finding | None:
    if recorded is None or recorded.version != observed.version:
        return Finding(observed, recorded, ())
    differences = tuple(
        f"{field.name} {getattr(recorded, field.name)!r} in the table, {getattr(observed, field.name)!r} on PyPI"
        for field in dataclasses.fields(shapes.TorchRelease)
        if getattr(recorded, field.name) != getattr(observed, field.name))
    return Finding(observed, recorded, differences) if differences else None


def findings(source: Source, table: Sequence[shapes.TorchRelease]) -> list[Finding]:
    """Every release where PyPI and ``table`` differ, oldest first."""
    by_minor = {r.minor: r for r in table}
    floor = min((r.minor for r in table), key=shapes.version_key)
    found = []
    for version in newest_patches(torch_versions(source), floor):
        finding = compare(by_minor.get(shapes.minor_of(version)), observe(version, source))
        if finding is not None:
            found.append(finding)
    return found


def regenerate(root: Path = ROOT) -> None:
    """The locks and workflows made again from the new table, in a fresh interpreter (this one imported the old)."""
    for command in (["lock"], ["workflows", "--project", str(root)]):
        done = subprocess.run([sys.executable, "-m", "ci", *command], cwd=root, check=False)
        if done.returncode:
            raise CommandFailed("the table was written, but making the locks and workflows again failed",
                                f"python -m ci {' '.join(command)} (exit {done.returncode})",
                                "run it again and commit ci/universe/matrix.py, ci/requirements/ and "
                                ".github/workflows/ together")


def adopt(check: bool, *, source: Source | None = None, matrix_file: Path = MATRIX_FILE,
          table: Sequence[shapes.TorchRelease] | None = None, cells: Sequence[shapes.Cell] | None = None,
          regenerate_after: bool = True, say: Callable[[str], None] | None = None) -> int:
    """``cuda-ext-farm adopt-torch [--check]``: compare the table with PyPI; with ``check``, list what differs and
    return 1 when anything does; without, write each new or changed entry (and a toolkit cell for a new CUDA
    version) into ``matrix_file``, then make the locks and workflows again."""
    if say is None:
        from ci.log import log  # rich: imported by the command only (this package is standard library + packaging)

        say = log.result
    source = source or Live()
    table = matrix.TORCH_RELEASES if table is None else table
    known_cuda = {c.cuda for c in (matrix.CELLS if cells is None else cells)}
    found = findings(source, table)
    text = matrix_file.read_text()
    names = vocabulary(text)
    new_cells = []
    for finding in found:
        say(finding.line())
        if finding.recorded is None or finding.recorded.version != finding.observed.version:
            say(render(finding.observed, names).rstrip("\n"))
        if finding.observed.cuda not in known_cuda:
            cell, line = cell_for(finding.observed.cuda, source, text)
            say(line)
            if cell is not None:
                new_cells.append((finding.observed.cuda, cell))
                known_cuda.add(finding.observed.cuda)
    if not found:
        say(f"TORCH_RELEASES is current: {len(table)} releases match PyPI")
        return 0
    if check:
        return 1
    for finding in found:
        text = with_entry(text, finding.observed, names)
    for cuda, cell in new_cells:
        like = next(c.cuda for c in reversed(matrix.CELLS) if c.toolkit.kind == "pypi"
                    and c.cuda_major == int(cuda.split(".")[0]))
        text = with_cell(text, cell, cuda, like)
    matrix_file.write_text(text)
    say(f"wrote {len(found)} entries into {matrix_file.name}")
    if regenerate_after:
        regenerate()
    return 0


def record(folder: Path, versions: Sequence[str], source: Live | None = None) -> None:
    """Write a snapshot ``Recorded`` reads: torch's index page trimmed to ``versions``' Linux and Windows wheels, the
    read wheels' requirements (``Requires-Dist`` only) and facts."""
    source = source or Live()
    keep = [f for f in source.files("torch") if any(f.filename.startswith(f"torch-{v}-") for v in versions)
            and f.filename.endswith(tuple(f"{tag}.whl" for tag in PLATFORM_TAGS.values()))]
    (folder / "simple").mkdir(parents=True, exist_ok=True)
    (folder / "metadata").mkdir(exist_ok=True)
    page = {"meta": {"api-version": "1.1"}, "name": "torch",
            "files": [{"filename": f.filename, "url": f.filename, "hashes": {"sha256": f.sha256},
                       "requires-python": f.requires_python} for f in keep]}
    (folder / "simple" / "torch.json").write_text(json.dumps(page, indent=1) + "\n")
    facts = {}
    for version in versions:
        for arch in ("x86_64", "aarch64"):
            wheel = wheel_for(keep, version, arch)
            if wheel is None:
                continue
            wheel = next(f for f in source.files("torch") if f.filename == wheel.filename)
            requirements = HeaderParser().parsestr(source.metadata(wheel)).get_all("Requires-Dist") or []
            (folder / "metadata" / f"{wheel.filename}.metadata").write_text(
                "Metadata-Version: 2.1\nName: torch\nVersion: " + version + "\n"
                + "".join(f"Requires-Dist: {r}\n" for r in requirements))
            if arch == "x86_64" or cuda_of(source.metadata(wheel), "aarch64"):
                facts[wheel.filename] = source.wheel_facts(wheel).as_dict()
    (folder / "wheels.json").write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":  # development: python3 -m ci.universe.adoption [--check]
    sys.exit(adopt("--check" in sys.argv[1:]))
