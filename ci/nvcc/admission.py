"""Each compile the nvcc wrapper lets through, admitted by memory and measured (the compile front's second half).

The farm sets :data:`RECORD` (a JSON-lines file in the work folder) on every CUDA build; the wrapper then runs the
compile (the compile cache, nvcc) as its child instead of replacing itself with it, and:

* **admits** it: it starts only when its expected need fits in what is free (:func:`available`: the tightest of the
  cgroup's limit minus its use, v2 ``memory.max - memory.current`` or v1 ``memory.limit_in_bytes -
  memory.usage_in_bytes``, each less the reclaimable page cache ``inactive_file``, and ``MemAvailable``) less what
  the compiles already running have claimed but not yet taken. One compile at a time decides, under a lock file
  (:data:`LOCK`): waiting compiles queue there and never all start at once. A compile whose need alone exceeds
  what is free while nothing else runs starts anyway, with nvcc's ``--threads`` lowered to what fits (at least 1).
* **measures** it: wall time and peak memory of the whole process tree (nvcc, cudafe++, cicc, ptxas, the host
  compiler, a compile cache), from the kernel: the sum of ``VmRSS`` of every process of the tree read from
  ``/proc`` every :data:`POLL` seconds (the tree's processes run at the same time with ``--threads``; their sum is
  what the cgroup is charged), and the largest single process's ``ru_maxrss`` from ``getrusage(RUSAGE_CHILDREN)``
  at the end, which catches a short peak between two polls (``ru_maxrss`` alone is the maximum of single
  processes, never their sum, so it misses parallel threads). The peak is the larger of the two.
* **records** it: one line per compile in :data:`RECORD` (:func:`record_line`): the source relative to
  :data:`ROOT`, its architecture count, ``--threads``, the machine's CPU count, seconds, peak bytes, whether the
  compiler ran (``cicc``, ``ptxas`` or ``cc1plus`` seen: a compile-cache hit runs none) and the need it was
  admitted with.

The expected need (:func:`expected`): the source's record from an earlier build (:data:`EXPECTED`, from the farm's
cache), scaled to the architectures this compile runs at once (``--threads``, whose ``0`` is the machine's CPU
count: :func:`parallel`); for a source never built, the largest per-architecture peak recorded for the project
(this build's record first, then the cache) times them; with no record at all, the compile runs alone (nothing else
admitted until one compile of the build is measured).

:data:`DEADLINE` (seconds since the epoch): a compile that would not finish before it by its record is not
started (:data:`AT_DEADLINE`, exit status :data:`STOPPED`), nor any after it: the running ones finish into the
compile cache. :data:`SWITCH` ``off``: measured and recorded, not admitted (the naive settings the memory tests
and the bench compare against). Standard library only (containers; on Windows only the time is measured).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

RECORD = "FARM_COMPILE_RECORD"
#: A JSON file: ``{"sources": {source: {"peak", "seconds", "archs", "threads", "cpus"}}}``.
EXPECTED = "FARM_COMPILE_EXPECTED"
ROOT = "FARM_COMPILE_ROOT"
DEADLINE = "FARM_DEADLINE"
#: The ``--threads`` the farm chose for this build's compiles (unset: the flags' own).
THREADS = "FARM_NVCC_THREADS"
SWITCH = "FARM_COMPILE_ADMISSION"
POLL = 0.05
#: The compilers whose presence in the tree means the compile ran (not a compile-cache hit).
COMPILERS = ("cicc", "ptxas", "cc1plus", "cudafe++")
AT_DEADLINE = "cuda-ext-farm nvcc: at the deadline: {source} not started ({seconds:.0f} s expected, {left:.0f} s left)"
LOWERED = "cuda-ext-farm nvcc: {source}: runs alone with --threads {threads} ({need} expected, {free} free)"
STOPPED = 4
LOCK = ".admission.lock"
CLAIMS = ".claims"


def gib(value: float) -> str:
    return f"{value / 2**30:.1f} GiB"


# --- memory, from the kernel ------------------------------------------------------------------------------


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return None if text in ("max", "") else int(text)


def _inactive_file(folder: Path, key: str) -> int:
    try:
        for line in (folder / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _cgroup_folders(cgroup_file: Path, mount: Path) -> list[tuple[Path, str]]:
    """The memory cgroup folders of this process and their ancestors (a limit anywhere above applies), each with
    its version: ``v2`` or ``v1``."""
    try:
        lines = cgroup_file.read_text().splitlines()
    except OSError:
        return []
    found: list[tuple[Path, str]] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        version, base = (("v2", mount) if controllers == "" and not (mount / "memory").is_dir() else
                         ("v1", mount / "memory") if "memory" in controllers.split(",") else ("", mount))
        if not version:
            continue
        parts = [p for p in path.split("/") if p]
        candidates = [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]
        found += [(c, version) for c in candidates if c.is_dir()]
    return found


def cgroup_free(cgroup_file: Path = Path("/proc/self/cgroup"), mount: Path = Path("/sys/fs/cgroup")) -> int | None:
    """What the tightest memory cgroup above this process can still give (None: no limit)."""
    free: int | None = None
    for folder, version in _cgroup_folders(cgroup_file, mount):
        names = ("memory.max", "memory.current", "inactive_file") if version == "v2" else (
            "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        limit, usage = _read_int(folder / names[0]), _read_int(folder / names[1])
        if limit is None or usage is None or limit >= 2**60:
            continue
        left = limit - max(0, usage - _inactive_file(folder, names[2]))
        free = left if free is None else min(free, left)
    return free


def cgroup_limit(cgroup_file: Path = Path("/proc/self/cgroup"), mount: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The tightest memory limit of the cgroups above this process (None: none)."""
    known = [v for folder, version in _cgroup_folders(cgroup_file, mount)
             if (v := _read_int(folder / ("memory.max" if version == "v2" else "memory.limit_in_bytes"))) is not None
             and v < 2**60]
    return min(known) if known else None


def mem_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def available() -> int | None:
    """Bytes a new compile can get now: the tightest of the cgroup's and the machine's (None: unknown)."""
    known = [v for v in (cgroup_free(), mem_available()) if v is not None]
    return max(0, min(known)) if known else None


# --- the process tree ---------------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(k) for k in f.read().split()]
    except OSError:
        pass
    return kids


def _status(pid: int) -> tuple[str, int]:
    """A process's name and resident bytes (0 when it is gone)."""
    name, rss = "", 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Name:"):
                    name = line.split(None, 1)[1].strip()
                elif line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    return name, rss


def tree(pid: int) -> tuple[int, set[str]]:
    """The resident bytes of ``pid`` and all its descendants together, and their names."""
    total, names, todo = 0, set(), [pid]
    while todo:
        current = todo.pop()
        name, rss = _status(current)
        total += rss
        names.add(name)
        todo += _children(current)
    return total, names


def threads_of(args: Sequence[str]) -> tuple[int, int | None]:
    """nvcc's ``--threads``/``-t`` value (the last one wins; 1 without one) and the index of its value word."""
    value, where = 1, None
    for i, word in enumerate(args):
        option, equals, rest = word.partition("=")
        if option in ("--threads", "-t"):
            text, index = (rest, i) if equals else ((args[i + 1], i + 1) if i + 1 < len(args) else ("1", None))
            if re.fullmatch(r"\d+", text):
                value, where = int(text), index
    return value, where


def parallel(archs: int, threads: int, cpus: int) -> int:
    """How many architectures of one compile run at the same time on a machine of ``cpus`` CPUs: nvcc's
    ``--threads 0`` is "the number of CPUs on the machine" (nvcc --help), not every architecture: 6 architectures
    on 2 CPUs run 2 at a time (measured: classic_ext's compile, one cicc of 1.24 GiB, peaks at 2.47 GiB with 6). The
    CPUs are the machine's, not this process's affinity (nvcc under ``taskset -c 0`` still ran 2)."""
    return max(1, min(max(archs, 1), cpus if threads == 0 else threads))


def cpus() -> int:
    """The CPU count nvcc's ``--threads 0`` uses."""
    return os.cpu_count() or 1


def with_threads(args: Sequence[str], threads: int) -> list[str]:
    """``args`` with nvcc's ``--threads`` set to ``threads`` (its value replaced, or the option added)."""
    _, where = threads_of(args)
    out = list(args)
    if where is None:
        return [*out, "--threads", str(threads)]
    word = out[where]
    out[where] = word.partition("=")[0] + f"={threads}" if "=" in word and word.startswith("-") else str(threads)
    return out


class Need(NamedTuple):
    bytes: int | None  # None: nothing known, the compile runs alone
    seconds: float | None
    how: str  # "recorded", "estimated" or "unknown"


def load_expected(env: Mapping[str, str]) -> dict[str, Any]:
    try:
        data = json.loads(Path(env[EXPECTED]).read_text())
        return data if isinstance(data, dict) else {}
    except (KeyError, OSError, ValueError):
        return {}


def per_unit(line: Mapping[str, Any], machine: int) -> float:
    """A measured compile's peak per architecture it ran at once: the record's own CPU count (``cpus``, what its
    ``--threads 0`` meant), else ``machine``'s (records made before the farm kept it)."""
    return float(line["peak"]) / parallel(line["archs"], line["threads"], int(line.get("cpus") or machine))


def unit_peaks(lines: list[dict[str, Any]], machine: int) -> list[float]:
    """Per-parallel-architecture peaks of the measured compiles among ``lines`` (records' shape)."""
    return [per_unit(line, machine) for line in lines if line.get("compiled") and line.get("peak")]


def read_record(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line being written
    return out


def expected(source: str, archs: int, threads: int, known: Mapping[str, Any], this_build: list[dict[str, Any]],
             machine: int) -> Need:
    """What a compile of ``source`` is expected to take on a machine of ``machine`` CPUs: its record scaled to the
    architectures ``archs`` x ``threads`` runs at once, else the largest per-architecture peak the project recorded,
    else unknown."""
    units = parallel(archs, threads, machine)
    mine = [line for line in this_build if line.get("source") == source and line.get("compiled")]
    entry = mine[-1] if mine else known.get("sources", {}).get(source)
    if entry and entry.get("peak"):
        seconds = entry.get("seconds", 0.0) * max(archs, 1) / max(entry["archs"], 1)
        return Need(int(per_unit(entry, machine) * units), seconds, "recorded")
    peaks = (unit_peaks(this_build, machine)
             + unit_peaks([{**v, "compiled": True} for v in known.get("sources", {}).values()], machine))
    if peaks:
        return Need(int(max(peaks) * units), known.get("unit_seconds"), "estimated")
    return Need(None, None, "unknown")


# --- admission ------------------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def outstanding(claims: Path) -> tuple[int, int]:
    """How many compiles run (by their claims) and the bytes they claimed but do not hold yet."""
    running, owed = 0, 0
    for claim in claims.glob("*"):
        try:
            pid, need = int(claim.name), int(claim.read_text() or 0)
        except (ValueError, OSError):
            continue
        if not _alive(pid):
            claim.unlink(missing_ok=True)
            continue
        running += 1
        owed += max(0, need - tree(pid)[0])
    return running, owed


class Admitted(NamedTuple):
    threads: int | None  # lowered --threads (None: as asked)
    waited: float
    line: str = ""
    need: Need | None = None  # the need it was admitted with


def admit(claims: Path, need: Need, units: int, source: str, me: int, again: Callable[[], Need] | None = None
          ) -> Admitted:
    """Wait (holding the lock, so that the compiles behind queue) until ``need`` fits, then claim it for ``me``;
    an unknown need is asked ``again`` while it waits (the first compile measured gives the others' estimate)."""
    import fcntl

    claims.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(claims.parent / LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        threads: int | None = None
        line = ""
        while True:
            running, owed = outstanding(claims)
            free = available()
            need = again() if need.bytes is None and again is not None else need
            if running == 0 or (need.bytes is not None and free is not None and need.bytes + owed <= free):
                break
            time.sleep(0.2)
        claim = need.bytes or 0
        if need.bytes is not None and free is not None and need.bytes > free and units > 1:
            threads = max(1, units * free // need.bytes)
            claim = need.bytes * threads // units
            line = LOWERED.format(source=source, threads=threads, need=gib(need.bytes), free=gib(free))
        # never built and nothing measured yet: claim all that is free, so the others wait for its measurement
        (claims / str(me)).write_text(str(claim if need.bytes is not None else (free or 0)))
    return Admitted(threads, time.monotonic() - started, line, need)


class Measured(NamedTuple):
    returncode: int
    seconds: float
    peak: int
    compiled: bool


def measure(command: Sequence[str], env: Mapping[str, str]) -> Measured:
    """Run ``command`` as a child (ninja's interrupt reaches it in this process group; a SIGTERM to this process is
    passed on) and measure its tree."""
    import resource

    prefer_killed()
    started = time.monotonic()
    child = subprocess.Popen(list(command), env=dict(env))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the child gets ninja's SIGINT itself
    signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    peak, names = 0, set[str]()
    try:
        while True:
            try:
                code = child.wait(timeout=POLL)
                break
            except subprocess.TimeoutExpired:
                rss, seen = tree(child.pid)
                peak, names = max(peak, rss), names | seen
    finally:
        signal.signal(signal.SIGINT, previous)
    largest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return Measured(code, time.monotonic() - started, max(peak, largest), bool(names & set(COMPILERS)))


def relative(source: str, env: Mapping[str, str]) -> str:
    root = env.get(ROOT, "")
    if root:
        try:
            return Path(source).resolve().relative_to(Path(root).resolve()).as_posix()
        except ValueError:
            pass
    return source


def record_line(path: Path, fields: Mapping[str, Any]) -> None:
    """Append one line (one write on a file opened for appending: lines of parallel compiles never interleave)."""
    data = (json.dumps(dict(fields), sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def past_deadline(env: Mapping[str, str], need: Need, source: str, stop_file: Path) -> str:
    """The line refusing the compile at the deadline, or empty."""
    if not env.get(DEADLINE):
        return ""
    left = float(env[DEADLINE]) - time.time()
    seconds = need.seconds or 0.0
    if stop_file.exists() or seconds > left:
        stop_file.touch()
        return AT_DEADLINE.format(source=source, seconds=seconds, left=max(0.0, left))
    return ""


def run(command: Sequence[str], env: dict[str, str], source: str, archs: int) -> int:
    """Admit, run and record one compile (``command``: the next command and nvcc's arguments)."""
    record = Path(env[RECORD])
    name = relative(source, env)
    threads, _ = threads_of(command)
    if env.get(THREADS, "").isdigit() and int(env[THREADS]) != threads:
        threads, command = int(env[THREADS]), with_threads(command, int(env[THREADS]))
    machine = cpus()
    need = expected(name, archs, threads, load_expected(env), read_record(record), machine)
    stop = record.with_name(record.name + ".stopped")
    refusal = past_deadline(env, need, name, stop)
    if refusal:
        print(refusal, file=sys.stderr, flush=True)
        return STOPPED
    if os.name == "nt":
        done, admitted = measure_plain(command, env), Admitted(None, 0.0)
    elif env.get(SWITCH, "").lower() == "off":
        done, admitted = measure(command, env), Admitted(None, 0.0)
    else:
        claims = record.with_name(record.name + CLAIMS)
        admitted = admit(claims, need, parallel(archs, threads, machine), name, os.getpid(),
                         lambda: expected(name, archs, threads, load_expected(env), read_record(record), machine))
        need = admitted.need or need
        if admitted.line:
            print(admitted.line, file=sys.stderr, flush=True)
        if admitted.threads is not None:
            threads, command = admitted.threads, with_threads(command, admitted.threads)
        refusal = past_deadline(env, need, name, stop) if admitted.waited > 1 else ""
        if refusal:
            (claims / str(os.getpid())).unlink(missing_ok=True)
            print(refusal, file=sys.stderr, flush=True)
            return STOPPED
        try:
            done = measure(command, env)
        finally:
            (claims / str(os.getpid())).unlink(missing_ok=True)
    record_line(record, {"source": name, "archs": archs, "threads": threads, "cpus": machine,
                         "seconds": round(done.seconds, 3),
                         "peak": done.peak, "compiled": done.compiled, "rc": done.returncode, "need": need.bytes,
                         "how": need.how, "waited": round(admitted.waited, 3), "end": round(time.time(), 3)})
    return done.returncode if done.returncode >= 0 else 128 - done.returncode


def prefer_killed() -> None:
    """Out of memory, the kernel should end a compile (nvcc names it) rather than the build's Python holding torch
    (often the largest process; ending it says nothing): raise this wrapper's ``oom_score_adj``, and its child's."""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("500")


def measure_plain(command: Sequence[str], env: Mapping[str, str]) -> Measured:
    started = time.monotonic()
    return Measured(subprocess.call(list(command), env=dict(env)), time.monotonic() - started, 0, True)
