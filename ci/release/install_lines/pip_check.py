"""The install lines of a release run with real pip (``install --dry-run --report``) against the release folder's
indexes (file:// URLs for the site's) with PyPI the only other source (``ci/release/pypi_view.py``: PyPI without
downloads): fresh lines in a new venv with ``--ignore-installed`` and the wheel's own tags, keep-torch lines in a
venv that has a torch installed (one of the farm's environments, else a stand-in torch of metadata only)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ci.errors import CommandFailed
from ci.release.install_checks import pip_isolated_env
from ci.release.install_lines import FRESH, INSTALLED_TORCH, KEEP_TORCH, SITE, InstallLine, install_lines
from ci.release.manifest import Manifest, ReleaseFile
from ci.release.pypi_view import PYPI_SIMPLE, PyPIView
from ci.universe import shapes

if TYPE_CHECKING:
    from ci.toolchain import envs


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What pip picked for a line: the project's file and the torch it installs (None: torch stays)."""

    line: str
    wheel: str | None
    torch: str | None
    torch_before: str | None = None

    def text(self) -> str:
        torch = f"torch {self.torch}" if self.torch else f"keeps torch {self.torch_before}"
        return f"{self.wheel or 'no wheel of the project'}, {torch}"


def _report(report: Path, project: str) -> tuple[str | None, str | None]:
    from ci.release import index

    data = json.loads(report.read_text())
    wheel = torch = None
    for item in data.get("install", []):
        name = index.normalize(item["metadata"]["name"])
        if name == index.normalize(project):
            wheel = urllib.parse.unquote(item["download_info"]["url"].rsplit("/", 1)[-1])
        elif name == "torch":
            torch = item["metadata"]["version"]
    return wheel, torch


def _fail(line: InstallLine, outcome: Outcome, want: str) -> CommandFailed:
    return CommandFailed(f"the install line '{line.command()}' ({line.situation}) picks {outcome.text()}",
                         line.id, f"expected {want}")


def judge(line: InstallLine, outcome: Outcome, allowed: Sequence[str]) -> str:
    """Compare what pip picked with what the line must give; one line of text, or CommandFailed."""
    from packaging.specifiers import SpecifierSet

    from ci.universe import matrix

    want_wheel = " or ".join(allowed)
    if outcome.wheel not in allowed:
        raise _fail(line, outcome, f"{want_wheel} with torch {line.expect_torch or 'kept'}")
    if line.situation == KEEP_TORCH:
        if outcome.torch is not None:
            raise _fail(line, outcome, f"{want_wheel}, torch {outcome.torch_before} kept")
        return f"ok: {line.command()} -> {outcome.wheel}, keeps torch {outcome.torch_before}"
    if outcome.torch is None or outcome.torch not in SpecifierSet(line.expect_torch):
        raise _fail(line, outcome, f"{want_wheel} with torch {line.expect_torch}")
    cuda = matrix.get_torch(outcome.torch).cuda
    if int(cuda.split(".")[0]) != line.cuda_major:
        raise _fail(line, outcome, f"a CUDA {line.cuda_major} torch (PyPI's torch {outcome.torch} is CUDA {cuda})")
    return f"ok: {line.command()} -> {outcome.wheel}, torch {outcome.torch} (CUDA {cuda})"


@dataclasses.dataclass(frozen=True)
class Sources:
    """Where a check's pip looks: PyPI (or its view), the project's own PyPI files, the release's indexes."""

    pypi: str
    project_pypi: str | None
    index_root: Path
    site_url: str

    def args(self, line: InstallLine) -> list[str]:
        args = ["--index-url", self.pypi]
        if self.project_pypi:
            args += ["--extra-index-url", self.project_pypi]
        if line.index_url:
            local = (self.index_root / line.index).resolve().as_uri() + "/"
            args += ["--extra-index-url", local]
        return args


def tag_args(item: ReleaseFile) -> list[str]:
    """pip's tag options for the wheel's own tags, each ``manylinux_2_N`` platform with the older ones it
    accepts (pip does not widen a --platform it is given: torch's CUDA libraries are manylinux_2_17/2014)."""
    import re

    from ci.release.install_checks import _tag_args

    args = _tag_args(item)
    # The dependencies (torch) are CPython wheels of that version's own ABI, or pure: an abi3 wheel's tags alone
    # would exclude them.
    python = args[args.index("--python-version") + 1]
    for abi in (f"cp{python.replace('.', '')}", "none"):
        if abi not in args:
            args += ["--abi", abi]
    for platform in {t.split("-")[2] for t in item.tags}:
        m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
        if m:
            older = [f"manylinux_2_{n}_{m.group(2)}" for n in range(5, int(m.group(1)))]
            for extra in [*older, f"manylinux2014_{m.group(2)}", f"manylinux2010_{m.group(2)}"]:
                args += ["--platform", extra]
    return args


def run_fresh(line: InstallLine, item: ReleaseFile, python: Path, sources: Sources, tmp: Path) -> Outcome:
    """``pip install --dry-run --ignore-installed`` with the wheel's own tags (a Windows wheel is checked here)."""
    from ci import proc

    report = tmp / f"report-{hashlib.sha256((line.id + item.name).encode()).hexdigest()[:12]}.json"
    proc.run([python, "-m", "pip", "install", "--isolated", "--disable-pip-version-check", "--quiet", "--dry-run",
              "--ignore-installed", "--report", report, *sources.args(line), *tag_args(item), *line.requirements],
             env=pip_isolated_env(),
             what=f"pip found no install for the line '{line.command()}' ({item.name}'s tags)",
             hint="pip's message is above")
    wheel, torch = _report(report, line.project)
    return Outcome(line.id, wheel, torch)


def run_keep(line: InstallLine, python: Path, installed: str, sources: Sources, tmp: Path) -> Outcome:
    """``pip install --dry-run`` in an environment that has torch ``installed``: the line's torch pin is it."""
    from ci import proc

    report = tmp / f"report-{hashlib.sha256(line.id.encode()).hexdigest()[:12]}-keep.json"
    requirements = [f"torch=={installed}" if r == INSTALLED_TORCH else r for r in line.requirements]
    proc.run([python, "-m", "pip", "install", "--isolated", "--disable-pip-version-check", "--quiet", "--dry-run",
              "--only-binary=:all:", "--report", report, *sources.args(line), *requirements], env=pip_isolated_env(),
             what=f"pip found no install for the line '{line.command()}' with torch {installed} installed",
             hint="pip's message is above")
    wheel, torch = _report(report, line.project)
    return Outcome(line.id, wheel, torch, torch_before=installed)


def _sys_tags(python: Path) -> list[str]:
    from ci import proc

    out = proc.run([python, "-c", "import json; from pip._vendor.packaging import tags; "
                    "print(json.dumps([str(t) for t in tags.sys_tags()]))"], capture=True, log=False).stdout
    return list(json.loads(out.strip().splitlines()[-1]))


#: pip 23.2 downloads every wheel it resolved even in a dry run; newer pips stop at the PEP 658 metadata.
PIP = "pip>=25"


def with_new_pip(python: Path) -> Path:
    """Put a pip that resolves from metadata alone into the venv of ``python`` (pip's own configuration: its
    index or mirror)."""
    from ci import proc

    proc.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", PIP],
             what="installing a newer pip into the check's environment failed")
    return python


def stand_in_torch(folder: Path, version: str, python: Path | None = None) -> Path:
    """A new venv whose site-packages holds ``torch <version>``'s metadata only: what pip reads of an installed
    torch (no module: nothing imports it). For a torch no environment here has (a CUDA 12 torch 2.10)."""
    from ci import proc
    from ci.toolchain import envs

    proc.run([python or sys.executable, "-m", "venv", folder], what="creating a virtual environment failed")
    site = envs.PythonEnv(folder).site_packages()
    info = site / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    (info / "INSTALLER").write_text("cuda-ext-farm stand-in\n")
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n{info.name}/INSTALLER,,\n{info.name}/RECORD,,\n")
    return with_new_pip(envs.PythonEnv(folder).python)


def _keep_env(line: InstallLine, torch_envs: Sequence[envs.PythonEnv], tmp: Path,
              python: Path | None) -> tuple[Path, str, str]:
    """An environment for a keep-torch line: a venv layered over one of ``torch_envs`` whose torch the index
    serves (its CUDA major first, then a CPU build), else a stand-in torch of PyTorch's index's form."""
    from packaging.specifiers import SpecifierSet

    from ci.toolchain import envs
    from ci.universe import matrix

    spec = SpecifierSet(line.serves)
    ranked: list[tuple[int, envs.PythonEnv, str]] = []
    for env in torch_envs:
        meta = envs.torch_metadata(env)
        version, cuda = str(meta["version"]), meta["cuda"]
        if version not in spec:
            continue
        rank = 0 if cuda and int(cuda.split(".")[0]) == line.cuda_major else 1 if not cuda else 2
        if rank < 2:
            ranked.append((rank, env, version))
    folder = tmp / f"keep-{len(list(tmp.glob('keep-*')))}"
    if ranked:
        rank, base, version = min(ranked, key=lambda r: r[0])
        env = envs.test_env(base, folder)
        how = f"{'a CUDA' if rank == 0 else 'a CPU-only'} torch over {base.root.name}"
        return with_new_pip(env.python), version, how
    fits = [r for r in matrix.TORCH_RELEASES if r.version in spec and r.cuda_major == line.cuda_major]
    release = max(fits, key=lambda r: shapes.version_key(r.version))
    version = f"{release.version}+cu{release.cuda.replace('.', '')}"
    return stand_in_torch(folder, version, python), version, "a stand-in torch (metadata only)"


@contextmanager
def _pypi(pypi_url: str, view: bool) -> Iterator[str]:
    if not view:
        yield pypi_url
        return
    with PyPIView(pypi_url) as served:
        yield served.url
        if served.downloads:
            raise CommandFailed("pip asked for whole files during a dry run", ", ".join(served.downloads[:3]),
                                "the check resolves from metadata only; use a pip that reads PEP 658 metadata")


def check_install_lines(out: Path, manifest: Manifest, *, torch_envs: Sequence[envs.PythonEnv] = (),
                        python: Path | None = None, pypi_url: str = PYPI_SIMPLE, view: bool = True,
                        lines: Sequence[InstallLine] | None = None) -> dict[str, str]:
    """Run every install line of the release folder ``out`` with real pip; ``{"<line id> <wheel>": "ok: ..."}``.

    Fresh lines run once per wheel of the index, with that wheel's tags (every Python and OS), in a new venv of
    ``python`` (default: this interpreter). Keep-torch lines run in a venv over one of ``torch_envs`` whose torch
    the index serves (the farm's cached build environments; /tmp/testv's CPU torch), else over a stand-in torch.
    A line that picks another file or another torch raises CommandFailed naming the line and what it picked."""
    from ci import proc
    from ci.release import index

    lines = install_lines(manifest) if lines is None else lines
    by_name = {f.name: f for f in manifest.files}
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="farm-install-lines-") as tmp_name, _pypi(pypi_url, view) as pypi:
        tmp = Path(tmp_name)
        own = [f for f in manifest.files if f.pypi]
        project_pypi = None
        if own:
            index.write_site(tmp / "pypi", {"simple": {manifest.project: [
                index.IndexFile(f.name, (out / "pypi" / f.name).resolve().as_uri(), f.sha256, f.requires_python)
                for f in own]}})
            project_pypi = (tmp / "pypi" / "simple").as_uri() + "/"
        sources = Sources(pypi, project_pypi, out / "index", SITE)
        fresh_python: Path | None = None
        for line in lines:
            if line.situation == FRESH:
                if fresh_python is None:
                    proc.run([python or sys.executable, "-m", "venv", tmp / "fresh"],
                             what="creating a virtual environment failed")
                    fresh_python = with_new_pip(tmp / "fresh" / "bin" / "python")
                for name in line.wheels:
                    if by_name[name].os != "linux":
                        # pip evaluates dependency markers for the machine it runs on, not for --platform: on
                        # Linux, torch's Windows requirements come out as its Linux ones (nvidia-* wheels).
                        results[f"{line.id} {name}"] = "not run here: pip resolves a Windows install on Windows only"
                        continue
                    outcome = run_fresh(line, by_name[name], fresh_python, sources, tmp)
                    results[f"{line.id} {name}"] = judge(line, outcome, [name])
                continue
            keep_python, installed, how = _keep_env(line, torch_envs, tmp, python)
            tags = set(_sys_tags(keep_python))
            allowed = [n for n in line.wheels if set(by_name[n].tags) & tags]
            if not allowed:
                results[f"{line.id}"] = "not run here: no wheel of the index installs on this machine's Python"
                continue
            outcome = run_keep(line, keep_python, installed, sources, tmp)
            results[f"{line.id} {outcome.wheel}"] = f"{judge(line, outcome, allowed)} ({how})"
    return results
