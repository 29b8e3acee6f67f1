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

**Secrets are never said.** A shared compile cache's URL can carry a password (``redis://:pw@host``,
``https://user:pw@host``), sccache and the runner have tokens (``FARM_SCCACHE_TOKEN``, ``SCCACHE_REDIS_PASSWORD``,
``SCCACHE_WEBDAV_TOKEN``, ``ACTIONS_RUNTIME_TOKEN``), an index URL can carry credentials (``PIP_INDEX_URL``). They
reach the farm's output in many ways (a replayable command line with its variables, cibuildwheel's echo of
``CIBW_ENVIRONMENT``, a build's output, an error message), so the farm masks at its few exits rather than at each
place that formats text: both consoles here write through :class:`MaskedStream`, and so do GitHub's annotations, the
step summary and :meth:`Logger.json`; ``ci/proc.py`` masks the echo and the kept copy of a child's output, and the
JSON the farm writes (build reports, environment markers) goes through :func:`mask_data`. Each secret becomes
``***``:

* **registered values** (:func:`register`): the value of every variable whose name says it is a secret
  (:func:`secret_name`) and the credentials inside any URL of any variable, in the process environment (read when
  the logger starts) and in every child's environment (``ci/proc.py``, when it starts one); masked wherever they
  appear, also outside a URL (a tool's error message that quotes a password). Values shorter than
  :data:`MIN_LENGTH` are left to the patterns (they would mask ordinary words);
* **patterns**, for what nobody registered: a URL's userinfo (``scheme://user:***@``, and ``scheme://***@`` for a
  token given as the user name), ccache's ``|bearer-token=***`` attribute, and the value of a secret variable's
  assignment (``FARM_SCCACHE_TOKEN=***``, ``SCCACHE_REDIS_PASSWORD="***"``).

The masking lives here, at the ground floor, because everything that prints imports this module already
(``ci/settings.py``, standard library only, declares which settings are secrets and masks them itself).

The one logger is :data:`log`; modules import it (``from ci.log import log``) and never make a console of their own.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any, cast
from urllib.parse import unquote

from rich.console import Console, RenderableType
from rich.markup import escape

#: What a secret is replaced with.
MASK = "***"
#: Registered values shorter than this are left to the patterns.
MIN_LENGTH = 4

#: Variables the farm and its compile caches know to hold a secret as a whole (the name patterns below catch these
#: too; the list says which ones were checked): sccache's storages and sccache-dist, the runner's cache service.
SECRET_VARIABLES = (
    "FARM_SCCACHE_TOKEN", "SCCACHE_REDIS_PASSWORD", "SCCACHE_REDIS_USERNAME", "SCCACHE_WEBDAV_PASSWORD",
    "SCCACHE_WEBDAV_TOKEN", "SCCACHE_WEBDAV_USERNAME", "SCCACHE_GHA_RUNTIME_TOKEN", "ACTIONS_RUNTIME_TOKEN",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "SCCACHE_DIST_AUTH_TOKEN", "SCCACHE_AZURE_CONNECTION_STRING",
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GITHUB_TOKEN",
)
#: A name holds a secret when one of its words (between underscores) says so: ``HF_TOKEN``, ``PYPI_PASSWORD``, not
#: ``TOKENIZERS_PARALLELISM``.
_SECRET_WORDS = re.compile(r"(?:^|_)(?:TOKEN|PASSWORD|PASSWD|SECRETS?|CREDENTIALS?|PRIVATE_KEY|CONNECTION_STRING)"
                           r"(?:_|$)", re.IGNORECASE)
#: Values that are never secrets, whatever their variable is called (they would mask ordinary words).
_NOT_SECRETS = frozenset({"true", "false", "none", "null", "off", "yes", "auto", "unset", "disabled", "enabled"})

_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*://"
#: ``scheme://user:password@`` or ``scheme://token@``: the userinfo ends at the first ``@`` before any ``/``.
_USERINFO = re.compile(rf"(?P<scheme>{_SCHEME})(?P<user>[^\s/@:'\"]*)(?::(?P<password>[^\s/@'\"]*))?@")
#: ccache's remote storage attributes (``http://host|bearer-token=...``).
_ATTRIBUTE = re.compile(r"(?P<name>\|(?:bearer-token|password|token)=)(?P<value>[^|\s'\"]+)", re.IGNORECASE)
#: ``NAME=value``, ``NAME="value"``, ``NAME='value'`` for a secret-looking NAME at the start of a word.
_ASSIGNMENT = re.compile(r"(?<![^\s\"'`;(])(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>\"[^\"]*\"|'[^']*'|[^\s\"']+)")

_lock = threading.Lock()
_values: set[str] = set()
_ordered: tuple[str, ...] = ()


def secret_name(name: str) -> bool:
    """Whether the variable ``name`` holds a secret as a whole (a token, a password, a key)."""
    return name.upper() in SECRET_VARIABLES or _SECRET_WORDS.search(name) is not None


def register(value: str | None) -> None:
    """Mask ``value`` (and its percent-decoded spelling) wherever it appears from now on."""
    global _ordered
    if not value:
        return
    found = {v for v in (value, unquote(value)) if len(v) >= MIN_LENGTH and v != MASK and v.lower() not in _NOT_SECRETS}
    if found <= _values:
        return
    with _lock:
        _values.update(found)
        _ordered = tuple(sorted(_values, key=len, reverse=True))  # a secret that holds another is masked whole


def url_credentials(text: str) -> list[str]:
    """The secrets inside the URLs of ``text``: each password, a user name given alone (a token), ccache's
    ``bearer-token`` attribute."""
    found: list[str] = []
    for match in _USERINFO.finditer(text):
        password, user = match.group("password"), match.group("user")
        found.append(password if password is not None else user)
    found += [match.group("value") for match in _ATTRIBUTE.finditer(text)]
    return [f for f in found if f and f != MASK]


def register_environ(environ: Mapping[str, str]) -> None:
    """The secrets of an environment: secret variables' values, the credentials in any variable's URLs."""
    for name, value in environ.items():
        if not value:
            continue
        if secret_name(name):
            register(value.strip())
        if "@" in value or "|" in value:
            for secret in url_credentials(value):
                register(secret)


def _userinfo(match: re.Match[str]) -> str:
    user, password = match.group("user"), match.group("password")
    if password is None:
        return f"{match.group('scheme')}{MASK}@" if user else match.group(0)
    return f"{match.group('scheme')}{user}:{MASK}@" if password else match.group(0)


def _assignment(match: re.Match[str]) -> str:
    if not secret_name(match.group("name")):
        return match.group(0)
    value = match.group("value")
    quote = value[0] if value[:1] in "\"'" else ""
    return f"{match.group('name')}={quote}{MASK}{quote}"


def mask(text: str) -> str:
    """``text`` with every secret replaced by ``***`` (registered values, then the patterns)."""
    if not text:
        return text
    for value in _ordered:
        if value in text:
            text = text.replace(value, MASK)
    if "://" in text and "@" in text:
        text = _USERINFO.sub(_userinfo, text)
    if "|" in text:
        text = _ATTRIBUTE.sub(lambda m: m.group("name") + MASK, text)
    if "=" in text:
        text = _ASSIGNMENT.sub(_assignment, text)
    return text


def mask_data(data: object) -> object:
    """``data`` (JSON-like: dicts, lists, tuples, strings) with every string masked (keys included)."""
    if isinstance(data, str):
        return mask(data)
    if isinstance(data, Mapping):
        return {mask(k) if isinstance(k, str) else k: mask_data(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [mask_data(v) for v in data]
    return data


def on_github() -> bool:
    # The runner's own marker, not a user setting: read where it decides how to print (cibuildwheel does the same).
    return os.environ.get("GITHUB_ACTIONS") == "true"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


class MaskedStream:
    """``sys.stderr`` or ``sys.stdout`` (looked up at each write: a test's capture, a redirection) with every secret
    masked. rich writes what one ``print`` rendered in one piece, so a secret is never split between two writes."""

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def stream(self) -> IO[str]:
        found: IO[str] = getattr(sys, self.name)
        return found

    def write(self, text: str) -> int:
        return self.stream.write(mask(text))

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"


def _say(text: str, stream: IO[str]) -> None:
    """A line printed without a console (GitHub's workflow commands), masked."""
    print(mask(text), file=stream, flush=True)


class Logger:
    """Progress on stderr, results on stdout (see the module's docstring)."""

    def __init__(self) -> None:
        # The secrets of the process environment (the farm's own settings among them), before anything is said.
        register_environ(os.environ)
        # rich needs a file's write, flush and isatty only.
        self.progress = Console(file=cast(IO[str], MaskedStream("stderr")), highlight=False, soft_wrap=True,
                                emoji=False)
        # Not a terminal (a pipe, CI's log): wide lines, no wrapping in the middle of a path.
        out = cast(IO[str], MaskedStream("stdout"))
        self.results = Console(file=out, highlight=False, soft_wrap=True, emoji=False) if sys.stdout.isatty() \
            else Console(file=out, width=200, highlight=False, soft_wrap=True, emoji=False)
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
        if on_github():
            _say(f"::warning::{text}", sys.stdout)
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
        if on_github() and len(self._targets) == 1:
            sys.stderr.flush()
            _say(f"::group::{what} {target_id}", sys.stdout)
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
        if on_github():
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
        sys.stdout.write(json.dumps(mask_data(data), indent=2) + "\n")
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
                out.write(mask("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |\n"))
        except OSError:
            pass  # a summary is a courtesy: never fail a build for it


log = Logger()
