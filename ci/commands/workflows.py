"""``workflows [render | check | lint]``: the GitHub Actions workflows rendered from the matrix (ci/gha/)."""

from __future__ import annotations

import argparse
import dataclasses

from ci.commands.command import Command, Traits, project_args
from ci.options import Options

VERBS = {"render": "write the workflows (the default)", "check": "fail, with a diff, when the committed workflows "
         "differ", "lint": "zizmor --offline and check-jsonschema (GitHub's workflow schema) over the workflows; "
         "actionlint too when it is on PATH"}


@dataclasses.dataclass(frozen=True)
class Args:
    verb: str = "render"
    out: str | None = None
    farm_repository: str | None = None
    farm_ref: str | None = None
    default_branch: str = "main"


def configure(parser: argparse.ArgumentParser) -> None:
    project_args(parser)
    parser.add_argument("verb", nargs="?", choices=tuple(VERBS), default="render", metavar="VERB",
                        help="; ".join(f"{k}: {v}" for k, v in VERBS.items()))
    parser.add_argument("--out", help="the workflows folder (default: <project>/.github/workflows)")
    parser.add_argument("--farm-repository", help="for a project other than the farm: the farm's GitHub "
                        "repository (owner/name) its workflows check out (render's default: the one this farm was "
                        "built from, `--version` shows it)")
    parser.add_argument("--farm-ref", help="the farm's commit (full SHA) those workflows pin (render's default: the "
                        "commit this farm was built from)")
    parser.add_argument("--default-branch", default="main", help="the branch whose pushes rebuild images")


def run(opts: Options[Args]) -> int:
    from ci import options
    from ci.gha import workflows

    a = opts.args
    config = options.load_project(opts)
    repository, ref = a.farm_repository, a.farm_ref
    if a.verb == "render" and not config.is_farm_itself:
        repository, ref = farm_pin(repository, ref)
    return workflows.run(config, a.verb, a.out, repository, ref, a.default_branch)


def farm_pin(repository: str | None, ref: str | None) -> tuple[str | None, str | None]:
    """``render``'s defaults for the farm a project's workflows check out: the repository and commit this farm was
    built from (ci/commands/farm_source.py), where known and not given; a note on stderr says which."""
    from ci.commands import farm_source
    from ci.log import log

    source = farm_source.current()
    if (repository and ref) or not source.github or not source.commit:
        return repository, ref
    chosen = (repository or source.github, ref or source.commit)
    log.note("farm pin:", f"{chosen[0]}@{chosen[1]}, the farm you ran (--farm-repository, --farm-ref choose another)")
    return chosen


COMMAND = Command("workflows", "render .github/workflows from the matrix (render, check, lint)", configure, Args,
                  run, Traits(project=True))
