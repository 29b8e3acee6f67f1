"""Files the farm writes: atomically (write beside, then rename), under locks, in folders it checked.

* :func:`atomic_write_text` / :func:`publish_file`: a reader sees the old file or
  the new one, never half of one; :func:`publish_file` also works across file
  systems (a wheelhouse on another disk), where ``os.replace`` cannot. A file
  written gets the mode the umask gives (0644 under umask 022), as ``open()``'s
  would: ``tempfile.mkstemp`` makes its file 0600 whatever the umask, and the
  rename would keep that (a rendered workflow a git checkout then commits 0600).
* :func:`locked`: two builds of one target (or two installs of one toolkit) are
  serialised; the second says what it is waiting for.
* :func:`writable_dir`: a folder the farm must write to is checked up front, and
  the message names the option and variable that move it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from ci.errors import MissingRequirement
from ci.log import log


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def _temporary(beside: Path) -> tuple[int, Path]:
    """A new file beside ``beside`` (same folder, so a rename replaces it atomically), open for writing, made with
    mode 0666 less the umask. The kernel applies the umask, so the farm never reads it: ``os.umask`` can only be
    read by setting it, which would race with another thread's files."""
    while True:
        tmp = beside.parent / f".{beside.name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:
            continue


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _temporary(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_json(path: Path, data: object) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def publish_file(src: Path, dest: Path) -> Path:
    """Move ``src`` to ``dest`` atomically, also when they are on different file systems."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(src, dest)
        return dest
    except OSError as exc:
        if exc.errno != 18:  # EXDEV: cross-device link
            raise
    fd, tmp = _temporary(dest)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        shutil.copymode(src, tmp)  # as os.replace would keep it
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    src.unlink()
    return dest


def writable_dir(path: Path, what: str, option: str, variable: str) -> Path:
    """Create ``path`` if needed and prove it writable, or say how to point it elsewhere."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".farm-write-probe-", delete=True)
        probe.close()
    except OSError as exc:
        raise MissingRequirement(
            f"the {what} is not writable", path,
            f"{exc.strerror}; point it at a writable folder with {option} DIR or {variable}=DIR",
        ) from None
    return path


@contextlib.contextmanager
def locked(lock_path: Path, what: str, *, poll_message_after: float = 0.0) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path``; say what we wait for when someone else holds it."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_path))
    owner = lock_path.with_name(lock_path.name + ".owner")
    try:
        lock.acquire(timeout=poll_message_after)
    except Timeout:
        holder = owner.read_text().strip() if owner.exists() else "another process"
        log.note("waiting", f"for the lock on {what} ({lock_path}), held by {holder}")
        started = time.monotonic()
        lock.acquire()
        log.note("got", f"the lock on {what} after {time.monotonic() - started:.1f} s", style="green")
    try:
        with contextlib.suppress(OSError):
            owner.write_text(f"pid {os.getpid()} ({what})\n")
        yield
    finally:
        with contextlib.suppress(OSError):
            owner.unlink()
        lock.release()


def stale_staging(root: Path) -> list[Path]:
    """Staging folders of builds whose process is gone (named ``*-pid<N>``)."""
    stale: list[Path] = []
    if not root.is_dir():
        return stale
    for entry in root.iterdir():
        _, _, pid = entry.name.rpartition("-pid")
        if pid.isdigit() and not _alive(int(pid)):
            stale.append(entry)
    return stale


def _alive(pid: int) -> bool:
    if os.name == "nt":  # pragma: no cover - os.kill(pid, 0) would TerminateProcess it on Windows
        import ctypes

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            # Access denied: the process exists.
            return bool(ctypes.get_last_error() == 5)  # type: ignore[attr-defined]
        try:
            code = ctypes.c_ulong()
            kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
            return code.value == 259  # STILL_ACTIVE
        finally:
            kernel32.CloseHandle(handle)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
