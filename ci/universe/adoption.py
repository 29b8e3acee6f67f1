"""A new torch release adopted from PyPI (``cuda-ext-farm adopt-torch``): its ``TORCH_RELEASES`` entry read from
PyPI's metadata, written into ``ci/universe/matrix.py`` exactly as the table writes entries, then the locks and
workflows made again. Each field comes from PyPI as ``ci/universe/pypi_torch.py`` describes.

A release whose CUDA version no cell of ``CELLS`` has gets a new PyPI toolkit cell (the newest NVIDIA wheels of that
CUDA version, laid out as the newest PyPI cell of its major), or one line saying what PyPI lacks.

The replay test (tests/unit/universe/test_adoption.py) runs all of it against ``pypi_torch.Recorded``, a trimmed
snapshot of PyPI under tests/fixtures/pypi_torch/ (``pypi_torch.record`` writes it).
"""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ci.errors import CommandFailed
from ci.universe import matrix, shapes
from ci.universe.pypi_torch import (
    Live,
    Source,
    UploadIncomplete,
    newest_patches,
    observe,
    torch_versions,
    upload_incomplete,
    wheel_tags,
)

MATRIX_FILE = Path(matrix.__file__).resolve()
ROOT = MATRIX_FILE.parents[2]
#: The NVIDIA wheels of a PyPI toolkit cell (``matrix._pypi_cuda13``'s arguments, by package).
_TOOLKIT_WHEELS = {"nvcc": "nvidia-cuda-nvcc", "runtime": "nvidia-cuda-runtime", "cccl": "nvidia-cuda-cccl"}


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
    if release.free_threaded:
        args.append(f"free_threaded={_tuple(release.free_threaded, names)}")
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
    # An entry ends where the next begins (or the table does): a line of it may end in a tuple's "),".
    entry = r'^    TorchRelease\("([^"]+)".*?\),\n(?=    TorchRelease\(|\Z)'
    for m in re.finditer(entry, text[start:end], re.M | re.S):
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
        parsed = wheel_tags(f.filename)
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
    """Every release where PyPI and ``table`` differ, oldest first; ``UploadIncomplete`` when one of them is still
    being uploaded (``pypi_torch.upload_incomplete``: then nothing is compared)."""
    by_minor = {r.minor: r for r in table}
    floor = min((r.minor for r in table), key=shapes.version_key)
    versions = newest_patches(torch_versions(source), floor)
    for previous, version in zip([None, *versions], versions, strict=False):
        incomplete = upload_incomplete(source, version, previous)
        if incomplete is not None:
            raise incomplete
    found = []
    for version in versions:
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
    version) into ``matrix_file``, then make the locks and workflows again. A release still being uploaded is one
    line ("upload incomplete, try later"), nothing written, and 0: no change yet, with or without ``check``."""
    if say is None:
        from ci.log import log  # rich: imported by the command only (this package is standard library + packaging)

        say = log.result
    source = source or Live()
    table = matrix.TORCH_RELEASES if table is None else table
    known_cuda = {c.cuda for c in (matrix.CELLS if cells is None else cells)}
    try:
        found = findings(source, table)
    except UploadIncomplete as incomplete:  # no change yet: exit 0 (the scheduled check reads it as nothing new)
        say(incomplete.line().removeprefix("error: "))
        return 0
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


if __name__ == "__main__":  # development: python3 -m ci.universe.adoption [--check]
    sys.exit(adopt("--check" in sys.argv[1:]))
