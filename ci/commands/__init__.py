"""The farm's commands: one module per verb (``ci/commands/<verb>.py``), listed once in ``ci/cli.py``'s
``COMMANDS``.

Each module declares its parser (``configure``), its arguments (a frozen ``Args`` dataclass), its traits (what the
entry checks before it runs: ``ci/commands/command.py``) and ``run(options) -> int``, and ends with its ``COMMAND``.
``ci/cli.py`` builds ``python -m ci``'s parser from the table, ``noxfile.py`` its pass-through sessions, and
``docs/commands.md`` is generated from it. Nothing below the entry imports this package.

The table sits in ``ci/cli.py``, not here, so that the command line is one floor above the commands and no more
(``ci/launch.py`` -> ``ci/cli.py`` -> a command -> the part it runs).

Standard library only at import time (the command modules import what they run with inside ``run``).
"""
