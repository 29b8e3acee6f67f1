"""``CIBW_ENVIRONMENT`` from a build's composed environment (``ci/builds/environment.py``): what the container build
and the Windows build hand cibuildwheel.

cibuildwheel reads the option as bash words (bashlex) and evaluates ``$NAME`` and ``$(...)`` in them. Each value is
double-quoted with ``\\``, ``"``, ``$``, `````, ``<`` and ``>`` escaped, so it reaches the build as composed: a
project's ``-DNAME=\\"x\\"``, a ``$`` in a flag, the backslashes of a Windows path. bashlex drops every other
backslash inside double quotes (unlike bash), and reads ``<(`` as a process substitution even there, so these six
are the whole rule (tests/unit/builds/test_cibw_environment.py runs random values through cibuildwheel's parser).

``PATH`` is the one value that names the machine's own: a build that sets it keeps the one cibuildwheel's step has
after it (the image's, or vcvars64's and the toolkit's on Windows, and cibuildwheel's build venv in front of
both), written as ``$PATH`` for cibuildwheel to fill in. Without it the build would lose its compilers and its
Python.
"""

from __future__ import annotations

from collections.abc import Mapping

#: What a backslash escapes inside the double quotes (see the module's docstring).
ESCAPED = frozenset('\\"$`<>')


def quote(value: str) -> str:
    """``value`` as one double-quoted word that cibuildwheel's parser gives back unchanged."""
    return '"' + "".join(f"\\{c}" if c in ESCAPED else c for c in value) + '"'


def render(variables: Mapping[str, str], *, pathsep: str) -> str:
    """The option for ``variables``; ``pathsep``: the build machine's path separator (``;`` on Windows)."""
    words = []
    for name, value in variables.items():
        word = quote(value)
        if name == "PATH":
            word = f'{word[:-1]}{pathsep if value else ""}$PATH"'
        words.append(f"{name}={word}")
    return " ".join(words)
