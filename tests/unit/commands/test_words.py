"""The installed command's words (issue 38, item 9): no nox session and no farm source file in any ``--help`` a
user of ``cuda-ext-farm`` reads; hints name the command they typed. (A build's log, read the same way:
tests/integration/test_real_shapes.py, the replace build of fixture j.)"""

from __future__ import annotations

import argparse
import re

import pytest

from ci import cli

#: What a user of the installed command cannot act on: a nox session of the farm's checkout, a file of the farm.
DEVELOPERS_WORDS = re.compile(r"nox -s|\bci/[\w/]+\.py\b|noxfile")


def helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Every parser's --help text, the subcommands' too, by name."""
    found = {parser.prog: parser.format_help()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= helps(sub)
    return found


def test_no_help_of_the_installed_command_names_nox_or_a_farm_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_PROG", "cuda-ext-farm")  # as the installed command's launcher sets it
    monkeypatch.delenv("FARM_STATUS_FILE", raising=False)
    texts = helps(cli.build_parser())
    assert len(texts) > len(cli.COMMANDS)  # the top level, every command, the release and workflows verbs
    bad = {prog: DEVELOPERS_WORDS.findall(text) for prog, text in texts.items() if DEVELOPERS_WORDS.search(text)}
    assert not bad, bad
    assert "cuda-ext-farm matrix lists them" in texts["cuda-ext-farm build"]  # the command the user typed
