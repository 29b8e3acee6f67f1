"""One voice for the farm: progress on stderr, results on stdout, fold groups and a step summary on GitHub Actions.

* **Progress** (what the farm is doing: a target starts, a step starts and ends, something is reused, a warning, a
  target ends, every external command as a replayable ``$ ...`` line) goes to **stderr**, so a command's stdout
  holds only its results and ``--json`` can be piped.
* **Results** (tables, reports, the JSON of ``--json``, a path asked for) go to **stdout** through :meth:`Logger.result`
  and :meth:`Logger.json`.
* On GitHub Actions (``GITHUB_ACTIONS=true``) each target is a fold group (``::group::`` / ``::endgroup::``),
  warnings are ``::warning::`` annotations, and each target's outcome is a row of the job's step summary
  (``GITHUB_STEP_SUMMARY``).

Markup is never read from the text given: a key name in brackets (``[tool.cuda-ext-farm]``) prints as written
(nor are ``:emoji:`` codes). A table passed to :meth:`Logger.result` keeps the styles its builder gave it; the
builder escapes the text it did not write.

Progress, by kind: :meth:`~Logger.command`, :meth:`~Logger.info`, :meth:`~Logger.done`, :meth:`~Logger.reuse`,
:meth:`~Logger.note` (a coloured label, then text), :meth:`~Logger.warn`, :meth:`~Logger.alert` (a signal),
:meth:`~Logger.error` (the last line), :meth:`~Logger.details` (another tool's output); a target's work:
:meth:`~Logger.target` (or ``target_start``/``target_end``; a target inside a target opens no second group) with
:meth:`~Logger.stage` (or ``step``/``step_end``) for its steps.

The one logger is :data:`log`; modules import it (``from ci.log import log``) and never make a console of their own.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console, RenderableType
from rich.markup import escape


def _on_github() -> bool:
    # The runner's own marker, not a user setting: read where it decides how to print (cibuildwheel does the same).
    return os.environ.get("GITHUB_ACTIONS") == "true"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


class Logger:
    """Progress on stderr, results on stdout (see the module's docstring)."""

    def __init__(self) -> None:
        self.progress = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
        # Not a terminal (a pipe, CI's log): wide lines, no wrapping in the middle of a path.
        self.results = Console(highlight=False, soft_wrap=True, emoji=False) if sys.stdout.isatty() else Console(
            width=200, highlight=False, soft_wrap=True, emoji=False)
        self._targets: list[tuple[str, float, str]] = []
        self._step: tuple[str, float] | None = None
        #: The command the entry runs (``build``), for :meth:`activity`.
        self.command_name = ""

    # --- progress (stderr) -----------------------------------------------------------------

    def command(self, line: str) -> None:
        """An external command, as a line that can be run again by hand."""
        self.progress.print(f"[bold cyan]$[/] {escape(line)}")

    def info(self, text: str) -> None:
        self.progress.print(escape(text))

    def done(self, text: str) -> None:
        """A finished piece of work worth one green line (a wheel written, an image ready)."""
        self.progress.print(f"[green]{escape(text)}[/]")

    def reuse(self, what: str) -> None:
        self.progress.print(f"[green]reusing[/] {escape(what)}")

    def note(self, label: str, text: str = "", style: str = "yellow") -> None:
        """A labelled line (``label`` in ``style``, then ``text``): ``removing the staging folder ...``."""
        self.progress.print(f"[{style}]{escape(label)}[/]" + (f" {escape(text)}" if text else ""))

    def alert(self, text: str) -> None:
        """A line in red that is not the final ``error:`` line (a signal is stopping the farm)."""
        self.progress.print(f"[bold red]{escape(text)}[/]")

    def warn(self, text: str) -> None:
        if _on_github():
            print(f"::warning::{text}", file=sys.stdout, flush=True)
        self.progress.print(f"[bold yellow]warning:[/] {escape(text)}")

    def error(self, line: str) -> None:
        """The last line of a failed command (``error: <what> (<value>): <how to fix>``)."""
        self.progress.print(f"[bold red]error:[/] {escape(line.removeprefix('error: '))}")

    def details(self, text: str) -> None:
        """Text another tool printed (a compiler's output, a traceback): shown as is."""
        self.progress.print(text, markup=False)

    def target_start(self, target_id: str, what: str = "build") -> None:
        """A target's work begins: a rule on the terminal, a fold group on GitHub Actions. A target started
        inside another (a wheel built from the sdist during a release check) is a rule only: groups do not nest."""
        self._targets.append((target_id, time.monotonic(), what))
        if _on_github() and len(self._targets) == 1:
            sys.stderr.flush()
            print(f"::group::{what} {target_id}", file=sys.stdout, flush=True)
        self.progress.rule(f"[bold]{escape(what)}[/] {escape(target_id)}")

    def activity(self) -> str:
        """What the farm is doing now, in words for an interruption's line: ``the build of <target> (the wheel
        build)``, ``the test command``."""
        step = self._step[0] if self._step else ""
        if self._targets:
            target_id, _, what = self._targets[-1]
            return f"the {what} of {target_id}" + (f" ({step})" if step else "")
        if step:
            return step
        return f"the {self.command_name} command" if self.command_name else "the farm"

    def step(self, text: str) -> None:
        self._step = (text, time.monotonic())
        self.progress.print(f"[bold]>[/] {escape(text)}")

    def step_end(self, ok: bool = True, detail: str = "") -> None:
        if self._step is None:
            return
        text, started = self._step
        self._step = None
        mark = "[green]done[/]" if ok else "[red]failed[/]"
        extra = f": {escape(detail)}" if detail else ""
        self.progress.print(f"  {mark} {escape(text)} in {time.monotonic() - started:.1f} s{extra}")

    @contextmanager
    def stage(self, text: str) -> Iterator[None]:
        """``step`` ... ``step_end``, failed when the block raises."""
        self.step(text)
        try:
            yield
        except BaseException:
            self.step_end(False)
            raise
        self.step_end(True)

    def target_end(self, ok: bool, summary: str = "") -> None:
        if not self._targets:
            return
        target_id, started, _ = self._targets.pop()
        seconds = time.monotonic() - started
        mark = "[green]ok[/]" if ok else "[red]FAILED[/]"
        self.progress.print(f"{mark} {escape(target_id)} in {seconds:.1f} s" + (f": {escape(summary)}"
                                                                             if summary else ""))
        if _on_github():
            if not self._targets:
                sys.stderr.flush()
                print("::endgroup::", file=sys.stdout, flush=True)
            self.summary_row(target_id, "ok" if ok else "FAILED", f"{seconds:.0f} s", summary)

    @contextmanager
    def target(self, target_id: str, what: str = "build") -> Iterator[None]:
        """``target_start`` ... ``target_end``, failed when the block raises."""
        self.target_start(target_id, what)
        try:
            yield
        except BaseException as exc:
            self.target_end(False, _first_line(exc))
            raise
        self.target_end(True)

    # --- results (stdout) ------------------------------------------------------------------

    def result(self, renderable: RenderableType | str, *, markup: bool = False) -> None:
        """A command's result on stdout: a table, a report, a line the user asked for. A text is printed as
        written unless ``markup``; a table's cells are its builder's business (it escapes what it did not write)."""
        if isinstance(renderable, str):
            self.results.print(renderable, markup=markup)
        else:
            self.results.print(renderable)

    def json(self, data: Any) -> None:
        """``--json``: exactly one JSON document on stdout, nothing else."""
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        sys.stdout.flush()

    # --- GitHub's step summary -------------------------------------------------------------

    def summary_row(self, *cells: str) -> None:
        """One row of the job's step summary (a markdown table; the header is written with the first row)."""
        path = os.environ.get("GITHUB_STEP_SUMMARY")
        if not path:
            return
        try:
            new = not os.path.exists(path) or os.path.getsize(path) == 0
            with open(path, "a", encoding="utf-8") as out:
                if new:
                    out.write("| target | result | time | detail |\n| --- | --- | --- | --- |\n")
                out.write("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |\n")
        except OSError:
            pass  # a summary is a courtesy: never fail a build for it


log = Logger()
