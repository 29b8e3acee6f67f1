"""The one place the farm starts a process.

* Every command is an argument list (never a shell string) and is logged first
  as a replayable shell line, with the environment variables that differ from
  the caller's; secrets in it are masked (``ci/log.py``), and so is what a child
  prints, where the farm echoes it and in the copy it keeps (``tee``). Every
  child's environment is registered first (:func:`ci.log.register_environ`): a
  secret the farm hands a child is masked wherever it shows up afterwards.
* Children run in a process group of their own, so that the farm can stop the
  whole tree (``python -m build`` -> ninja -> nvcc -> cicc) however it was
  signalled: a terminal's Ctrl-C reaches the foreground group only, a CI
  runner's cancel or ``kill`` reaches the farm's process only.
* :func:`install_signal_handlers` (called once by the command line) turns
  SIGINT/SIGTERM into: SIGTERM to every child group, the registered clean-ups
  (``docker rm -f`` of the containers the farm started), a bounded wait, SIGKILL
  for what is left, then :class:`~ci.errors.Interrupted` in the main thread, so
  ``finally`` blocks remove partial outputs and the process exits 130/143.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

from ci.errors import CommandFailed, FarmError, Interrupted, MissingRequirement
from ci.log import MASK, mask, register_environ, secret_name
from ci.log import log as logger

#: Seconds a child group gets between SIGTERM and SIGKILL.
GRACE_SECONDS = 10.0

_children: dict[int, subprocess.Popen[str]] = {}
_cleanups: list[Callable[[], None]] = []
_lock = threading.Lock()
_stopping: int | None = None


def format_command(cmd: Sequence[str | Path], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    """A replayable shell line: ``cd DIR && VAR=value ... cmd args``, its secrets masked: the value of a secret
    variable is ``***`` (and registered, so that the child's own echo of it is masked too), as is every
    registered secret and URL password in the rest."""
    parts: list[str] = []
    if cwd is not None:
        parts.append(f"cd {shlex.quote(str(cwd))} &&")
    if env:
        changed = {k: v for k, v in env.items() if os.environ.get(k) != v}
        register_environ(changed)
        parts.extend(f"{k}={MASK if secret_name(k) else shlex.quote(v)}"
                     for k, v in sorted(changed.items()))
    parts.append(shlex.join([str(c) for c in cmd]))
    return mask(" ".join(parts))


def log_command(cmd: Sequence[str | Path], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
    # The replayable line is printed as is: brackets in it (a Python snippet, a TOML table name) are not markup.
    logger.command(format_command(cmd, env, cwd))


# --- signals ---------------------------------------------------------------------------------


def install_signal_handlers() -> None:
    """Make SIGINT and SIGTERM stop every child tree, then raise Interrupted (main thread only)."""
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)


def _on_signal(signum: int, _frame: object) -> None:
    global _stopping
    if _stopping is not None:
        return  # already stopping; a second Ctrl-C must not abort the clean-up
    _stopping = signum
    logger.alert(f"{signal.Signals(signum).name}: stopping {logger.activity()} and its child processes")
    stop_everything()
    raise Interrupted(signum)


def stop_everything() -> None:
    """SIGTERM every child group, run the clean-ups, wait, SIGKILL what is left."""
    with _lock:
        children = list(_children.values())
        cleanups = list(reversed(_cleanups))
    for child in children:
        _signal_tree(child, hard=False)
    for cleanup in cleanups:
        with contextlib.suppress(Exception):
            cleanup()
    deadline = time.monotonic() + GRACE_SECONDS
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
    for child in children:
        # The leader may be gone while its group (ninja's nvcc) lives on.
        _signal_tree(child, hard=True)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=5)


def _signal_tree(child: subprocess.Popen[str], *, hard: bool) -> None:
    """SIGTERM (``hard``: SIGKILL) to the child's process group, or to the child alone when it shares ours."""
    if os.name == "nt":  # pragma: no cover - Windows hosts: taskkill /T walks the tree
        if child.poll() is None or hard:
            subprocess.run(["taskkill", "/T", *(["/F"] if hard else []), "/PID", str(child.pid)], capture_output=True)
        return
    signum = signal.SIGKILL if hard else signal.SIGTERM
    try:
        if getattr(child, "farm_own_group", False):
            os.killpg(child.pid, signum)
        elif child.poll() is None:
            child.send_signal(signum)
    except (ProcessLookupError, PermissionError):
        pass


@contextlib.contextmanager
def on_interrupt(cleanup: Callable[[], None]) -> Iterator[None]:
    """Run ``cleanup`` if the farm is interrupted while the block runs (``docker rm -f NAME``)."""
    with _lock:
        _cleanups.append(cleanup)
    try:
        yield
    finally:
        with _lock:
            _cleanups.remove(cleanup)


# --- running ---------------------------------------------------------------------------------


def path_with(*folders: str | Path) -> str:
    """A child's PATH: ``folders`` first, then this process's PATH."""
    return os.pathsep.join([*(str(f) for f in folders), os.environ.get("PATH", "")])


def child_environ(env: Mapping[str, str] | None, unset: Collection[str] = ()) -> dict[str, str] | None:
    """A child's environment: this process's, less ``unset``, plus ``env`` (None: inherit it unchanged)."""
    if env is None and not unset:
        return None
    return {**{k: v for k, v in os.environ.items() if k not in unset}, **(env or {})}


def spawn(
    cmd: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdout: int | IO[str] | None = None,
    stderr: int | None = None,
    stdin: int | None = None,
    foreground: bool = False,
    log: bool = True,
    unset: Collection[str] = (),
) -> subprocess.Popen[str]:
    """Start ``cmd`` (registered, so signals stop it). ``foreground`` keeps the terminal (interactive shells).
    ``env`` adds to this process's environment; ``unset`` names variables the child does not inherit."""
    args = [str(c) for c in cmd]
    environ = child_environ(env, unset)
    register_environ(os.environ if environ is None else environ)
    if log:
        log_command(args, env, cwd)
    kwargs: dict[str, object] = {}
    own_group = not foreground
    if own_group:
        if os.name == "nt":  # pragma: no cover
            kwargs["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP  # type: ignore[attr-defined]
        else:
            kwargs["start_new_session"] = True
    try:
        child: subprocess.Popen[str] = subprocess.Popen(  # type: ignore[misc]
            args, env=environ, cwd=cwd, text=True,
            stdout=stdout, stderr=stderr, stdin=stdin, errors="replace", **kwargs,  # type: ignore[call-overload]
        )
    except FileNotFoundError:
        raise MissingRequirement(
            "program not found", args[0], "install it or put it on PATH"
        ) from None
    except NotADirectoryError:
        raise MissingRequirement("working folder does not exist", cwd, "create it or pass another one") from None
    child.farm_own_group = own_group and os.name != "nt"  # type: ignore[attr-defined]
    with _lock:
        _children[child.pid] = child
    return child


def release(child: subprocess.Popen[str]) -> None:
    """The end of a child the farm started (spawn): SIGTERM to its group, a bounded wait, SIGKILL, unregistered."""
    if child.poll() is None:
        _signal_tree(child, hard=False)
        try:
            child.wait(timeout=GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            _signal_tree(child, hard=True)
            child.wait()
    elif getattr(child, "farm_own_group", False):
        # The leader exited; anything left in its group (a daemonised helper) goes too.
        _signal_tree(child, hard=True)
    with _lock:
        _children.pop(child.pid, None)


def run(
    cmd: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    capture: bool = False,
    check: bool = True,
    what: str = "",
    hint: str = "",
    foreground: bool = False,
    log: bool = True,
    input_text: str | None = None,
    unset: Collection[str] = (),
    tee: Path | None = None,
    hide: Callable[[str], bool] | None = None,
    stop_when: Callable[[str], FarmError | None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Log and run ``cmd``; raise :class:`CommandFailed` on a non-zero exit when ``check``.

    ``tee``: the child's stdout and stderr (merged) are written to this file and echoed to our stdout as they come
    (lines ``hide`` answers true for are not echoed): a file never fills up as a pipe does, so a compiler tree's
    own clean-up on an interrupt never stalls on us; the caller reads the file afterwards (``capture`` is ignored).
    ``stop_when`` (with ``tee``) sees each line as it comes: the first error it returns stops the child's whole
    tree at once and is raised (a build going the wrong way is not left to run for half an hour), and what the
    child prints after it is kept in ``tee`` but not echoed. ``unset``:
    variables the child does not inherit.
    """
    args = [str(c) for c in cmd]
    if tee is not None:
        return _run_teed(args, tee, hide, stop_when, env=env, unset=unset, cwd=cwd, check=check, what=what,
                         hint=hint, log=log)
    pipe = subprocess.PIPE if capture else None
    child = spawn(args, env=env, cwd=cwd, stdout=pipe, stderr=pipe,
                  stdin=subprocess.PIPE if input_text is not None else None, foreground=foreground, log=log,
                  unset=unset)
    try:
        out, err = child.communicate(input=input_text)
    finally:
        release(child)
    result = subprocess.CompletedProcess(args, child.returncode, out or "", err or "")
    if check and result.returncode != 0:
        if capture:
            logger.details((result.stdout + result.stderr).rstrip()[-6000:])
        raise failure(args, result.returncode, what, hint)
    return result


def _run_teed(args: list[str], tee: Path, hide: Callable[[str], bool] | None,
              stop_when: Callable[[str], FarmError | None] | None,
              *, env: Mapping[str, str] | None, unset: Collection[str] = (),
              cwd: Path | None, check: bool, what: str, hint: str, log: bool) -> subprocess.CompletedProcess[str]:
    done = threading.Event()
    stopped: list[FarmError] = []

    def stop(reason: FarmError | None) -> None:
        if reason is not None:
            stopped.append(reason)
            _signal_tree(child, hard=False)

    def follow() -> None:
        with raw.open(encoding="utf-8", errors="replace", newline="") as reader, \
                tee.open("w", encoding="utf-8", newline="") as kept:
            pending = ""
            while True:
                finished = done.is_set()  # read once more after the child ended: its last lines
                pending += reader.read()
                *lines, pending = pending.split("\n")
                for line in lines:
                    kept.write(mask(line) + "\n")
                    # Once stopped, what the dying build prints (its tool's traceback) is not echoed: the log has it.
                    if not stopped and (hide is None or not hide(line)):
                        sys.stdout.write(mask(line) + "\n")
                    if stop_when is not None and not stopped:
                        stop(stop_when(line))
                sys.stdout.flush()
                kept.flush()
                if finished:
                    if pending and not stopped and (hide is None or not hide(pending)):
                        sys.stdout.write(mask(pending) + "\n")
                    return
                done.wait(0.1)

    with _private_output(tee) as raw, raw.open("w", encoding="utf-8") as writer:
        child = spawn(args, env=env, unset=unset, cwd=cwd, stdout=writer, stderr=subprocess.STDOUT,
                      stdin=subprocess.DEVNULL, log=log)
        echo = threading.Thread(target=follow, name="farm-tee", daemon=True)
        echo.start()
        try:
            child.wait()
        finally:
            release(child)
            done.set()
            echo.join(timeout=5)
    if stopped:
        raise stopped[0]
    result = subprocess.CompletedProcess(args, child.returncode, "", "")
    if check and result.returncode != 0:
        raise failure(args, result.returncode, what, hint)
    return result


@contextlib.contextmanager
def _private_output(tee: Path) -> Iterator[Path]:
    """The file a teed child writes into: private (a folder of this user's only), its whole content masked into
    ``tee`` when the block ends (:func:`_keep_masked`), then removed. A file, not a pipe: it never fills up as a pipe
    does, so a compiler tree's own clean-up on an interrupt never stalls on us."""
    tee.parent.mkdir(parents=True, exist_ok=True)
    private = Path(tempfile.mkdtemp(prefix="farm-output-"))
    raw = private / "output.log"
    raw.touch(mode=0o600)
    try:
        yield raw
    finally:
        _keep_masked(raw, tee)
        shutil.rmtree(private, ignore_errors=True)


def _keep_masked(raw: Path, tee: Path) -> None:
    """``tee``: the whole of the child's output, masked (replaced at once: a follower that is still writing writes
    into the file it had)."""
    if not raw.is_file():
        return
    with raw.open(encoding="utf-8", errors="replace", newline="") as reader:
        text = reader.read()
    fd, tmp = tempfile.mkstemp(prefix=f".{tee.name}.", dir=tee.parent)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
        out.write(mask(text))
    os.replace(tmp, tee)


def stream(
    cmd: Sequence[str | Path],
    on_line: Callable[[str], None],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    what: str = "",
    hint: str = "",
    echo: bool = True,
) -> int:
    """Run ``cmd`` with stdout+stderr merged, echoing and handing each line to ``on_line``."""
    child = spawn(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if echo:
                sys.stdout.write(mask(line))
                sys.stdout.flush()
            on_line(line)
        code = child.wait()
    finally:
        release(child)
    if code != 0:
        raise failure([str(c) for c in cmd], code, what, hint)
    return code


def failure(cmd: Sequence[str], returncode: int, what: str = "", hint: str = "") -> CommandFailed:
    program = Path(cmd[0]).name if cmd else "?"
    if program.startswith("python") and len(cmd) > 2 and cmd[1] == "-m":
        program = f"python -m {cmd[2]}"
    return CommandFailed(
        what or f"`{program}` failed",
        f"exit status {returncode}",
        hint or "its output is above, and the command line logged before it can be run again by hand",
    )


def which(name: str) -> str | None:
    """``shutil.which`` that skips PATH entries the user cannot read."""
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder:
            continue
        path = Path(folder) / name
        try:
            if path.is_file() and os.access(path, os.X_OK):
                return str(path)
        except OSError:
            continue
    return None
