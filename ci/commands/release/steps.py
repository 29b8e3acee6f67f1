"""The release workflow's single steps: ``release import-test WHEEL``, ``sdist DIR``, ``wheel-from-sdist DIR``,
``site DIR`` and ``pypi-wheel`` (the wheel across CUDA majors)."""

from __future__ import annotations

import shutil
from pathlib import Path

from ci import settings
from ci.commands.release.args import Args, host_os, verb_arg
from ci.errors import UsageError
from ci.options import Options


def cmd_import_test(opts: Options[Args]) -> int:
    from ci.log import log
    args = opts.args
    from ci import options
    from ci.release.install_checks import import_test

    if not opts.selection.target_ids:
        raise UsageError("release import-test needs the wheel's target", "--target",
                         f"pass --target ID ({settings.entry('matrix')} lists them)")
    (target,) = options.resolve(opts, os_name=host_os())[:1]
    path = verb_arg(args.import_test)
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


def cmd_sdist(opts: Options[Args]) -> int:
    from ci.log import log
    args = opts.args
    from ci import options
    from ci.release.sdist import build_sdist

    sdist = build_sdist(options.load_project(opts), verb_arg(args.sdist), cpu_torch=args.cpu_torch,
                        torch_index=args.torch_index)
    log.progress.print(f"[green]sdist[/] {sdist}")
    return 0


def cmd_wheel_from_sdist(opts: Options[Args]) -> int:
    args = opts.args
    from ci import options
    from ci.release.sdist import build_wheel_from_sdist, find_sdist

    config = options.load_project(opts)
    out = settings.path_option(args.out, "FARM_SDIST_WHEEL_DIR", Path.cwd() / "sdist-wheel")
    build_wheel_from_sdist(config, find_sdist(verb_arg(args.wheel_from_sdist)), out, max_jobs=opts.max_jobs)
    return 0


def cmd_site(opts: Options[Args]) -> int:
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
    site = verb_arg(args.site)
    if site.exists():
        shutil.rmtree(site)
    pages = index.write_site(site, site_index(manifests, args.base_url))
    log.progress.print(f"[green]index site[/] {site}: {len(manifests)} releases, {len(pages)} pages")
    return 0


def cmd_pypi_wheel(opts: Options[Args]) -> int:
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

