"""The dispatch workflow's verbs (``ci/release/dispatch.py``): ``release dispatch-plan``, ``dispatch-assemble
ARTIFACTS`` and ``dispatch-merge RELEASE``."""

from __future__ import annotations

from pathlib import Path

from ci.commands.release.args import Args
from ci.errors import UsageError
from ci.options import Options


def cmd_dispatch_plan(opts: Options[Args]) -> int:
    from ci import options
    from ci.release import dispatch

    env = opts.settings.environ
    chosen = dispatch.plan(options.load_project(opts), dispatch.Request.from_env(env), env)
    dispatch.write_plan(chosen, env)
    return 0


def dispatch_out(opts: Options[Args]) -> Path:
    if not opts.args.out:
        raise UsageError("release dispatch-assemble and dispatch-merge write a folder", "--out", "pass --out DIR")
    return Path(opts.args.out)


def cmd_dispatch_assemble(opts: Options[Args]) -> int:
    from ci import options
    from ci.release import dispatch

    out = dispatch_out(opts)
    assert opts.args.dispatch_assemble is not None
    ids = dispatch.selected_ids(opts.settings.get(dispatch.SELECTED_ENV) or "")
    dispatch.assemble(options.load_project(opts), Path(opts.args.dispatch_assemble), ids, out, opts.args.tag,
                      commit=opts.settings.environ.get("GITHUB_SHA") or None)
    return 0


def cmd_dispatch_merge(opts: Options[Args]) -> int:
    from ci.log import log
    from ci.release import dispatch

    out = dispatch_out(opts)
    assert opts.args.dispatch_merge is not None
    if not opts.args.published:
        raise UsageError("release dispatch-merge needs the published release's files", "--published",
                         "download its release-manifest.json and SHA256SUMS into a folder and pass it")
    added = dispatch.merge(Path(opts.args.dispatch_merge), Path(opts.args.published), out)
    log.progress.print(f"[green]merged[/]: {len(added)} new files -> {out}")
    return 0

