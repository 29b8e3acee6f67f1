"""``test``: the project's configured smoke and CPU test commands against its wheel, in a clean environment."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci.commands.command import Command, Traits, no_built_wheel, selection_args
from ci.options import Options

if TYPE_CHECKING:
    from ci.universe.targets import Target


@dataclasses.dataclass(frozen=True)
class Args:
    wheel: str | None = None


def configure(parser: argparse.ArgumentParser) -> None:
    selection_args(parser)
    parser.add_argument("--wheel", help="the wheel to test (default: the target's in the wheelhouse)")
    parser.add_argument("--wheelhouse", help="where the target's built wheel is looked for (default: "
                        "FARM_WHEELHOUSE, else <project>/wheelhouse)")


def target_and_wheel(opts: Options[Any], wheel: str | None) -> tuple[Target, Path]:
    """The target and its wheel: ``--wheel``, else the newest in the wheelhouse (test, run)."""
    from ci import options
    from ci.builds import tail

    (target,) = options.resolve(opts)[:1]
    outputs = tail.Outputs.resolve(target.project.root, opts.wheelhouse, opts.build_dir,
                                   target.project.normalized_name)
    found = Path(wheel) if wheel else tail.find_wheel(outputs, target)
    if found is None and not wheel and opts.selection.empty:
        # Nothing selected: the wheel that was built (`build --cpu`, another Python) rather than a refusal for the
        # default target's, which was not.
        target, found = tail.find_built(outputs, built_candidates(target))
    if found is None:
        raise no_built_wheel(target.id, outputs.target_dir(target))
    return target, found


def built_candidates(default: Target) -> list[Target]:
    """The targets whose wheel an empty selection may mean, best first: the default target, its CPU build, then the
    project's other Linux targets and their CPU builds (newest torch, then the running Python's first)."""
    from ci.universe import shapes, targets
    from ci.universe.targets import platforms

    others = sorted(targets.platform_targets(default.project, "linux"),
                    key=lambda t: (shapes.version_key(t.torch), t.python == platforms.current_python(),
                                   shapes.version_key(t.python)), reverse=True)
    ordered = [default, *(t for t in others if t.id != default.id)]
    return [variant for t in ordered for variant in (t, dataclasses.replace(t, cpu=True))]


def run(opts: Options[Args]) -> int:
    from ci.testing import wheel_tests

    target, wheel = target_and_wheel(opts, opts.args.wheel)
    return wheel_tests.run_cpu_tests(target, wheel)


TRAITS = Traits(default_target=True, selects=True, input_paths=("wheel",), wheels=("wheel",))
COMMAND = Command("test", "run the project's configured smoke and CPU test commands against its wheel", configure,
                  Args, run, TRAITS, session=False)
