"""Visual Studio instances and their MSVC toolsets, found with ``vswhere``.

``vswhere -all -products * -prerelease -format json -utf8`` lists every
instance: ``-products *`` is what includes the Build Tools edition (vswhere
leaves it out by default), ``-prerelease`` the Preview/Insiders channels, ``-all``
incomplete installs (reported, never used). An instance may lack the C++ tools
altogether (a .NET-only Visual Studio); the toolsets an instance has are the
folders ``VC\\Tools\\MSVC\\14.xx.yyyyy`` that hold ``bin\\Hostx64\\x64\\cl.exe``:
what ``vcvarsall.bat -vcvars_ver=14.xx`` itself looks for. VS 2026 installs
under ``Microsoft Visual Studio\\18\\<edition>``, not ``...\\2026\\...``, so the
product is read from ``installationVersion``, never from the path.

Parsing and listing are pure (the file system is passed in); :func:`discover`
is the thin layer that runs vswhere and looks at the disk.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PureWindowsPath

from ci import proc, settings
from ci.errors import MissingRequirement, UsageError

#: Visual Studio major version -> product year (VS 2026 is 18.x).
PRODUCT_YEARS = {15: "2017", 16: "2019", 17: "2022", 18: "2026"}
VSWHERE_DEFAULT = r"Microsoft Visual Studio\Installer\vswhere.exe"
_TOOLSET_DIR = re.compile(r"14\.\d+\.\d+")


@dataclasses.dataclass(frozen=True)
class VsInstance:
    """One Visual Studio (or Build Tools) installation, as vswhere reports it."""

    instance_id: str
    path: str
    version: str
    product_id: str
    display_name: str
    prerelease: bool = False
    complete: bool = True

    @property
    def version_key(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split(".") if p.isdigit())

    @property
    def year(self) -> str:
        return PRODUCT_YEARS.get(self.version_key[0], f"v{self.version_key[0]}") if self.version_key else "?"

    @property
    def build_tools(self) -> bool:
        return self.product_id.endswith(".BuildTools")

    @property
    def label(self) -> str:
        return f"{self.display_name} {self.version}" + (" (prerelease)" if self.prerelease else "")

    @property
    def vcvarsall(self) -> PureWindowsPath:
        return PureWindowsPath(self.path, "VC", "Auxiliary", "Build", "vcvarsall.bat")

    @property
    def msvc_root(self) -> PureWindowsPath:
        return PureWindowsPath(self.path, "VC", "Tools", "MSVC")


@dataclasses.dataclass(frozen=True)
class InstalledToolset:
    """An MSVC toolset folder (``14.44.35207``) of an instance."""

    instance: VsInstance
    version: str

    @property
    def cl(self) -> PureWindowsPath:
        return self.instance.msvc_root / self.version / "bin" / "Hostx64" / "x64" / "cl.exe"


@dataclasses.dataclass(frozen=True)
class Discovery:
    instances: tuple[VsInstance, ...]
    toolsets: tuple[InstalledToolset, ...]
    #: Instances that cannot build, with the reason (shown when no toolset fits).
    skipped: tuple[str, ...]


def vswhere_command(vswhere: str) -> list[str]:
    return [vswhere, "-all", "-products", "*", "-prerelease", "-format", "json", "-utf8"]


def _flag(value: object) -> bool:
    # vswhere writes JSON booleans; older versions wrote "1"/"0" strings for some properties.
    return value is True or (isinstance(value, str) and value.strip().lower() in ("1", "true"))


def parse_vswhere(text: str) -> tuple[VsInstance, ...]:
    """The instances of ``vswhere -format json`` output."""
    try:
        data = json.loads(text.lstrip("\ufeff") or "[]")
    except json.JSONDecodeError as exc:
        raise UsageError("vswhere printed something that is not JSON", f"{exc.msg} at {exc.pos}",
                         "run the vswhere command logged above by hand; repair the Visual Studio Installer") from None
    if not isinstance(data, list):
        raise UsageError("vswhere's JSON is not a list of instances", type(data).__name__, "update vswhere")
    instances = []
    for item in data:
        if not isinstance(item, dict) or not item.get("installationPath"):
            continue
        catalog = item.get("catalog")
        catalog = catalog if isinstance(catalog, dict) else {}
        prerelease = _flag(item.get("isPrerelease")) or _flag(catalog.get("productMilestoneIsPreRelease"))
        instances.append(VsInstance(
            instance_id=str(item.get("instanceId", "")),
            path=str(item["installationPath"]),
            version=str(item.get("installationVersion", "")),
            product_id=str(item.get("productId", "")),
            display_name=str(item.get("displayName") or item.get("installationName") or item["installationPath"]),
            prerelease=prerelease,
            complete=item.get("isComplete", True) is not False,
        ))
    return tuple(instances)


def toolsets_of(instance: VsInstance, listdir: Callable[[str], Sequence[str]],
                is_file: Callable[[str], bool]) -> tuple[tuple[InstalledToolset, ...], str | None]:
    """The usable toolsets of ``instance`` (newest first), or the reason it has none."""
    if not instance.complete:
        return (), "its installation is incomplete (finish or repair it in the Visual Studio Installer)"
    if not is_file(str(instance.vcvarsall)):
        return (), "no C++ build tools (VC\\Auxiliary\\Build\\vcvarsall.bat is missing)"
    try:
        names = listdir(str(instance.msvc_root))
    except OSError:
        names = []
    found = [InstalledToolset(instance, n) for n in names if _TOOLSET_DIR.fullmatch(n)]
    usable = [t for t in found if is_file(str(t.cl))]
    if not usable:
        return (), "no MSVC toolset with an x64 compiler (VC\\Tools\\MSVC\\*\\bin\\Hostx64\\x64\\cl.exe)"
    usable.sort(key=lambda t: tuple(int(p) for p in t.version.split(".")), reverse=True)
    return tuple(usable), None


def installed_toolsets(instances: Sequence[VsInstance], listdir: Callable[[str], Sequence[str]],
                       is_file: Callable[[str], bool]) -> Discovery:
    toolsets: list[InstalledToolset] = []
    skipped: list[str] = []
    for instance in instances:
        found, reason = toolsets_of(instance, listdir, is_file)
        toolsets.extend(found)
        if reason:
            skipped.append(f"{instance.label} ({instance.path}): {reason}")
    return Discovery(tuple(instances), tuple(toolsets), tuple(skipped))


def find_vswhere(env: Mapping[str, str] | None = None) -> str | None:
    """``FARM_VSWHERE``, the Visual Studio Installer's own copy, or one on PATH (choco's)."""
    env = settings.current().environ if env is None else env
    if env.get("FARM_VSWHERE", "").strip():
        return env["FARM_VSWHERE"].strip()
    base = env.get("ProgramFiles(x86)") or env.get("PROGRAMFILES(X86)") or r"C:\Program Files (x86)"
    default = Path(base) / VSWHERE_DEFAULT
    if default.is_file():
        return str(default)
    return proc.which("vswhere.exe") or proc.which("vswhere")


NO_VISUAL_STUDIO_FIX = (
    "install Visual Studio Build Tools (https://aka.ms/vs/17/release/vs_BuildTools.exe) with the workload "
    "Microsoft.VisualStudio.Workload.VCTools, components Microsoft.VisualStudio.Component.VC.14.44.17.14.x86.x64 "
    "and Microsoft.VisualStudio.Component.Windows11SDK.26100 (windows/README.md)"
)


def discover() -> Discovery:  # pragma: no cover - runs vswhere on a Windows host
    vswhere = find_vswhere()
    if vswhere is None:
        raise MissingRequirement("vswhere.exe was not found (it comes with the Visual Studio Installer)",
                                 VSWHERE_DEFAULT, NO_VISUAL_STUDIO_FIX)
    out = proc.run(vswhere_command(vswhere), capture=True, what="vswhere failed",
                   hint="repair the Visual Studio Installer, or point FARM_VSWHERE at a working vswhere.exe")
    instances = parse_vswhere(out.stdout)
    if not instances:
        raise MissingRequirement("vswhere found no Visual Studio installation", vswhere, NO_VISUAL_STUDIO_FIX)
    return installed_toolsets(instances, os.listdir, os.path.isfile)
