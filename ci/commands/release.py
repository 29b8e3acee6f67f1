"""The release: every Linux target built, audited and import-tested, per-variant PEP 503 indexes, SHA256SUMS
and a manifest in one folder (``nox -s release -- dry-run`` does what the release workflow does for the Linux
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

Verbs: ``release dry-run`` (the whole pipeline for the Linux targets, here), ``release assemble ARTIFACTS`` (the
release workflow's assemble job: the downloaded build artifacts of every OS -> the same folder), ``release
import-test WHEEL`` (the workflow's import-test jobs), ``release sdist DIR``, ``release wheel-from-sdist DIR``,
``release site DIR`` (the GitHub Pages index of every release, from the releases' manifests), and the dispatch
workflow's ``release dispatch-plan | dispatch-assemble ARTIFACTS | dispatch-merge RELEASE``
(``ci/release/dispatch.py``). The old spellings (``--dry-run``, ``--assemble ARTIFACTS``, ..., and ``workflows
--dispatch-*``) still work for one release, with a note naming the verb (``ci/cli.py``).

The parser hook is standard library only (``ci/cli.py`` imports it before any environment exists); the verbs
import the rest when they run:

* ``ci/release/plan.py``: the built wheels a release takes and which file goes where (PyPI, variant indexes);
* ``ci/release/manifest.py``: the release's records: ``ReleaseFile``, the manifest, SHA256SUMS, the indexes' links;
* ``ci/release/assembly.py``: the release folder, written and checked;
* ``ci/release/install_checks.py``: pip's view of the indexes and the import tests, in clean environments;
* ``ci/release/sdist.py``: the sdist.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ci import settings
from ci.commands.command import Command, Traits, output_args, selection_args
from ci.errors import UsageError
from ci.options import Options
from ci.universe.matrix import PYTORCH_INDEX
from ci.universe.selection import select

if TYPE_CHECKING:
    from ci.universe.project import ProjectConfig
    from ci.universe.targets import Target

#: verb -> (the argument it takes, its help)
VERBS: dict[str, tuple[str | None, str]] = {
    "dry-run": (None, "build, audit and import-test every Linux target here; write the release folder (indexes, "
                "SHA256SUMS, manifest) and check that the indexes install; upload nothing"),
    "assemble": ("ARTIFACTS", "the release workflow's assemble step: the built wheels under ARTIFACTS (<target-id>/ or "
                 "wheel-<target-id>/ folders with report.json) and the sdist -> --out"),
    "import-test": ("WHEEL", "install WHEEL (or the one wheel in a folder) into a new environment with a torch of "
                    "--torch-kind and run the project's smoke command"),
    "sdist": ("DIR", "build the project's sdist into DIR (without the CUDA torch; --torch-index: where a CPU torch "
              "comes from when setup.py imports torch) and check it"),
    "wheel-from-sdist": ("DIR", "build the release target's wheel from the sdist in DIR alone, audited (into --out, "
                         "default sdist-wheel): the proof that the sdist builds"),
    "site": ("DIR", "write the per-variant indexes of every release in --manifests into DIR, linking the GitHub "
             "Release downloads under --base-url"),
    "pypi-wheel": (None, "(pypi-cuda-majors) build the stable wheel once per CUDA major PyPI's torch uses in the "
                   "project's range (--reuse-wheels: take audited ones from the wheelhouse) and merge them into one "
                   "audited wheel in --out (default <build>/pypi-wheel; docs/releasing.md)"),
    "dispatch-plan": (None, "(dispatch.yml) the targets the FARM_DISPATCH_* inputs select; writes targets=<JSON list> "
                      "to GITHUB_OUTPUT"),
    "dispatch-assemble": ("ARTIFACTS", "(dispatch.yml) the selected targets' wheels (FARM_DISPATCH_SELECTED) audited "
                          "again into a release folder (--out)"),
    "dispatch-merge": ("RELEASE", "(dispatch.yml) that release folder merged into the published manifest and "
                       "SHA256SUMS (--published) in --out; a replaced file is refused"),
}
#: The verbs whose argument names something the user has (it must exist), and those naming where the farm writes.
INPUTS = ("assemble", "import_test", "wheel_from_sdist", "dispatch_assemble", "dispatch_merge")
OUTPUTS = ("sdist", "site")


@dataclasses.dataclass(frozen=True)
class Args:
    verb: str | None = None
    out: str | None = None
    tag: str | None = None
    sdist_dir: str | None = None
    manifests: str | None = None
    base_url: str | None = None
    base_image: str | None = None
    reuse_wheels: bool = False
    variant_wheels: bool = False
    no_audit: bool = False
    torch_kind: str = "cuda"
    torch_index: str | None = None
    test_python: str | None = None
    cpu_test_python: str | None = None
    cpu_torch: str | None = None
    published: str | None = None
    # the verb's argument, under the verb's name (finish puts it there)
    assemble: str | None = None
    import_test: str | None = None
    sdist: str | None = None
    wheel_from_sdist: str | None = None
    site: str | None = None
    dispatch_assemble: str | None = None
    dispatch_merge: str | None = None


def configure(parser: argparse.ArgumentParser) -> None:
    selection_args(parser)
    output_args(parser)
    parser.add_argument("verb", nargs="?", choices=tuple(VERBS), metavar="VERB",
                        help="; ".join(f"{v}{' ' + a if a else ''}: {h}" for v, (a, h) in VERBS.items()))
    parser.add_argument("path", nargs="?", metavar="ARG", help="the verb's argument (ARTIFACTS, WHEEL, DIR, RELEASE)")
    parser.add_argument("--out", help="the release folder (default: FARM_RELEASE_DIR, else <build>/release); replaced")
    parser.add_argument("--tag", help="the release tag; must be v<version> of the wheels")
    parser.add_argument("--sdist-dir", help="assemble: the folder holding the sdist")
    parser.add_argument("--manifests", help="site: a folder holding the releases' release-manifest.json files")
    parser.add_argument("--base-url", help="site: the releases' download URL "
                        "(https://github.com/OWNER/REPO/releases/download)")
    parser.add_argument("--base-image", help="dry-run: base image of the container builds (default: "
                        "FARM_BASE_IMAGE or the cell's)")
    parser.add_argument("--reuse-wheels", action="store_true",
                        help="dry-run: do not rebuild a target whose audited wheel and report are in the wheelhouse")
    parser.add_argument("--variant-wheels", action="store_true", help="dry-run, assemble: also write PEP 825 variant "
                        "wheels into <out>/variants/ (experimental; FARM_VARIANT_WHEELS, project key variant-wheels)")
    parser.add_argument("--no-audit", action="store_true",
                        help="assemble: trust the build reports instead of auditing the Linux wheels again")
    parser.add_argument("--torch-kind", choices=("cuda", "cpu"), default="cuda",
                        help="import-test: the CUDA torch of the target's cell, or a CPU-only torch")
    parser.add_argument("--torch-index", help="import-test: the index torch comes from (default: pip's own, "
                        f"e.g. {PYTORCH_INDEX}/cpu)")
    parser.add_argument("--test-python", metavar="VERSION",
                        help="import-test: the CPython of the test environment (default: the target's oldest; "
                             "FARM_PYTHON_3_10 and the like name an interpreter); the farm itself runs on its own")
    parser.add_argument("--cpu-test-python", metavar="VERSION",
                        help="dry-run: the CPython of the CPU-only import tests where the --cpu-torch here has no "
                             "wheel for the target's (the workflow uses the target's; recorded in the check)")
    parser.add_argument("--cpu-torch", help="the CPU torch release of the CPU-only import test, used when it fits "
                        "the wheel (stable-ABI: at or above its floor; classic: its own torch minor) and pip can see "
                        "its +cpu build; otherwise the wheel's own CPU build if the index has it, else PyPI's build "
                        "of its torch imported with no GPU (recorded in the manifest)")
    parser.add_argument("--published", help="dispatch-merge: the release's release-manifest.json and SHA256SUMS")


def finish(ns: argparse.Namespace) -> None:
    """The verb's argument goes to the verb's name (so the entry checks it as an input or output path)."""
    for verb in VERBS:
        setattr(ns, verb.replace("-", "_"), None)
    takes = VERBS[ns.verb][0] if ns.verb else None
    if ns.verb and takes and not ns.path:
        raise UsageError(f"release {ns.verb} needs its {takes}", f"release {ns.verb}",
                         f"run `release {ns.verb} {takes}`")
    if ns.path and not takes:
        raise UsageError(f"release {ns.verb or ''} takes no argument".replace("  ", " "), ns.path,
                         "drop it (the verbs: " + ", ".join(VERBS) + ")")
    if ns.verb and takes:
        setattr(ns, ns.verb.replace("-", "_"), ns.path)


def run(opts: Options[Args]) -> int:
    verb = opts.args.verb
    if verb is None:
        raise UsageError("no release mode given", "python -m ci release",
                         "run `release dry-run` (here), or release assemble/import-test/sdist/site (the release "
                         "workflow)")
    return _VERBS[verb](opts)


# --- the dispatch workflow's verbs (ci/release/dispatch.py) ------------------------------------------------------


def _dispatch_plan(opts: Options[Args]) -> int:
    from ci import options
    from ci.release import dispatch

    env = opts.settings.environ
    chosen = dispatch.plan(options.load_project(opts), dispatch.Request.from_env(env), env)
    dispatch.write_plan(chosen, env)
    return 0


def _dispatch_out(opts: Options[Args]) -> Path:
    if not opts.args.out:
        raise UsageError("release dispatch-assemble and dispatch-merge write a folder", "--out", "pass --out DIR")
    return Path(opts.args.out)


def _dispatch_assemble(opts: Options[Args]) -> int:
    from ci import options
    from ci.release import dispatch

    out = _dispatch_out(opts)
    assert opts.args.dispatch_assemble is not None
    ids = dispatch.selected_ids(opts.settings.get(dispatch.SELECTED_ENV) or "")
    dispatch.assemble(options.load_project(opts), Path(opts.args.dispatch_assemble), ids, out, opts.args.tag,
                      commit=opts.settings.environ.get("GITHUB_SHA") or None)
    return 0


def _dispatch_merge(opts: Options[Args]) -> int:
    from ci.log import log
    from ci.release import dispatch

    out = _dispatch_out(opts)
    assert opts.args.dispatch_merge is not None
    if not opts.args.published:
        raise UsageError("release dispatch-merge needs the published release's files", "--published",
                         "download its release-manifest.json and SHA256SUMS into a folder and pass it")
    added = dispatch.merge(Path(opts.args.dispatch_merge), Path(opts.args.published), out)
    log.progress.print(f"[green]merged[/]: {len(added)} new files -> {out}")
    return 0


# --- the verbs --------------------------------------------------------------------------------------------


def _default_out(opts: Options[Args], config: ProjectConfig) -> Path:
    from ci.builds import tail

    outputs = tail.Outputs.resolve(config.root, opts.wheelhouse, opts.build_dir)
    return settings.path_option(opts.args.out, "FARM_RELEASE_DIR", outputs.build_root / "release")


def _cmd_dry_run(opts: Options[Args]) -> int:
    from ci.builds import project_source
    from ci.log import log
    args = opts.args
    from ci import options
    from ci.audit import wheel_audit
    from ci.builds import tail
    from ci.linux import buildall, images
    from ci.release import assembly, install_checks, rehearsal
    from ci.release.assembly import prepare_out, verify_release, write_release
    from ci.release.install_checks import check_extra_index, check_index_install
    from ci.release.install_lines import check_install_lines
    from ci.release.manifest import record_checks, record_file, record_install_lines, write_manifest
    from ci.release.plan import find_built, plan, verify_built
    from ci.release.sdist import build_sdist, build_wheel_from_sdist
    from ci.toolchain import envs, toolkit
    from ci.universe import targets

    started = time.monotonic()
    config = options.load_project(opts)
    sel = opts.selection
    chosen = select(config, sel, "linux") if not sel.empty else targets.platform_targets(config, "linux")
    chosen = buildall.local_equivalents(chosen)  # cu128 -> its stand-in cu124 without NVIDIA's repo
    outputs = tail.Outputs.resolve(config.root, opts.wheelhouse, opts.build_dir)
    out = _default_out(opts, config)
    log.progress.print(f"[bold]release dry run[/] of {config.name}: {len(chosen)} Linux targets -> {out}")
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
    log.progress.print(f"[green]tool installs[/]: {rehearsal.tool_installs()}")
    for cell, step in rehearsal.windows_toolkits(targets.platform_targets(config, "windows")).items():
        log.progress.print(f"[green]Windows toolkit step[/] {cell}: {step}")
    by_id = {t.id: t for t in chosen}
    reusable = []
    if args.reuse_wheels:
        for item in find_built(outputs.wheelhouse, by_id, require_all=False):
            try:
                verify_built(item)
                reusable.append(item.target.id)
            except UsageError as exc:
                log.progress.print(f"[yellow]rebuilding[/] {item.target.id}: {exc.line()}")
    to_build = tuple(t for t in chosen if t.id not in reusable)
    if reusable:
        log.progress.print(f"[green]reusing[/] the audited wheels of {', '.join(reusable)}")
    if to_build:
        buildall.build_all(to_build, outputs, jobs=1, base_image=args.base_image, max_jobs=opts.max_jobs)
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
        from_sdist = build_wheel_from_sdist(config, sdist, Path(tmp) / "sdist-wheel", max_jobs=opts.max_jobs)
        manifest = plan(config, built, sdist, tag=args.tag, commit=project_source.git_commit(config.root),
                        checks=checks)
        manifest = record_file(manifest, sdist.name, {
            "wheel-from-sdist": f"ok: {from_sdist.name}, built from the sdist alone and audited"})
        prepare_out(out)
        sources = {item.wheel.name: item.wheel for item in built} | {sdist.name: sdist}
        write_release(out, manifest, sources)
    manifest = record_checks(manifest, check_index_install(out, manifest), "index-install")
    manifest = record_checks(manifest, check_extra_index(out, manifest), "extra-index")
    release = targets.default_target(config)
    torch_env = envs.build_env(targets.current_python(), release.torch_requirement, config.build_requires)
    manifest = record_install_lines(manifest, check_install_lines(out, manifest, torch_envs=(torch_env,)))
    for name, results in rehearsal.import_tests(out, manifest, by_id, config.root, cpu_torch=args.cpu_torch,
                                                 cpu_python=args.cpu_test_python).items():
        manifest = record_file(manifest, name, results)
    for released in manifest.files:
        emulated_target = by_id.get(released.target or "")
        if emulated_target is not None and emulated_target.cross:
            imported = install_checks.emulated_import(out / "assets" / released.name, emulated_target)
            manifest = record_file(manifest, released.name, {"import-qemu": imported})
    write_manifest(out, manifest)
    verify_release(out)
    _variant_wheels(opts, config, [(item.wheel, item.target) for item in built], out, cuobjdump)
    assembly.print_summary(manifest, out, time.monotonic() - started)
    log.progress.print("[green]dry run complete[/]: nothing was uploaded")
    return 0


def _cmd_assemble(opts: Options[Args]) -> int:
    from ci.builds import project_source
    from ci.log import log
    args = opts.args
    from ci import options
    from ci.release import assembly, majors
    from ci.release.assembly import prepare_out, verify_release, write_release
    from ci.release.install_checks import check_extra_index, check_index_install
    from ci.release.install_lines import check_install_lines
    from ci.release.manifest import record_checks, record_install_lines, write_manifest
    from ci.release.plan import all_targets, audit_again, find_built, plan
    from ci.release.sdist import find_sdist
    from ci.toolchain import toolkit

    config = options.load_project(opts)
    out = _default_out(opts, config)
    by_id = all_targets(config)
    built = find_built(_arg(args.assemble), by_id)
    checks = audit_again(built, not args.no_audit)
    sdist = find_sdist(Path(args.sdist_dir)) if args.sdist_dir else None
    if sdist is None:
        log.progress.print("[yellow]no --sdist-dir[/]: the release has no sdist")
    commit = opts.settings.environ.get("GITHUB_SHA") or project_source.git_commit(config.root)
    with tempfile.TemporaryDirectory(prefix="farm-pypi-wheel-") as tmp:
        # pypi-cuda-majors: the cu128 and cu130 wheels merged; that wheel is the one PyPI (and its index) gets.
        released, merged = majors.pypi_built(config, built, Path(tmp))
        if merged is not None:
            checks[merged.wheel.name] = majors.audit_merged(merged, config, toolkit.ensure_cuobjdump(), built)
            log.progress.print(f"[green]PyPI wheel[/] for CUDA {', '.join(map(str, merged.majors))}: "
                               f"{merged.wheel.name} ({merged.wheel.stat().st_size:,} bytes)")
        manifest = plan(config, released, sdist, tag=args.tag, commit=commit, checks=checks)
        prepare_out(out)
        write_release(out, manifest, {item.wheel.name: item.wheel for item in released}
                      | ({sdist.name: sdist} if sdist else {}))
    manifest = record_checks(manifest, check_index_install(out, manifest), "index-install")
    manifest = record_checks(manifest, check_extra_index(out, manifest), "extra-index")
    manifest = record_install_lines(manifest, check_install_lines(out, manifest))
    write_manifest(out, manifest)
    verify_release(out)
    _variant_wheels(opts, config, [(item.wheel, item.target) for item in built], out, None)
    assembly.print_summary(manifest, out)
    return 0


def _variant_wheels(opts: Options[Args], config: ProjectConfig, built: list[tuple[Path, Target]], out: Path,
                    cuobjdump: Path | None) -> None:
    """With variant wheels on (flag, FARM_VARIANT_WHEELS, else the project's ``variant-wheels``): <out>/variants/."""
    from ci.log import log
    from ci.release import variants
    from ci.toolchain import toolkit
    from ci.universe import targets

    given = opts.settings.given("FARM_VARIANT_WHEELS")
    if given is not None and given.lower() not in ("1", "0", "true", "false", "on", "off"):
        raise UsageError("FARM_VARIANT_WHEELS is neither 1 nor 0", given, "set it to 1 (on) or 0 (off), or unset it")
    if not (given.lower() in ("1", "true", "on") if given is not None else config.variant_wheels):
        return
    linux = [(w, t) for w, t in built if t.os == "linux"]
    items = variants.release_items(linux, targets.default_target(config).torch,
                                   cuobjdump or toolkit.ensure_cuobjdump())
    written = variants.write_folder(out, items, config.name)
    for wheel, variant in items:
        log.progress.print(f"[green]variant[/] {wheel.name} -> {variant.label}: {variant.source}")
    log.progress.print(f"[green]variant wheels[/] {written.folder}: {variants.validate(written.folder)}")


def _cmd_import_test(opts: Options[Args]) -> int:
    from ci.log import log
    args = opts.args
    from ci import options
    from ci.release.install_checks import import_test

    if not opts.selection.target_ids:
        raise UsageError("release import-test needs the wheel's target", "--target", "pass --target ID (nox -s matrix)")
    (target,) = options.resolve(opts, os_name=_host_os())[:1]
    path = _arg(args.import_test)
    wheels = sorted(path.glob("*.whl")) if path.is_dir() else [path]
    if len(wheels) != 1 or not wheels[0].is_file():
        raise UsageError("expected one wheel", f"{path}: {', '.join(w.name for w in wheels) or 'none'}",
                         "pass the wheel, or the folder of one target's build")
    kind = args.torch_kind
    if kind == "cpu" and not target.project.cpu_libraries:
        log.progress.print(f"[yellow]skipped[/]: {target.project.name} declares no cpu-libraries, so its wheels "
                           "need a CUDA torch")
        return 0
    result = import_test(target, kind, wheel=wheels[0], python=args.test_python or target.python,
                         index_url=args.torch_index,
                         cpu_torch=args.cpu_torch)
    log.progress.print(f"[green]{wheels[0].name}[/]: {result}")
    return 0


def _arg(value: str | None) -> Path:
    """The verb's argument (``finish`` refused a verb without it)."""
    assert value is not None
    return Path(value)


def _host_os() -> str:
    return "windows" if sys.platform == "win32" else "linux"


def _cmd_sdist(opts: Options[Args]) -> int:
    from ci.log import log
    args = opts.args
    from ci import options
    from ci.release.sdist import build_sdist

    sdist = build_sdist(options.load_project(opts), _arg(args.sdist), cpu_torch=args.cpu_torch,
                        torch_index=args.torch_index)
    log.progress.print(f"[green]sdist[/] {sdist}")
    return 0


def _cmd_wheel_from_sdist(opts: Options[Args]) -> int:
    args = opts.args
    from ci import options
    from ci.release.sdist import build_wheel_from_sdist, find_sdist

    config = options.load_project(opts)
    out = settings.path_option(args.out, "FARM_SDIST_WHEEL_DIR", Path.cwd() / "sdist-wheel")
    build_wheel_from_sdist(config, find_sdist(_arg(args.wheel_from_sdist)), out, max_jobs=opts.max_jobs)
    return 0


def _cmd_site(opts: Options[Args]) -> int:
    from ci.log import log
    args = opts.args
    from ci.release import index
    from ci.release.manifest import MANIFEST, Manifest, site_index

    if not args.manifests or not args.base_url:
        raise UsageError("release site needs --manifests and --base-url", args.site,
                         "pass the folder of downloaded release-manifest.json files and the releases' download URL")
    found = sorted(Path(args.manifests).rglob(MANIFEST))
    if not found:
        raise UsageError("no release manifest found", args.manifests, f"download each release's {MANIFEST} there")
    manifests = [Manifest.from_json(p.read_text(), p) for p in found]
    site = _arg(args.site)
    if site.exists():
        shutil.rmtree(site)
    pages = index.write_site(site, site_index(manifests, args.base_url))
    log.progress.print(f"[green]index site[/] {site}: {len(manifests)} releases, {len(pages)} pages")
    return 0


def _cmd_pypi_wheel(opts: Options[Args]) -> int:
    from ci import options
    from ci.builds import tail
    from ci.log import log
    from ci.release import majors
    from ci.toolchain import toolkit

    config = options.load_project(opts)
    majors.major_targets(config)  # a project without the key stops here, before any tool is fetched
    outputs = tail.Outputs.resolve(config.root, opts.wheelhouse, opts.build_dir)
    out = Path(opts.args.out).resolve() if opts.args.out else outputs.build_root / "pypi-wheel"
    merged, lines = majors.release_wheel(config, outputs, out,
                                         reuse=opts.args.reuse_wheels, base_image=opts.args.base_image,
                                         max_jobs=opts.max_jobs, cuobjdump=toolkit.ensure_cuobjdump())
    for line in lines:
        log.progress.print(f"  {line}")
    log.progress.print(f"[green]PyPI wheel[/] for CUDA {', '.join(map(str, merged.majors))}: {merged.wheel} "
                       f"({merged.wheel.stat().st_size:,} bytes)")
    return 0


_VERBS = {"dry-run": _cmd_dry_run, "assemble": _cmd_assemble, "import-test": _cmd_import_test, "sdist": _cmd_sdist,
          "wheel-from-sdist": _cmd_wheel_from_sdist, "site": _cmd_site, "pypi-wheel": _cmd_pypi_wheel,
          "dispatch-plan": _dispatch_plan,
          "dispatch-assemble": _dispatch_assemble, "dispatch-merge": _dispatch_merge}


COMMAND = Command("release", "build, audit and test every Linux target; per-variant indexes, SHA256SUMS and a "
                  "manifest (verbs: " + ", ".join(VERBS) + ")", configure, Args, run,
                  Traits(compiles=True, selects=True, input_paths=(*INPUTS, "sdist_dir", "manifests", "published"),
                         output_paths=("out", *OUTPUTS),
                         labels=tuple((v.replace("-", "_"), f"release {v}'s {a}") for v, (a, _) in VERBS.items() if a)),
                  finish=finish)
