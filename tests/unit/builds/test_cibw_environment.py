"""CIBW_ENVIRONMENT as the container and Windows builds write it (ci/builds/cibw_environment.py), read back by
cibuildwheel's own parser (bashlex): every value exactly, whatever it holds."""

from __future__ import annotations

import random
import string

from cibuildwheel.environment import parse_environment

from ci.builds import cibw_environment


def test_random_values_come_back_unchanged() -> None:
    """Printable text with quotes, $, backquotes, backslashes, <( and newlines: bashlex drops a backslash before
    any character inside double quotes and reads <( as a process substitution even there."""
    chars = string.printable.replace("\x0b", "").replace("\x0c", "").replace("\r", "")
    rng = random.Random(45)
    for _ in range(1500):
        value = "".join(rng.choice(chars) for _ in range(rng.randint(0, 16)))
        variables = {"A": value, "B": "after"}
        assert parse_environment(cibw_environment.render(variables, pathsep=":")).as_dictionary({}) == variables


def test_a_path_the_build_names_goes_before_the_machines_own() -> None:
    variables = {"PATH": r"C:\a $b\bin", "X": "1"}
    seen = parse_environment(cibw_environment.render(variables, pathsep=";")).as_dictionary({"PATH": r"C:\venv"})
    assert seen == {"PATH": r"C:\a $b\bin;C:\venv", "X": "1"}
    empty = parse_environment(cibw_environment.render({"PATH": ""}, pathsep=":")).as_dictionary({"PATH": "/bin"})
    assert empty == {"PATH": "/bin"}  # no empty entry: that would be the current folder
