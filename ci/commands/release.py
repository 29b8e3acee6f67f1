"""The release: every Linux target built, audited and import-tested, per-variant PEP 503 indexes, SHA256SUMS
and a manifest in one folder (``nox -s release -- --dry-run`` does what the release workflow does for the Linux
targets, uploading nothing).

The release folder (``--out``, default ``<build>/release``)::

    assets/                 what the GitHub Release gets: every wheel, the sdist, release-manifest.json, SHA256SUMS
    pypi/                   what PyPI gets: the sdist and the PyPI variant's wheels without a local version
    index/<variant>/<project>/index.html
                            one PEP 503 index per CUDA variant, linking ../../../assets/ (so the folder installs
                            as it is: pip install --index-url file://…/index/cu124 <project>)

Which wheels go where (one rule, for every project the farm serves):

* the *PyPI variant* is the release cell of the newest CUDA major (``targets.default_target``); its wheels go to
  PyPI when their version has no local label (PyPI refuses ``+…``), with the sdist;
* every wheel of every variant goes to the GitHub Release and to its variant's index, so
  ``pip install <project> --extra-index-url <site>/cu124`` finds the cu124 build the way PyTorch's indexes work:
  a variant's local label (``+cu124``, ``+pt2.11.cu130``) sorts above the plain PyPI version;
* two different files may not share a name: a GitHub Release is one flat folder, and pip cannot tell two
  same-named files apart. Wheels of different variants must differ in their local label.

Modes: ``--dry-run`` (the whole pipeline for the Linux targets, here), ``--assemble ARTIFACTS`` (the release
workflow's assemble job: the downloaded build artifacts of every OS -> the same folder), ``--import-test WHEEL``
(the workflow's import-test jobs), ``--sdist DIR``, ``--site DIR`` (the GitHub Pages index of every release, from
the releases' manifests).

The argument hook is standard library only (``ci/cli.py`` imports it before any environment exists); the
commands import the rest when they run:

* ``ci/release/plan.py``: the built wheels a release takes and which file goes where (PyPI, variant indexes);
* ``ci/release/manifest.py``: the release's records: ``ReleaseFile``, the manifest, SHA256SUMS, the indexes' links;
* ``ci/release/assembly.py``: the release folder, written and checked;
* ``ci/release/install_checks.py``: pip's view of the indexes and the import tests, in clean environments;
* ``ci/release/sdist.py``: the sdist.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ci import settings
from ci.errors import UsageError
from ci.universe.matrix import PYTORCH_INDEX
from ci.universe.selection import select

if TYPE_CHECKING:
    from ci.release.manifest import Manifest
    from ci.universe.project import ProjectConfig
    from ci.universe.targets import Target


def add_arguments(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="build, audit and import-test every Linux target here; write the release folder "
                           "(indexes, SHA256SUMS, manifest) and check that the indexes install; upload nothing")
    mode.add_argument("--assemble", metavar="ARTIFACTS",
                      help="the release workflow's assemble step: the built wheels under ARTIFACTS "
                           "(<target-id>/ or wheel-<target-id>/ folders with report.json) and the sdist -> --out")
    mode.add_argument("--import-test", metavar="WHEEL",
                      help="install WHEEL (or the one wheel in a folder) into a new environment with a torch of "
                           "--torch-kind and run the project's smoke command")
    mode.add_argument("--sdist", metavar="DIR", help="build the project's sdist into DIR (without the CUDA torch; "
                      "--torch-index: where a CPU torch comes from when setup.py imports torch) and check it")
    mode.add_argument("--wheel-from-sdist", metavar="DIR",
                      help="build the release target's wheel from the sdist in DIR alone, audited (into --out, "
                           "default sdist-wheel): the proof that the sdist builds")
    mode.add_argument("--site", metavar="DIR",
                      help="write the per-variant indexes of every release in --manifests into DIR, linking "
                           "the GitHub Release downloads under --base-url")
    parser.add_argument("--out", help="the release folder (default: <build>/release); replaced")
    parser.add_argument("--tag", help="the release tag; must be v<version> of the wheels")
    parser.add_argument("--sdist-dir", help="--assemble: the folder holding the sdist")
    parser.add_argument("--manifests", help="--site: a folder holding the releases' release-manifest.json files")
    parser.add_argument("--base-url", help="--site: the releases' download URL "
                        "(https://github.com/OWNER/REPO/releases/download)")
    parser.add_argument("--base-image", help="--dry-run: base image of the container builds (default: "
                        "FARM_BASE_IMAGE or the cell's)")
    parser.add_argument("--reuse-wheels", action="store_true",
                        help="--dry-run: do not rebuild a target whose audited wheel and report are in the wheelhouse")
    parser.add_argument("--no-audit", action="store_true",
                        help="--assemble: trust the build reports instead of auditing the Linux wheels again")
    parser.add_argument("--torch-kind", choices=("cuda", "cpu"), default="cuda",
                        help="--import-test: the CUDA torch of the target's cell, or a CPU-only torch")
    parser.add_argument("--torch-index", help="--import-test: the index torch comes from (default: pip's own, "
                        f"e.g. {PYTORCH_INDEX}/cpu)")
    parser.add_argument("--test-python", metavar="VERSION",
                        help="--import-test: the CPython of the test environment (default: the target's oldest; "
                             "FARM_PYTHON_3_10 and the like name an interpreter); the farm itself runs on its own")
    parser.add_argument("--cpu-test-python", metavar="VERSION",
                        help="--dry-run: the CPython of the CPU-only import tests where the --cpu-torch here has no "
                             "wheel for the target's (the workflow uses the target's; recorded in the check)")
    parser.add_argument("--cpu-torch", help="the CPU torch release of the CPU-only import test, used when it fits "
                        "the wheel (stable-ABI: at or above its floor; classic: its own torch minor) and pip can see "
                        "its +cpu build; otherwise the wheel's own CPU build if the index has it, else PyPI's build "
                        "of its torch imported with no GPU (recorded in the manifest)")


def cmd_release(args: argparse.Namespace) -> int:
    if args.import_test:
        return _cmd_import_test(args)
    if args.sdist:
        return _cmd_sdist(args)
    if args.wheel_from_sdist:
        return _cmd_wheel_from_sdist(args)
    if args.site:
        return _cmd_site(args)
    if args.assemble:
        return _cmd_assemble(args)
    if args.dry_run:
        return _cmd_dry_run(args)
    raise UsageError("no release mode given", "python -m ci release",
                     "pass --dry-run (here), or --assemble/--import-test/--sdist/--site (the release workflow)")


# --- commands --------------------------------------------------------------------------------------------


def _git_commit(root: Path) -> str | None:
    from ci import proc

    head = proc.run(["git", "-C", root, "rev-parse", "HEAD"], capture=True, check=False, log=False)
    if head.returncode != 0:
        return None
    dirty = proc.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"], capture=True,
                     check=False, log=False)
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _default_out(args: argparse.Namespace, config: ProjectConfig) -> Path:
    from ci.build import tail

    outputs = tail.Outputs.resolve(config.root, getattr(args, "wheelhouse", None), getattr(args, "build_dir", None))
    return settings.path_option(args.out, "FARM_RELEASE_DIR", outputs.build_root / "release")


def _print_summary(manifest: Manifest, out: Path, seconds: float | None = None) -> None:
    from rich.table import Table

    from ci import proc

    table = Table(title=f"{manifest.project} {manifest.version}: {out}")
    for col in ("file", "size", "sha256", "variant", "PyPI", "checks"):
        table.add_column(col, overflow="fold")
    for item in manifest.files:
        checks = ", ".join(f"{k} {v.split(':')[0]}" for k, v in item.checks) or "-"
        table.add_row(item.name, f"{item.size / 2**20:.2f} MiB", item.sha256[:16], item.variant or "-",
                      "yes" if item.pypi else "no", checks)
    proc.console.print(table)
    proc.console.print(f"variants: {', '.join(sorted(manifest.variants()))}; indexes under {out / 'index'}; "
                       f"PyPI gets {sum(f.pypi for f in manifest.files)} files ({out / 'pypi'})"
                       + (f"; {seconds:.0f} s" if seconds is not None else ""))


def _cmd_dry_run(args: argparse.Namespace) -> int:
    from ci import options, proc
    from ci.audit import wheel_audit
    from ci.build import tail
    from ci.linux import buildall, images
    from ci.release import rehearsal
    from ci.release.assembly import prepare_out, verify_release, write_release
    from ci.release.install_checks import check_extra_index, check_index_install
    from ci.release.install_lines import check_install_lines
    from ci.release.manifest import write_manifest
    from ci.release.plan import find_built, plan, verify_built
    from ci.release.sdist import build_sdist, build_wheel_from_sdist
    from ci.toolchain import envs, toolkit
    from ci.universe import targets

    started = time.monotonic()
    config = options.load_project(args)
    sel = options.selection(args)
    chosen = select(config, sel, "linux") if not sel.empty else targets.platform_targets(config, "linux")
    chosen = buildall.local_equivalents(chosen, proc.console)  # cu128 -> its stand-in cu124 without NVIDIA's repo
    outputs = tail.Outputs.resolve(config.root, args.wheelhouse, args.build_dir)
    out = _default_out(args, config)
    proc.console.print(f"[bold]release dry run[/] of {config.name}: {len(chosen)} Linux targets -> {out}")
    # Preflight: what the build needs, before hours of compiling.
    images.require_engine()
    outputs.check_writable()
    for python in sorted({t.python for t in chosen if not t.cross}):
        envs.find_interpreter(python)  # the import tests run on the target's own CPython, as in the workflow
    emulated = [t for t in chosen if t.cross]
    if emulated:  # aarch64: a cross compiler and qemu-user, checked before anything is built
        from ci.linux import cross, qemu

        cross.find_compiler()
        qemu.find_qemu()
    proc.console.print(f"[green]tool installs[/]: {rehearsal.tool_installs()}")
    for cell, step in rehearsal.windows_toolkits(targets.targets_for(config, "windows")).items():
        proc.console.print(f"[green]Windows toolkit step[/] {cell}: {step}")
    by_id = {t.id: t for t in chosen}
    reusable = []
    if args.reuse_wheels:
        for item in find_built(outputs.wheelhouse, by_id, require_all=False):
            try:
                verify_built(item)
                reusable.append(item.target.id)
            except UsageError as exc:
                proc.console.print(f"[yellow]rebuilding[/] {item.target.id}: {exc.line()}")
    to_build = tuple(t for t in chosen if t.id not in reusable)
    if reusable:
        proc.console.print(f"[green]reusing[/] the audited wheels of {', '.join(reusable)}")
    if to_build:
        buildall.build_all(to_build, outputs, jobs=1, base_image=args.base_image, max_jobs=args.max_jobs,
                           console=proc.console)
    built = find_built(outputs.wheelhouse, by_id)
    checks: dict[str, dict[str, str]] = {}
    cuobjdump = toolkit.ensure_cuobjdump()
    for item in built:
        at_build = verify_built(item)
        result = wheel_audit.audit_wheel(item.wheel, item.target, cuobjdump)
        wheel_audit.raise_for_failures(result)
        checks[item.wheel.name] = {"audit": f"{at_build}; ok: {len(result.checks)} checks again on the host"}
    with tempfile.TemporaryDirectory(prefix="farm-release-") as tmp:
        # As the workflow: the sdist written without the CUDA torch and checked, then a wheel built from it alone.
        sdist = build_sdist(config, Path(tmp) / "sdist", cpu_torch=args.cpu_torch)
        from_sdist = build_wheel_from_sdist(config, sdist, Path(tmp) / "sdist-wheel", max_jobs=args.max_jobs)
        manifest = plan(config, built, sdist, tag=args.tag, commit=_git_commit(config.root), checks=checks)
        manifest = _record_all(manifest, sdist.name, {
            "wheel-from-sdist": f"ok: {from_sdist.name}, built from the sdist alone and audited"})
        prepare_out(out)
        sources = {item.wheel.name: item.wheel for item in built} | {sdist.name: sdist}
        write_release(out, manifest, sources)
    manifest = _record_checks(manifest, check_index_install(out, manifest), "index-install")
    manifest = _record_checks(manifest, check_extra_index(out, manifest), "extra-index")
    release = targets.default_target(config)
    torch_env = envs.build_env(targets.current_python(), release.torch_requirement, config.build_requires)
    manifest = _record_install_lines(manifest, check_install_lines(out, manifest, torch_envs=(torch_env,)))
    for name, results in rehearsal.import_tests(out, manifest, by_id, config.root, cpu_torch=args.cpu_torch,
                                                 cpu_python=args.cpu_test_python).items():
        manifest = _record_all(manifest, name, results)
    for released in manifest.files:
        emulated_target = by_id.get(released.target or "")
        if emulated_target is not None and emulated_target.cross:
            imported = _emulated_import(out / "assets" / released.name, emulated_target)
            manifest = _record_all(manifest, released.name, {"import-qemu": imported})
    write_manifest(out, manifest)
    verify_release(out)
    _print_summary(manifest, out, time.monotonic() - started)
    proc.console.print("[green]dry run complete[/]: nothing was uploaded")
    return 0


def _emulated_import(wheel: Path, target: Target) -> str:
    """A linux_aarch64 wheel of the release imported under qemu-user with PyPI's aarch64 torch (ci/linux/qemu.py), as
    the workflow's import job does natively on an arm64 runner."""
    from ci.linux import cross, qemu

    line = qemu.import_wheel(wheel, target.project.import_name, cross.ensure_torch(target.torch,
                                                                                    cross.torch_python(target)))
    return f"ok: {line} (qemu-aarch64, no GPU)"


def _record_checks(manifest: Manifest, results: Mapping[str, str], name: str) -> Manifest:
    files = tuple(f.with_checks({name: results[f.name]}) if f.name in results else f for f in manifest.files)
    return dataclasses.replace(manifest, files=files)


def _record_install_lines(manifest: Manifest, results: Mapping[str, str]) -> Manifest:
    """``{"<line id> <wheel>": result}`` -> each wheel's ``install-line <line id>`` checks."""
    for key, result in sorted(results.items()):
        line_id, _, wheel = key.rpartition(" ")
        manifest = _record_all(manifest, wheel, {f"install-line {line_id}": result})
    return manifest


def _record_all(manifest: Manifest, file_name: str, results: Mapping[str, str]) -> Manifest:
    files = tuple(f.with_checks(results) if f.name == file_name else f for f in manifest.files)
    return dataclasses.replace(manifest, files=files)


def _cmd_assemble(args: argparse.Namespace) -> int:
    from ci import options, proc
    from ci.release.assembly import prepare_out, verify_release, write_release
    from ci.release.install_checks import check_extra_index, check_index_install
    from ci.release.install_lines import check_install_lines
    from ci.release.manifest import write_manifest
    from ci.release.plan import all_targets, audit_again, find_built, plan
    from ci.release.sdist import find_sdist

    config = options.load_project(args)
    out = _default_out(args, config)
    by_id = all_targets(config)
    built = find_built(Path(args.assemble), by_id)
    checks = audit_again(built, not args.no_audit)
    sdist = find_sdist(Path(args.sdist_dir)) if args.sdist_dir else None
    if sdist is None:
        proc.console.print("[yellow]no --sdist-dir[/]: the release has no sdist")
    manifest = plan(config, built, sdist, tag=args.tag, commit=os.environ.get("GITHUB_SHA") or _git_commit(config.root),
                    checks=checks)
    prepare_out(out)
    write_release(out, manifest, {item.wheel.name: item.wheel for item in built} | ({sdist.name: sdist} if sdist
                                                                                     else {}))
    manifest = _record_checks(manifest, check_index_install(out, manifest), "index-install")
    manifest = _record_checks(manifest, check_extra_index(out, manifest), "extra-index")
    manifest = _record_install_lines(manifest, check_install_lines(out, manifest))
    write_manifest(out, manifest)
    verify_release(out)
    _print_summary(manifest, out)
    return 0


def _cmd_import_test(args: argparse.Namespace) -> int:
    from ci import options, proc
    from ci.release.install_checks import import_test

    if not args.target:
        raise UsageError("--import-test needs the wheel's target", "--target", "pass --target ID (nox -s matrix)")
    (target,) = options.resolve(args, os_name=_host_os())[:1]
    path = Path(args.import_test)
    wheels = sorted(path.glob("*.whl")) if path.is_dir() else [path]
    if len(wheels) != 1 or not wheels[0].is_file():
        raise UsageError("expected one wheel", f"{path}: {', '.join(w.name for w in wheels) or 'none'}",
                         "pass the wheel, or the folder of one target's build")
    kind = args.torch_kind
    if kind == "cpu" and not target.project.cpu_libraries:
        proc.console.print(f"[yellow]skipped[/]: {target.project.name} declares no cpu-libraries, so its wheels "
                           "need a CUDA torch")
        return 0
    result = import_test(target, kind, wheel=wheels[0], python=args.test_python or target.python,
                         index_url=args.torch_index,
                         cpu_torch=args.cpu_torch)
    proc.console.print(f"[green]{wheels[0].name}[/]: {result}")
    return 0


def _host_os() -> str:
    return "windows" if sys.platform == "win32" else "linux"


def _cmd_sdist(args: argparse.Namespace) -> int:
    from ci import options, proc
    from ci.release.sdist import build_sdist

    sdist = build_sdist(options.load_project(args), Path(args.sdist), cpu_torch=args.cpu_torch,
                        torch_index=args.torch_index)
    proc.console.print(f"[green]sdist[/] {sdist}")
    return 0


def _cmd_wheel_from_sdist(args: argparse.Namespace) -> int:
    from ci import options
    from ci.release.sdist import build_wheel_from_sdist, find_sdist

    config = options.load_project(args)
    out = settings.path_option(args.out, "FARM_SDIST_WHEEL_DIR", Path.cwd() / "sdist-wheel")
    build_wheel_from_sdist(config, find_sdist(Path(args.wheel_from_sdist)), out, max_jobs=args.max_jobs)
    return 0


def _cmd_site(args: argparse.Namespace) -> int:
    from ci import proc
    from ci.release import index
    from ci.release.manifest import MANIFEST, Manifest, site_index

    if not args.manifests or not args.base_url:
        raise UsageError("--site needs --manifests and --base-url", args.site,
                         "pass the folder of downloaded release-manifest.json files and the releases' download URL")
    found = sorted(Path(args.manifests).rglob(MANIFEST))
    if not found:
        raise UsageError("no release manifest found", args.manifests, f"download each release's {MANIFEST} there")
    manifests = [Manifest.from_json(p.read_text(), p) for p in found]
    site = Path(args.site)
    if site.exists():
        shutil.rmtree(site)
    pages = index.write_site(site, site_index(manifests, args.base_url))
    proc.console.print(f"[green]index site[/] {site}: {len(manifests)} releases, {len(pages)} pages")
    return 0
