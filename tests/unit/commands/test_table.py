"""The command table (ci/cli.py COMMANDS, one module per verb in ci/commands/): the parser is built from it, each
command's arguments are a frozen dataclass of its parser's destinations, the old mode flags become verbs with a
one-line note, and docs/commands.md is generated from it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from pathlib import Path

import pytest

from ci import cli
from ci.commands import reference
from ci.errors import UsageError

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "commands.md"
#: Destinations that become Options' own fields (the shared groups), or that the entry handles.
SHARED = {"project", "config", "target", "cuda", "torch", "python", "arch_list", "arch", "wheelhouse", "build_dir",
          "max_jobs", "deadline", "help", "path", "cell"}


def test_the_commands_reference_is_generated_from_the_table() -> None:
    text = cli.commands_markdown()
    if os.environ.get("FARM_WRITE_DOCS") == "1":
        DOC.write_text(text, encoding="utf-8")
    assert DOC.read_text(encoding="utf-8") == text, "run FARM_WRITE_DOCS=1 pytest tests/unit/commands"


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_each_command_declares_its_arguments_as_a_frozen_dataclass(name: str) -> None:
    command = cli.COMMANDS[name]
    parser = argparse.ArgumentParser()
    command.configure(parser)
    dests = {a.dest for a in parser._actions} - SHARED
    fields = {f.name for f in dataclasses.fields(command.arguments)}
    assert dests <= fields, f"{name}: {sorted(dests - fields)} parsed but not in its Args"
    assert command.arguments.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert sys.modules[command.run.__module__].COMMAND is command  # type: ignore[attr-defined]
    assert command.run.__module__ == f"ci.commands.{name.replace('-', '_')}"


@pytest.mark.parametrize(("argv", "command", "verb", "note"), [
    (["release", "--dry-run"], "release", "dry-run", '--dry-run is now "release dry-run"'),
    (["release", "--sdist", "dist"], "release", "sdist", '--sdist is now "release sdist"'),
    (["release", "--site=site", "--manifests", str(ROOT)], "release", "site", '--site is now "release site"'),
    (["workflows", "--check"], "workflows", "check", '--check is now "workflows check"'),
    (["workflows", "--lint"], "workflows", "lint", '--lint is now "workflows lint"'),
    (["workflows", "--pull-image", "13"], "images", "pull", '--pull-image is now "images pull"'),
    (["workflows", "--changed-cells"], "images", "changed", '--changed-cells is now "images changed"'),
    (["workflows", "--dispatch-plan"], "release", "dispatch-plan", '--dispatch-plan is now "release dispatch-plan"'),
    (["--traceback", "workflows", "--dispatch-merge", "rel", "--out", "o"], "release", "dispatch-merge",
     '--dispatch-merge is now "release dispatch-merge"'),
])
def test_the_old_mode_flags_become_verbs_with_a_note(argv: list[str], command: str, verb: str, note: str,
                                                    capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "rel").mkdir()
    opts = cli.parse(argv, cwd=tmp_path if "rel" in argv else None)
    assert (opts.command, opts.args.verb) == (command, verb)
    assert capsys.readouterr().err.strip() == f"note: {note}"


def test_verbs_take_their_argument_as_a_path(tmp_path: Path) -> None:
    (tmp_path / "artifacts").mkdir()
    opts = cli.parse(["release", "assemble", "artifacts", "--out", "out"], cwd=tmp_path)
    assert opts.args.assemble == str(tmp_path / "artifacts") and opts.args.out == str(tmp_path / "out")
    with pytest.raises(UsageError, match=r"release assemble's ARTIFACTS does not exist \(nothing\)"):
        cli.parse(["release", "assemble", "nothing"], cwd=tmp_path)
    with pytest.raises(UsageError, match="release import-test needs its WHEEL"):
        cli.parse(["release", "import-test"])
    with pytest.raises(UsageError, match="two release modes given"):
        cli.parse(["release", "--dry-run", "--sdist", "x"])
    assert cli.parse(["release"]).args.verb is None  # bare release: its own refusal when it runs
    assert cli.parse(["workflows"]).args.verb == "render"
    images = cli.parse(["images", "push", "13", "--registry", "r.example/x"])
    assert (images.args.verb, images.args.cells, images.settings.get("FARM_REGISTRY")) == ("push", ("13",),
                                                                                          "r.example/x")
    assert cli.parse(["images", "13", "12"]).args == cli.parse(["images", "13", "12"]).args
    with pytest.raises(UsageError, match="images pull takes one cell"):
        cli.parse(["images", "pull"])


def test_run_keeps_what_follows_the_double_dash() -> None:
    opts = cli.parse(["run", "bench", "--project", str(ROOT), "--", "--device", "cpu"])
    assert (opts.args.name, opts.args.extra) == ("bench", ("--device", "cpu"))




def _every_action() -> list[tuple[str, argparse.Action]]:
    parser = cli.build_parser(prog="cuda-ext-farm", environ={})
    found = [("", a) for a in parser._actions]
    return found + [(name, a) for name, sub in parser.commands.items() for a in sub._actions]


def test_every_option_has_help_that_names_neither_python_m_ci_nor_nox() -> None:
    actions = _every_action()
    assert len(actions) > 200
    bare = [f"{name} {a.option_strings or a.dest}" for name, a in actions if not (a.help or "").strip()]
    assert bare == []
    texts = [a.help or "" for _, a in actions] + [c.help for c in cli.COMMANDS.values()]
    parser = cli.build_parser(prog="cuda-ext-farm", environ={})
    texts += [parser.format_help()] + [sub.format_help() for sub in parser.commands.values()]
    for text in texts:
        assert "python -m ci" not in text and not re.search(r"\bnox\b", text), text


def test_help_groups_the_commands_and_the_reference_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    grouped = [name for names in reference.GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(cli.COMMANDS)  # each command in one group
    with pytest.raises(SystemExit) as done:
        cli.build_parser(prog="cuda-ext-farm", environ={}).parse_args(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    at = [text.index(f"\n{group}:\n") for group in reference.GROUPS]
    assert at == sorted(at)
    for group, names in zip(reference.GROUPS, reference.GROUPS.values(), strict=True):
        section = text[text.index(f"\n{group}:\n"):].split("\n\n")[0]
        assert [line.split()[0] for line in section.splitlines()[1:] if re.match(r"  \S", line)] == list(names)
    doc = DOC.read_text(encoding="utf-8")
    for name, sub in cli.build_parser(prog="cuda-ext-farm", environ={}).commands.items():
        part = doc[doc.index(f"### `{name}`"):].split("\n### ")[0]
        for action in reference.options(sub):
            for flag in action.option_strings or [str(action.metavar or action.dest)]:
                assert f"`{flag}" in part or f", {flag}" in part, (name, flag)
