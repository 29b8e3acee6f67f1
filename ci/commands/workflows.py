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
                        "repository (owner/name) its workflows check out")
    parser.add_argument("--farm-ref", help="the farm's commit (full SHA) those workflows pin")
    parser.add_argument("--default-branch", default="main", help="the branch whose pushes rebuild images")


def run(opts: Options[Args]) -> int:
    from ci import options
    from ci.gha import workflows

    a = opts.args
    return workflows.run(options.load_project(opts), a.verb, a.out, a.farm_repository, a.farm_ref, a.default_branch)


COMMAND = Command("workflows", "render .github/workflows from the matrix (render, check, lint)", configure, Args,
                  run, Traits(project=True))
