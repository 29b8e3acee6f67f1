"""Activating an MSVC toolset: run ``vcvarsall.bat x64 -vcvars_ver=14.xx`` once, keep what it set.

The compiler works only inside the environment ``vcvarsall.bat`` makes
(``PATH``, ``INCLUDE``, ``LIB``, ``LIBPATH``, ``VCToolsInstallDir``,
``VSCMD_ARG_TGT_ARCH`` ...), and that environment dies with the ``cmd.exe`` it
ran in; cibuildwheel's ``before-build`` runs in a throw-away ``cmd.exe`` too.
So the farm captures it once per (instance, toolset, architecture) and passes
it to every process it starts:

* a small script runs ``cmd.exe /d /u /c``: ``/d`` skips AutoRun commands from
  the registry, ``/u`` makes ``set`` write UTF-16 (a user name or a PATH entry
  outside the ANSI code page survives). vcvarsall's output goes to a log file,
  ``set`` to an environment file;
* a line ``[ERROR:...]`` in the log is a failure even when the exit status is 0
  (vcvarsall reports a missing ``-vcvars_ver`` toolset that way);
* only the difference to the environment it started from is kept: variables
  vcvarsall set or changed, and the PATH entries it prepended. That is cached
  (JSON) and re-applied over the current environment later, so the cache does
  not depend on the caller's PATH; PATH is de-duplicated (case-insensitively,
  as Windows compares it);
* ``cmd.exe`` lines are limited to 8191 characters and vcvarsall's own
  ``set PATH=...`` lines expand the whole PATH: a long PATH makes it fail with
  "The input line is too long". The PATH it starts from is de-duplicated and
  stripped of folders that do not exist, and refused up front when still too long.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PureWindowsPath

from ci import fsutil, proc, toolenv
from ci.errors import CommandFailed, UsageError
from ci.log import log
from windows.vswhere import InstalledToolset

#: cmd.exe's longest command line (after %VAR% expansion).
CMD_LINE_LIMIT = 8191
#: About what vcvarsall.bat adds to PATH (VS 2022/2026 with a Windows SDK: 1.5-2K characters).
VCVARS_PATH_RESERVE = 2500
#: Variables that are list-valued (``;``-separated) and de-duplicated when applied.
LIST_VARIABLES = ("PATH", "INCLUDE", "LIB", "LIBPATH", "EXTERNAL_INCLUDE")
#: Bumped when the cached format or what is kept changes.
CACHE_FORMAT = 1
_IGNORED = {"PROMPT", "VSCMD_SKIP_SENDTELEMETRY"}


@dataclasses.dataclass(frozen=True)
class VcvarsEnv:
    """What ``vcvarsall.bat`` changed: variables (upper-case names) and the PATH entries it prepended."""

    instance_id: str
    toolset: str
    arch: str
    variables: Mapping[str, str]
    path_prepend: tuple[str, ...]

    def apply(self, base: Mapping[str, str]) -> dict[str, str]:
        return apply(self.variables, self.path_prepend, base)

    @property
    def tools_version(self) -> str:
        return self.variables.get("VCTOOLSVERSION", "")

    def to_json(self) -> dict[str, object]:
        return {"format": CACHE_FORMAT, "instance_id": self.instance_id, "toolset": self.toolset, "arch": self.arch,
                "variables": dict(sorted(self.variables.items())), "path_prepend": list(self.path_prepend)}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> VcvarsEnv | None:
        variables, prepend = data.get("variables"), data.get("path_prepend")
        if data.get("format") != CACHE_FORMAT or not isinstance(variables, dict) or not isinstance(prepend, list):
            return None
        return cls(str(data.get("instance_id", "")), str(data.get("toolset", "")), str(data.get("arch", "")),
                   {str(k): str(v) for k, v in variables.items()}, tuple(str(p) for p in prepend))


# --- the script and its output (pure) --------------------------------------------------------


def vcvarsall_arguments(arch: str, toolset: str | None) -> list[str]:
    return [arch, *([f"-vcvars_ver={toolset}"] if toolset else [])]


def capture_script(arguments: list[str]) -> str:
    """The batch file that runs vcvarsall and dumps the resulting environment (ASCII, CRLF line ends).

    The paths come in as environment variables: cmd.exe reads a batch file in the console's code page, but
    expands variables in UTF-16, so a user folder named outside that code page still works.
    """
    for value in arguments:
        if not re.fullmatch(r"[A-Za-z0-9_.=-]+", value):
            raise UsageError("not a vcvarsall.bat argument", value, "use an architecture (x64) and -vcvars_ver=14.xx")
    lines = [
        "@echo off",
        f'call "%FARM_VCVARSALL%" {" ".join(arguments)} > "%FARM_VCVARS_LOG%" 2>&1',
        "set FARM_VCVARS_EXIT=%ERRORLEVEL%",
        'set > "%FARM_VCVARS_ENV%"',
        "exit /b %FARM_VCVARS_EXIT%",
    ]
    return "\r\n".join(lines) + "\r\n"


def capture_variables(vcvarsall: str, env_file: str, log_file: str) -> dict[str, str]:
    """What the capture script reads its paths from (never part of the captured result)."""
    return {"FARM_VCVARSALL": vcvarsall, "FARM_VCVARS_ENV": env_file, "FARM_VCVARS_LOG": log_file}


def capture_command(script: str) -> list[str]:
    return ["cmd.exe", "/d", "/u", "/c", script]


def decode_set_output(data: bytes) -> str:
    """``set`` under ``cmd /u``: UTF-16-LE, with or without a byte-order mark."""
    if data.startswith(b"\xff\xfe"):
        data = data[2:]
    elif not _looks_utf16(data):
        return data.decode("utf-8", errors="replace")
    return data[: len(data) - len(data) % 2].decode("utf-16-le", errors="replace")


def decode_log(data: bytes) -> str:
    """vcvarsall's output: UTF-16 from cmd's own ``echo``, single-byte from the programs it runs, mixed."""
    if data.startswith(b"\xff\xfe"):
        data = data[2:]
    # Dropping NULs turns the UTF-16 parts (ASCII text) into plain bytes without breaking the single-byte parts.
    return data.replace(b"\x00", b"").decode("utf-8", errors="replace")


def _looks_utf16(data: bytes) -> bool:
    odd = data[1::2]
    return bool(odd) and odd.count(0) >= 0.3 * len(odd)


def parse_set(text: str) -> dict[str, str]:
    """``NAME=value`` lines; names upper-cased (Windows compares them case-insensitively), ``=C:`` entries skipped."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name and not name.startswith("="):
            env[name.upper()] = value
    return env


def errors_in(log: str) -> list[str]:
    return [line.strip() for line in log.splitlines() if "[ERROR" in line]


def split_list(value: str) -> list[str]:
    return [part.strip().strip('"') for part in value.split(";") if part.strip().strip('"')]


def _norm(entry: str) -> str:
    return str(PureWindowsPath(entry)).rstrip("\\/").casefold()


def dedupe(entries: Iterable[str]) -> list[str]:
    """First occurrence wins; ``C:\\X``, ``c:\\x\\`` and ``C:/X`` are one entry."""
    seen: set[str] = set()
    kept = []
    for entry in entries:
        key = _norm(entry)
        if key and key not in seen:
            seen.add(key)
            kept.append(entry)
    return kept


def upper_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k.upper(): v for k, v in env.items()}


def diff(before: Mapping[str, str], after: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """What vcvarsall changed: variables other than PATH (internal ``__VSCMD_*`` ones dropped) and new PATH entries."""
    old, new = upper_env(before), upper_env(after)
    variables = {k: v for k, v in new.items() if k != "PATH" and not k.startswith(("__", "FARM_VCVARS"))
                 and k not in _IGNORED and old.get(k) != v}
    known = {_norm(e) for e in split_list(old.get("PATH", ""))}
    prepend = tuple(e for e in dedupe(split_list(new.get("PATH", ""))) if _norm(e) not in known)
    return variables, prepend


def apply(variables: Mapping[str, str], path_prepend: Iterable[str], base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with vcvarsall's changes: its variables set, its PATH entries in front, list variables de-duplicated."""
    env = upper_env(base)
    env.update(variables)
    env["PATH"] = ";".join(dedupe([*path_prepend, *split_list(env.get("PATH", ""))]))
    for name in LIST_VARIABLES[1:]:
        if name in env:
            env[name] = ";".join(dedupe(split_list(env[name]))) + (";" if env[name].endswith(";") else "")
    return env


def start_path(value: str, exists: Callable[[str], bool]) -> str:
    """The PATH vcvarsall starts from: de-duplicated, without folders that do not exist."""
    return ";".join(e for e in dedupe(split_list(value)) if exists(e))


def check_start_path(value: str) -> None:
    if len(value) + VCVARS_PATH_RESERVE > CMD_LINE_LIMIT:
        raise UsageError(
            "PATH is too long for vcvarsall.bat", f"{len(value)} characters without duplicates and missing folders",
            f"cmd.exe lines hold {CMD_LINE_LIMIT} characters and vcvarsall.bat adds about {VCVARS_PATH_RESERVE} to "
            "PATH: remove entries from the user or system PATH (System Properties > Environment Variables)",
        )


def explain_failure(errors: list[str], log: str, toolset: str | None) -> tuple[str, str]:
    """(what went wrong, how to fix it) for a failed vcvarsall run."""
    text = "\n".join(errors) or log
    if "input line is too long" in log.lower():
        return ("vcvarsall.bat hit cmd.exe's 8191-character line limit",
                "shorten PATH (and INCLUDE/LIB if set): remove entries from the user or system environment")
    if toolset and ("toolset" in text.lower() or "vcvars_ver" in text.lower()):
        from windows import msvc

        return (f"vcvarsall.bat does not know the MSVC toolset {toolset}",
                msvc.install_hint(msvc.Toolset.parse(toolset)))
    return ("vcvarsall.bat failed", "its output is above; repair the installation in the Visual Studio Installer")


def check_activated(env: VcvarsEnv, toolset: str) -> None:
    """vcvarsall must have activated the toolset asked for (``VCToolsVersion``) for x64."""
    got = env.tools_version
    if not got.startswith(toolset):
        raise CommandFailed("vcvarsall.bat activated another MSVC toolset", got or "no VCToolsVersion",
                            f"expected {toolset}: repair the toolset in the Visual Studio Installer")
    target = env.variables.get("VSCMD_ARG_TGT_ARCH", "")
    if target.lower() != env.arch.lower():
        raise CommandFailed("vcvarsall.bat did not set up an x64 compiler", f"VSCMD_ARG_TGT_ARCH={target or 'unset'}",
                            "repair the C++ x64/x86 build tools in the Visual Studio Installer")


# --- cache and the thin running layer ------------------------------------------------------------


def cache_file(root: Path, installed: InstalledToolset, arch: str) -> Path:
    instance = installed.instance
    key = hashlib.sha256(json.dumps([CACHE_FORMAT, instance.instance_id, instance.version, instance.path,
                                     installed.version, arch]).encode()).hexdigest()[:12]
    return root / "msvc" / f"vcvars-{instance.instance_id or 'vs'}-{installed.version}-{arch}-{key}.json"


def load_cached(path: Path, cl_exists: Callable[[str], bool]) -> VcvarsEnv | None:
    """A cached activation, if it is sound and its compiler is still there."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    env = VcvarsEnv.from_json(data) if isinstance(data, dict) else None
    if env is None:
        return None
    tools = env.variables.get("VCTOOLSINSTALLDIR", "")
    return env if tools and cl_exists(str(PureWindowsPath(tools, "bin", "Hostx64", env.arch, "cl.exe"))) else None


def activate(installed: InstalledToolset, arch: str = "x64", *,
             refresh: bool = False) -> VcvarsEnv:  # pragma: no cover - runs cmd.exe on a Windows host
    """The environment of ``vcvarsall.bat ARCH -vcvars_ver=TOOLSET`` for ``installed`` (cached)."""
    path = cache_file(toolenv.cache_root(), installed, arch)
    if not refresh:
        cached = load_cached(path, os.path.isfile)
        if cached is not None:
            log.reuse(f"the MSVC {installed.version} environment ({path})")
            return cached
    base = dict(os.environ)
    short = start_path(base.get("PATH", ""), os.path.isdir)
    check_start_path(short)
    base_env = {"PATH": short, "VSCMD_SKIP_SENDTELEMETRY": "1"}
    args = vcvarsall_arguments(arch, installed.version)
    with tempfile.TemporaryDirectory(prefix="farm-vcvars-") as tmp:
        env_file, log_file, script = Path(tmp, "env.txt"), Path(tmp, "vcvarsall.log"), Path(tmp, "capture.cmd")
        script.write_bytes(capture_script(args).encode("ascii"))
        paths = capture_variables(str(installed.instance.vcvarsall), str(env_file), str(log_file))
        result = proc.run(capture_command(str(script)), env={**base_env, **paths}, capture=True, check=False)
        vc_log = decode_log(log_file.read_bytes()) if log_file.is_file() else ""
        errors = errors_in(vc_log)
        if result.returncode != 0 or errors or not env_file.is_file():
            what, fix = explain_failure(errors, vc_log, installed.version)
            raise CommandFailed(what, errors[0] if errors else f"exit status {result.returncode}", fix,
                                details="vcvarsall.bat " + " ".join(args) + ":\n" + vc_log.strip()[-4000:])
        after = parse_set(decode_set_output(env_file.read_bytes()))
    variables, prepend = diff({**base, **base_env}, after)
    env = VcvarsEnv(installed.instance.instance_id, installed.version, arch, variables, prepend)
    check_activated(env, installed.version)
    fsutil.atomic_write_json(path, env.to_json())
    return env
