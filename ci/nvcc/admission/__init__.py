"""Each compile the nvcc wrapper lets through, admitted by memory and measured (the compile front's second half).

The farm sets :data:`RECORD` (a JSON-lines file in the work folder) on every CUDA build; the wrapper then runs the
compile (the compile cache, nvcc) as its child instead of replacing itself with it, and:

* **admits** it: it starts only when its expected need fits in what is free (``memory.available``: the tightest of the
  cgroup's limit minus its use, v2 ``memory.max - memory.current`` or v1 ``memory.limit_in_bytes -
  memory.usage_in_bytes``, each less the reclaimable page cache ``inactive_file``, and ``MemAvailable``) less what
  the compiles already running have claimed but not yet taken. One compile at a time decides, under a lock file
  (``claims.LOCK``): waiting compiles queue there and never all start at once. A compile whose need alone exceeds
  what is free while nothing else runs starts anyway, with nvcc's ``--threads`` lowered to what fits (at least 1).
* **measures** it: wall time and peak memory of the whole process tree (nvcc, cudafe++, cicc, ptxas, the host
  compiler, a compile cache), from the kernel: the sum of ``VmRSS`` of every process of the tree read from
  ``/proc`` every ``processes.POLL`` seconds (the tree's processes run at the same time with ``--threads``; their sum is
  what the cgroup is charged), and the largest single process's ``ru_maxrss`` from ``getrusage(RUSAGE_CHILDREN)``
  at the end, which catches a short peak between two polls (``ru_maxrss`` alone is the maximum of single
  processes, never their sum, so it misses parallel threads). The peak is the larger of the two.
* **records** it: one line per compile in :data:`RECORD` (:func:`record_line`): the source relative to
  :data:`ROOT`, its kind (``device``: nvcc's; ``host``: the host compiler's, fronted by ci/nvcc/host_front.py),
  its architecture count, ``--threads``, the machine's CPU count, seconds, peak bytes, whether the
  compiler ran (``cicc``, ``ptxas`` or ``cc1plus`` seen: a compile-cache hit runs none) and the need it was
  admitted with.

The expected need (``need.expected``): the source's record from an earlier build (:data:`EXPECTED`, from the farm's
cache), scaled to the architectures this compile runs at once (``--threads``, whose ``0`` is the machine's CPU
count: ``need.parallel``); for a source never built, the largest per-architecture peak recorded for the project
(this build's record first, then the cache) times them; with no record at all, the compile runs alone (nothing else
admitted until one compile of the build is measured).

:data:`DEADLINE` (seconds since the epoch): a compile that would not finish before it by its record is not
started (:data:`AT_DEADLINE`, exit status :data:`STOPPED`), nor any after it: the running ones finish into the
compile cache. :data:`SWITCH` ``off``: measured and recorded, not admitted (the naive settings the memory tests
and the bench compare against). Standard library only (containers; on Windows only the time is measured): the
wrapper, run as ``python -I``, loads this package by its path.

The modules: ``memory`` (what a compile can get, from the kernel), ``processes`` (a compile's process tree, run
and measured), ``need`` (what a compile is expected to take, from the records), ``claims`` (the queue of compiles
waiting for memory); this face runs one compile through them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .claims import CLAIMS, Admitted, admit
from .need import DEVICE, Need, cpus, expected, load_expected, parallel, read_record, threads_of, with_threads
from .processes import measure, measure_plain

RECORD = "FARM_COMPILE_RECORD"
#: A JSON file: ``{"sources": {source: {"peak", "seconds", "archs", "threads", "cpus"}}}``.
EXPECTED = "FARM_COMPILE_EXPECTED"
ROOT = "FARM_COMPILE_ROOT"
DEADLINE = "FARM_DEADLINE"
#: The ``--threads`` the farm chose for this build's compiles (unset: the flags' own).
THREADS = "FARM_NVCC_THREADS"
SWITCH = "FARM_COMPILE_ADMISSION"
AT_DEADLINE = ("cuda-ext-farm {front}: at the deadline: {source} not started ({seconds:.0f} s expected, {left:.0f} s "
               "left)")
STOPPED = 4


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


def past_deadline(env: Mapping[str, str], need: Need, source: str, stop_file: Path, front: str = "nvcc") -> str:
    """The line refusing the compile at the deadline, or empty."""
    if not env.get(DEADLINE):
        return ""
    left = float(env[DEADLINE]) - time.time()
    seconds = need.seconds or 0.0
    if stop_file.exists() or seconds > left:
        stop_file.touch()
        return AT_DEADLINE.format(front=front, source=source, seconds=seconds, left=max(0.0, left))
    return ""


def run(command: Sequence[str], env: dict[str, str], source: str, archs: int, kind: str = DEVICE) -> int:
    """Admit, run and record one compile (``command``: the next command and its arguments): nvcc's (``kind``
    :data:`DEVICE`), or the host compiler's (``need.HOST``: one process, no ``--threads`` to set or lower)."""
    record = Path(env[RECORD])
    name = relative(source, env)
    threads, _ = threads_of(command) if kind == DEVICE else (1, None)
    if kind == DEVICE and env.get(THREADS, "").isdigit() and int(env[THREADS]) != threads:
        threads, command = int(env[THREADS]), with_threads(command, int(env[THREADS]))
    machine = cpus()
    known = load_expected(env.get(EXPECTED))
    need = expected(name, archs, threads, known, read_record(record), machine, kind)
    stop = record.with_name(record.name + ".stopped")
    front = "nvcc" if kind == DEVICE else "host compiler"
    refusal = past_deadline(env, need, name, stop, front)
    if refusal:
        print(refusal, file=sys.stderr, flush=True)
        return STOPPED
    if os.name == "nt":
        done, admitted = measure_plain(command, env), Admitted(None, 0.0)
    elif env.get(SWITCH, "").lower() == "off":
        done, admitted = measure(command, env), Admitted(None, 0.0)
    else:
        claims = record.with_name(record.name + CLAIMS)
        try:
            admitted = admit(claims, need, parallel(archs, threads, machine), name, os.getpid(),
                             lambda: expected(name, archs, threads, known, read_record(record), machine, kind))
        except KeyboardInterrupt:  # ninja's Ctrl-C reaches the compiles queued here: no traceback for each
            (claims / str(os.getpid())).unlink(missing_ok=True)
            return 130
        need = admitted.need or need
        if admitted.line:
            print(admitted.line, file=sys.stderr, flush=True)
        if admitted.threads is not None:
            threads, command = admitted.threads, with_threads(command, admitted.threads)
        refusal = past_deadline(env, need, name, stop, front) if admitted.waited > 1 else ""
        if refusal:
            (claims / str(os.getpid())).unlink(missing_ok=True)
            print(refusal, file=sys.stderr, flush=True)
            return STOPPED
        try:
            done = measure(command, env)
        finally:
            (claims / str(os.getpid())).unlink(missing_ok=True)
    record_line(record, {"source": name, "kind": kind, "archs": archs, "threads": threads, "cpus": machine,
                         "seconds": round(done.seconds, 3),
                         "peak": done.peak, "compiled": done.compiled, "rc": done.returncode, "need": need.bytes,
                         "how": need.how, "waited": round(admitted.waited, 3), "end": round(time.time(), 3)})
    return done.returncode if done.returncode >= 0 else 128 - done.returncode
