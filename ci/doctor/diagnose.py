"""``python -m ci doctor INDEX``: which wheel of an index fits this machine, and why each other one does not.

The machine is read in the user's interpreter by ci/doctor/probe.py (``--python``, default the ``python`` first on
PATH, else ``python3``: the farm itself runs in a tool environment of its own), or taken from a recorded
environment (``--env FILE``, the probe's JSON). The wheels are read by ci/doctor/wheels.py. A wheel fits when
every rule holds:

1. **platform**: one of its platform tags is this machine's: OS and CPU (``manylinux_2_28_aarch64`` is not for
   x86_64), and ``manylinux_2_X`` needs glibc >= 2.X;
2. **Python**: its interpreter-ABI tag is this interpreter's (``cp311-cp311``; ``cp310-abi3`` from CPython 3.10 on,
   not free-threaded; ``cp313-cp313t`` in a free-threaded CPython 3.13 only, which loads no GIL build's wheel),
   and its Requires-Python holds. Tags a probe recorded with a packaging older than free-threaded CPython (a
   ``cp313t`` interpreter given the GIL build's ``cp313`` tags) are derived again from the Python's fields;
3. **torch**: the installed torch's version (local label and pre-release allowed) satisfies the wheel's
   ``Requires-Dist: torch`` (``==2.11.*`` classic, ``>=2.10`` stable); without torch, pip installs one with it;
4. **CUDA major**: ``torch.version.cuda``'s major is the wheel's; a CPU-only torch loads a stable-ABI CUDA wheel
   (its CUDA kernels won't run), not a classic one (it links torch's CUDA libraries);
5. **driver**: CUDA 13.x needs an NVIDIA driver >= 580, 12.x >= 525 (minor-version compatibility);
6. **GPU code**, for each GPU of compute capability X.Y: SASS for X.y with y <= Y (``9.0a`` only on 9.0 itself,
   ``10.0f`` on its family: 10.0 and up within major 10),
   or PTX for X'.Y' <= X.Y, JIT-compiled at the first call (then the driver must run the wheel's CUDA minor).

Fitting wheels rank by: SASS for every GPU (or a CPU build for a CPU-only machine), then PTX JIT, then unknown GPU
code or CUDA kernels that cannot run here, then a CPU build beside a GPU; then the newest version, the exact CUDA of
torch (else the newest CUDA), and pip's tag preference. Exit status: 0 when some wheel of each project fits, 1
when none does (its reasons above the last line), 2 for bad input.

Standard library plus ``packaging``: ``python -m ci.doctor INDEX`` runs without the farm's other tools.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ci import settings, toolenv
from ci.doctor import variants as doctor_variants
from ci.doctor import wheels as doctor_wheels
from ci.doctor.rules import Machine, Verdict, judge, rank_key
from ci.errors import CommandFailed, FarmError, UsageError

PROBE = Path(__file__).resolve().with_name("probe.py")


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("index", nargs="?", help="a wheelhouse (<target-id>/<wheel>), a PEP 503 site (<variant>/<project>/"
                    "index.html) or a folder of wheels")
    sp.add_argument("--env", help="a recorded environment (the JSON `doctor --record` prints on that machine) instead "
                    "of this machine")
    sp.add_argument("--record", action="store_true", help="print this machine's environment as JSON (for --env "
                    "elsewhere) and stop: no index is read")
    sp.add_argument("--python", help="the interpreter whose torch is judged (default: the python first on PATH)")
    sp.add_argument("--json", action="store_true", help="the report as JSON")


@dataclasses.dataclass(frozen=True)
class Report:
    machine: Machine
    folder: Path
    shape: str
    #: project -> its verdicts, best first: the fitting ones (the first is chosen), then the others
    projects: dict[str, list[Verdict]]
    #: project -> what a variant-aware installer picks from its variant wheels (ci/doctor/variants.py): the
    #: wheel (None: none of them fits) and the labels that fit, best first; absent without variant wheels
    variant_picks: dict[str, tuple[Verdict | None, list[str]]] = dataclasses.field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return all(vs and vs[0].fits for vs in self.projects.values())

    def lines(self) -> list[str]:
        out = self.machine.describe()
        count = sum(len(vs) for vs in self.projects.values())
        out.append(f"index: {self.folder} ({self.shape}, {count} wheels)")
        for project, verdicts in self.projects.items():
            fit = [v for v in verdicts if v.fits]
            out.append("")
            if fit:
                best = fit[0]
                out.append(f"{project}: {_fits(best, self.machine)}: {_name(best)}: {_why(best)}")
                out.append(f"  install: pip install {best.wheel.path or best.wheel.url}")
            else:
                out.append(f"{project}: no wheel fits this machine")
            if fit[1:]:
                out.append("also fits (ranked lower):")
                out += [f"  {_name(v)}: {_why(v)}" for v in fit[1:]]
            if len(fit) < len(verdicts):
                out.append("does not fit:")
                out += [f"  {_name(v)}: {'; '.join(v.reasons)}" for v in verdicts if not v.fits]
            if project in self.variant_picks:
                pick, labels = self.variant_picks[project]
                chosen = f"{pick.wheel.file}" if pick else "none of its variant wheels"
                out.append(f"variant-aware installer (PEP 825 draft, NVIDIA provider's rules): {chosen} (labels that "
                           f"fit, best first: {', '.join(labels) or 'none'})")
                if pick and fit and pick is not fit[0]:
                    out.append(f"  note: the doctor's own choice differs ({_name(fit[0])}): the provider knows the "
                               "driver and the GPU, not torch's CUDA build nor the PTX a GPU can JIT")
        return out

    def as_dict(self) -> dict[str, Any]:
        projects: dict[str, Any] = {}
        for p, vs in self.projects.items():
            projects[p] = {"chosen": vs[0].wheel.file if vs and vs[0].fits else None,
                           "wheels": [v.as_dict() for v in vs]}
            if p in self.variant_picks:
                pick, labels = self.variant_picks[p]
                projects[p]["variant"] = {"chosen": pick.wheel.file if pick else None, "labels": labels}
        return {"machine": self.machine.raw, "index": str(self.folder), "shape": self.shape, "fits": self.fits,
                "projects": projects}


def _fits(v: Verdict, machine: Machine) -> str:
    """``fits``, and where the wheel only imports here (no GPU, a CPU-only torch) how far it fits."""
    if v.kernels_run:
        return "fits"
    why = "no GPU" if not machine.gpus else "a CPU-only torch"
    return f"fits (CPU import only here: {why})"


def _name(v: Verdict) -> str:
    return v.wheel.file + (f" [{v.wheel.where}]" if v.wheel.where else "")


def _why(v: Verdict) -> str:
    return "; ".join([v.how, *v.notes]) if v.how else "; ".join(v.notes) or "fits"


def doctor(folder: Path, machine: Machine, listed: tuple[str, list[doctor_wheels.Listed]] | None = None) -> Report:
    """The verdicts on the wheels of ``folder`` (``listed``: its shape and wheels, when already read)."""
    shape, wheels = listed or doctor_wheels.list_index(folder)
    projects: dict[str, list[Verdict]] = {}
    for item in wheels:
        verdict = judge(doctor_wheels.read(item), machine)
        projects.setdefault(verdict.wheel.project, []).append(verdict)
    for verdicts in projects.values():
        # The fitting ones best first; then those with the fewest reasons (the nearest misses).
        verdicts.sort(key=lambda v: (not v.fits, len(v.reasons), *rank_key(v, machine)))
    picks = {p: variant_pick(vs, machine) for p, vs in projects.items() if any(v.wheel.variant_label for v in vs)}
    return Report(machine, folder, shape, dict(sorted(projects.items())), picks)


def variant_pick(verdicts: list[Verdict], machine: Machine) -> tuple[Verdict | None, list[str]]:
    """What a variant-aware installer installs from the variant wheels among ``verdicts``: the labels the NVIDIA
    provider's rules order (ci/doctor/variants.py), then, in the best label that has one, the wheel whose tags and
    Python fit, by pip's tag preference. The labels that fit, best first, with it."""
    from ci.release import variants as release_variants

    labelled = [v for v in verdicts if v.wheel.variant_label]
    documents = [(v.wheel.variant_label or "", release_variants.read_variant(v.wheel.path) if v.wheel.path and
                  v.wheel.path.is_file() else None) for v in labelled]
    ordered = doctor_variants.order(doctor_variants.labelled(documents), doctor_variants.provider_features(machine))
    priority = {t: i for i, t in enumerate(machine.tags)}
    for candidate in ordered:
        wheels = [v for v in labelled if v.wheel.variant_label == candidate.label and _installable(v, machine)]
        if wheels:
            best = min(wheels, key=lambda v: min((priority.get(t, len(priority)) for t in v.wheel.tags),
                                                 default=len(priority)))
            return best, [c.label for c in ordered]
    return None, [c.label for c in ordered]


def _installable(v: Verdict, machine: Machine) -> bool:
    """The installer's own filter before variants: the wheel's tags (platform, Python) and Requires-Python."""
    from ci.doctor import rules

    w = v.wheel
    return not w.unreadable and not rules.platform_reason(w, machine) and not rules.python_reason(w, machine) and (
        w.requires_python is None or w.requires_python.contains(machine.python_text, prereleases=True))


# --- the machine: a probe in the user's interpreter, or a recorded environment ---------------------------------


def load_env(path: Path) -> Machine:
    fix = "pass a JSON file that `doctor --record` printed on the machine to judge"
    if not path.is_file():
        raise UsageError("the recorded environment does not exist", path, fix)
    try:
        return Machine.from_json(json.loads(path.read_text(encoding="utf-8")), f"recorded in {path.name}")
    except (ValueError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise UsageError(f"not a recorded environment ({exc})", path, fix) from None


def interpreter(given: str | None) -> str:
    """``--python``: a path, a name on PATH or an environment's folder; by default the user's ``python``."""
    if given is None:
        return _user_python()
    path = Path(given).expanduser()
    if path.is_dir():
        path = path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    found = str(path) if path.is_file() else (shutil.which(given) if os.sep not in given else None)
    if not found:
        raise UsageError("--python is not an interpreter", given,
                         "pass a python executable (a path, or a name on PATH such as python3.12) or a venv folder")
    return found


def _user_python() -> str:
    """The ``python`` first on the user's PATH (``FARM_CALLER_PATH``, which the installed command's launcher keeps,
    else PATH), never the farm's own tool environment (the interpreter running this), then ``python3``."""
    environ = settings.current().environ
    tool_env = (Path(sys.prefix) / toolenv.COMPLETE_MARKER).is_file()  # this runs in the farm's tool environment
    own = os.path.realpath(Path(sys.executable).parent) if tool_env else None
    search = environ.get("FARM_CALLER_PATH") or environ.get("PATH", "")
    path = os.pathsep.join(f for f in search.split(os.pathsep) if f and os.path.realpath(f) != own)
    return shutil.which("python", path=path) or shutil.which("python3", path=path) or sys.executable


def _caller_env() -> dict[str, str]:
    """What the probe must see of PYTHONPATH: the caller's own, not the farm's code its launchers put there."""
    farm = os.path.realpath(Path(__file__).resolve().parents[2])
    environ = settings.current().environ  # the environment the entry read
    caller = environ.get("FARM_CALLER_PYTHONPATH")
    entries = environ.get("PYTHONPATH", "").split(os.pathsep)
    if caller is None and not any(e and os.path.realpath(e) == farm for e in entries):
        return {}
    return {"PYTHONPATH": caller if caller is not None else os.pathsep.join(
        e for e in entries if e and os.path.realpath(e) != farm)}


def probe(python: str) -> Machine:
    cmd = [python, str(PROBE)]
    done = _run_logged(cmd, _caller_env())
    try:
        data = json.loads(done.stdout)
    except ValueError:
        data = None
    if done.returncode != 0 or data is None:
        raise CommandFailed("the environment probe failed", f"{python}, exit status {done.returncode}",
                            "run the logged line by hand to see why, or pass --python with another interpreter",
                            details=(done.stdout + done.stderr).strip()[-3000:])
    try:
        return Machine.from_json(data, f"probed {python}")
    except (ValueError, TypeError, AttributeError) as exc:
        raise CommandFailed(f"the probe printed an environment the doctor cannot read ({exc})", python,
                            "report it with the probe's output") from None


def _run_logged(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    try:
        from ci import proc
    except ImportError:  # no rich: `python -m ci.doctor` with nothing but packaging (and torch)
        changed = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        print(f"$ {changed + ' ' if changed else ''}{shlex.join(cmd)}", file=sys.stderr, flush=True)
        return subprocess.run(cmd, capture_output=True, text=True, env={**settings.current().environ, **env},
                              check=False)
    return proc.run(cmd, env=env or None, capture=True, check=False)


def run(index: str | None, env: str | None = None, python: str | None = None, as_json: bool = False,
        emit: Callable[[str], None] = print, record: bool = False) -> int:
    """The doctor command: the report, exit 0; with no fitting wheel, a FarmError of exit status 1 (``--json``:
    the JSON, then exit 1). ``record``: this machine's environment as JSON (for ``--env`` elsewhere), nothing read."""
    if record:
        emit(json.dumps(probe(interpreter(python)).raw, indent=2))
        return 0
    if not index:
        raise UsageError("doctor needs an index to judge", "no INDEX", f"{settings.entry('doctor', 'INDEX')} (a "
                         "wheelhouse, a PEP 503 site or a folder of wheels), or --record to print this machine")
    folder = Path(index).expanduser().resolve()
    listed = doctor_wheels.list_index(folder)  # a bad folder is refused before anything runs
    machine = load_env(Path(env).expanduser().resolve()) if env else probe(interpreter(python))
    report = doctor(folder, machine, listed)
    if as_json:
        emit(json.dumps(report.as_dict(), indent=2))
        return 0 if report.fits else 1
    for line in report.lines():
        emit(line)
    if not report.fits:
        missing = [p for p, vs in report.projects.items() if not (vs and vs[0].fits)]
        judged = interpreter_hint(report, missing) if python is None and env is None else ""
        raise FarmError(f"no wheel of {', '.join(missing)} fits this machine", folder,
                        f"each wheel's reasons are above: {judged}install the torch, Python or driver a wheel needs, "
                        f"or build one for this machine ({settings.entry('build')})", exit_code=1)
    return 0


def interpreter_hint(report: Report, missing: list[str]) -> str:
    """When the interpreter (its Python, its torch) is why no wheel of ``missing`` fits, the words that name it and
    ``--python``: the ``python`` first on PATH, judged by default, is often not the environment the user meant."""
    if not all(v.by_interpreter for p in missing for v in report.projects[p]):
        return ""
    return (f"the doctor judged {report.machine.source.removeprefix('probed ')} (the python first on PATH): pass "
            "--python PATH (an interpreter or a venv folder) to judge another; or ")


def main(argv: Iterable[str] | None = None) -> int:
    """``python -m ci.doctor``: the command without the farm's tools (its own parser: nothing here imports the
    farm's command line, which imports this module)."""
    parser = argparse.ArgumentParser(prog="python -m ci.doctor", description="Which wheel of an index fits this "
                                     "machine, and why each other one does not.")
    add_arguments(parser)
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
        return run(args.index, args.env, args.python, args.json, record=args.record)
    except FarmError as exc:
        if exc.details:
            print(exc.details, file=sys.stderr)
        print(exc.line(), file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
