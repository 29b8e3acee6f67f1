"""The verbs that write a release folder: ``release dry-run`` (every Linux target built, audited and
import-tested here) and ``release assemble ARTIFACTS`` (the release workflow's assemble job), each with the PEP 825
variant wheels where they are on."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ci import settings
from ci.commands.release.args import Args, verb_arg
from ci.errors import UsageError
from ci.options import Options
from ci.universe.selection import select

if TYPE_CHECKING:
    from ci.builds.tail import Outputs
    from ci.release.manifest import Manifest
    from ci.release.plan import Built
    from ci.universe.project import ProjectConfig
    from ci.universe.targets import Target


def default_out(opts: Options[Args], config: ProjectConfig) -> Path:
    from ci.builds import tail

    outputs = tail.Outputs.resolve(config.root, opts.wheelhouse, opts.build_dir)
    return settings.path_option(opts.args.out, "FARM_RELEASE_DIR", outputs.build_root / "release")


def cmd_dry_run(opts: Options[Args]) -> int:
    from ci import options
    from ci.builds import tail
    from ci.linux import buildall
    from ci.log import log
    from ci.release import assembly
    from ci.release.assembly import verify_release
    from ci.release.manifest import write_manifest
    from ci.universe import targets

    started = time.monotonic()
    config = options.load_project(opts)
    sel = opts.selection
    chosen = select(config, sel, "linux") if not sel.empty else targets.platform_targets(config, "linux")
    chosen = buildall.local_equivalents(chosen)  # cu128 -> its stand-in cu124 without NVIDIA's repo
    outputs = tail.Outputs.resolve(config.root, opts.wheelhouse, opts.build_dir)
    out = default_out(opts, config)
    log.progress.print(f"[bold]release dry run[/] of {config.name}: {len(chosen)} Linux targets -> {out}")
    _preflight(config, chosen, outputs)
    by_id = {t.id: t for t in chosen}
    built, checks, cuobjdump = _build_and_audit(opts, chosen, by_id, outputs)
    manifest = _write_folder(opts, config, built, checks, cuobjdump, out)
    manifest = _check_folder(opts, config, manifest, by_id, out)
    write_manifest(out, manifest)
    verify_release(out)
    variant_wheels(opts, config, [(item.wheel, item.target) for item in built], out, cuobjdump)
    assembly.print_summary(manifest, out, time.monotonic() - started)
    log.progress.print("[green]dry run complete[/]: nothing was uploaded")
    return 0


def _preflight(config: ProjectConfig, chosen: Sequence[Target], outputs: Outputs) -> None:
    """What the build needs, checked before hours of compiling: the container engine, the output folder, the
    targets' interpreters, the cross tools; and the tool installs and Windows toolkit steps the release takes."""
    from ci.linux import images
    from ci.log import log
    from ci.release import rehearsal
    from ci.toolchain import envs
    from ci.universe import targets

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


def _build_and_audit(opts: Options[Args], chosen: Sequence[Target], by_id: Mapping[str, Target],
                     outputs: Outputs) -> tuple[list[Built], dict[str, dict[str, str]], Path | None]:
    """Build the targets (or reuse their audited wheels, ``--reuse-wheels``), then audit every wheel again on the
    host: the wheels, their checks, and the cuobjdump the audit used."""
    from ci.audit import wheel_audit
    from ci.linux import buildall
    from ci.log import log
    from ci.release.plan import find_built, reusable, verify_built
    from ci.toolchain import toolkit

    args = opts.args
    reused = reusable(outputs.wheelhouse, by_id, log.progress.print) if args.reuse_wheels else []
    to_build = tuple(t for t in chosen if t.id not in reused)
    if reused:
        log.progress.print(f"[green]reusing[/] the audited wheels of {', '.join(reused)}")
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
    return built, checks, cuobjdump


def _write_folder(opts: Options[Args], config: ProjectConfig, built: list[Built], checks: dict[str, dict[str, str]],
                  cuobjdump: Path | None, out: Path) -> Manifest:
    """The sdist and a wheel built from it alone, the PyPI wheel across CUDA majors, the plan: the release folder
    written as the workflow writes it."""
    from ci.builds import project_source
    from ci.log import log
    from ci.release import majors
    from ci.release.assembly import prepare_out, write_release
    from ci.release.manifest import record_file
    from ci.release.plan import plan
    from ci.release.sdist import build_sdist, build_wheel_from_sdist

    args = opts.args
    with tempfile.TemporaryDirectory(prefix="farm-release-") as tmp:
        # As the workflow: the sdist written without the CUDA torch and checked, then a wheel built from it alone.
        sdist = build_sdist(config, Path(tmp) / "sdist", cpu_torch=args.cpu_torch)
        from_sdist = build_wheel_from_sdist(config, sdist, Path(tmp) / "sdist-wheel", max_jobs=opts.max_jobs)
        # pypi-cuda-majors: the assemble job's merge, rehearsed on this run's halves (cu124 for cu128 here).
        releasing, merged = majors.pypi_built(config, built, Path(tmp) / "pypi-wheel", local=True)
        if merged is not None:
            checks[merged.wheel.name] = majors.audit_merged(merged, config, cuobjdump, built, local=True)
            log.progress.print(f"[green]PyPI wheel[/] for CUDA {', '.join(map(str, merged.majors))}: "
                               f"{merged.wheel.name} ({merged.wheel.stat().st_size:,} bytes)")
        elif config.pypi_cuda_majors:
            log.progress.print("[yellow]the PyPI wheel across CUDA majors is not rehearsed[/]: the selection lacks "
                               "a release cell's x86_64 target (release pypi-wheel makes it alone)")
        manifest = plan(config, releasing, sdist, tag=args.tag, commit=project_source.git_commit(config.root),
                        checks=checks)
        manifest = record_file(manifest, sdist.name, {
            "wheel-from-sdist": f"ok: {from_sdist.name}, built from the sdist alone and audited"})
        prepare_out(out)
        sources = {item.wheel.name: item.wheel for item in releasing} | {sdist.name: sdist}
        write_release(out, manifest, sources)
    return manifest


def _check_folder(opts: Options[Args], config: ProjectConfig, manifest: Manifest, by_id: Mapping[str, Target],
                  out: Path) -> Manifest:
    """What users will do with the written folder, done and recorded in its manifest: install from its indexes,
    run its documented install lines, import every wheel (under qemu for another architecture)."""
    from ci.release import install_checks, rehearsal
    from ci.release.install_checks import check_extra_index, check_index_install
    from ci.release.install_lines.pip_check import check_install_lines
    from ci.release.manifest import record_checks, record_file, record_install_lines
    from ci.toolchain import envs
    from ci.universe import targets
    from ci.universe.targets import platforms

    args = opts.args
    manifest = record_checks(manifest, check_index_install(out, manifest), "index-install")
    manifest = record_checks(manifest, check_extra_index(out, manifest), "extra-index")
    release = targets.default_target(config)
    torch_env = envs.build_env(platforms.current_python(), envs.TorchBuild(release.torch), config.build_requires)
    manifest = record_install_lines(manifest, check_install_lines(out, manifest, torch_envs=(torch_env,)))
    for name, results in rehearsal.import_tests(out, manifest, by_id, config.root, cpu_torch=args.cpu_torch,
                                                 cpu_python=args.cpu_test_python).items():
        manifest = record_file(manifest, name, results)
    for released in manifest.files:
        emulated_target = by_id.get(released.target or "")
        if emulated_target is not None and emulated_target.cross:
            imported = install_checks.emulated_import(out / "assets" / released.name, emulated_target)
            manifest = record_file(manifest, released.name, {"import-qemu": imported})
    return manifest


def cmd_assemble(opts: Options[Args]) -> int:
    from ci.builds import project_source
    from ci.log import log
    args = opts.args
    from ci import options
    from ci.release import assembly, majors
    from ci.release.assembly import prepare_out, verify_release, write_release
    from ci.release.install_checks import check_extra_index, check_index_install
    from ci.release.install_lines.pip_check import check_install_lines
    from ci.release.manifest import record_checks, record_install_lines, write_manifest
    from ci.release.plan import all_targets, audit_again, find_built, plan
    from ci.release.sdist import find_sdist
    from ci.toolchain import toolkit

    config = options.load_project(opts)
    out = default_out(opts, config)
    by_id = all_targets(config)
    built = find_built(verb_arg(args.assemble), by_id)
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
    variant_wheels(opts, config, [(item.wheel, item.target) for item in built], out, None)
    assembly.print_summary(manifest, out)
    return 0


def variant_wheels(opts: Options[Args], config: ProjectConfig, built: list[tuple[Path, Target]], out: Path,
                    cuobjdump: Path | None) -> None:
    """With variant wheels on (flag, FARM_VARIANT_WHEELS, else the project's ``variant-wheels``): <out>/variants/."""
    from ci.log import log
    from ci.release.variants import validation, writing
    from ci.toolchain import toolkit
    from ci.universe import targets

    given = opts.settings.given("FARM_VARIANT_WHEELS")
    if given is not None and given.lower() not in ("1", "0", "true", "false", "on", "off"):
        raise UsageError("FARM_VARIANT_WHEELS is neither 1 nor 0", given, "set it to 1 (on) or 0 (off), or unset it")
    if not (given.lower() in ("1", "true", "on") if given is not None else config.variant_wheels):
        return
    # Linux and Windows wheels alike: cuobjdump reads the ELF libraries and the PE files' fatbin sections.
    items = writing.release_items(built, targets.default_target(config).torch, cuobjdump or toolkit.ensure_cuobjdump())
    written = writing.write_folder(out, items, config.name)
    for wheel, variant in items:
        log.progress.print(f"[green]variant[/] {wheel.name} -> {variant.label}: {variant.source}")
    log.progress.print(f"[green]variant wheels[/] {written.folder}: {validation.validate(written.folder)}")

