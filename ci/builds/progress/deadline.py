"""A build's deadline (``--deadline``, ``FARM_DEADLINE``): a duration from now or a time of day / date, turned into
the moment the nvcc wrapper holds each compile against (``ci/nvcc/admission/``: a compile that would not finish
before it by its record is not started, nor any after it); the build then stops with :class:`DeadlineReached`
(its own exit status, :data:`EXIT_DEADLINE`) and one line, and the same command resumes from the kept work folder
and the compile cache."""

from __future__ import annotations

import datetime
import re
import time
from pathlib import Path

from ci.errors import FarmError, UsageError

#: EX_TEMPFAIL: the build is not done, and trying again continues it.
EXIT_DEADLINE = 75
DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


class DeadlineReached(FarmError):
    """The build stopped at its deadline: what is compiled is kept, the same command resumes."""

    exit_code = EXIT_DEADLINE

    def line(self) -> str:
        return f"{self.what}; {self.fix}"

    def __str__(self) -> str:
        # The target's closing row quotes this: the short form, so the one line says it once.
        return f"stopped at the deadline ({self.value} compiles done)"


def parse(value: str, now: float | None = None) -> float:
    """Seconds since the epoch for ``value``: ``5h30m``/``90m``/``3600s``/``3600`` from ``now``, or ``23:30`` (today,
    else tomorrow) or an ISO date and time (local time unless it says its zone)."""
    now = time.time() if now is None else now
    text = value.strip()
    if text.isdigit():
        return now + int(text)
    match = DURATION.fullmatch(text)
    if text and match and any(match.groups()):
        hours, minutes, seconds = (int(g or 0) for g in match.groups())
        return now + hours * 3600 + minutes * 60 + seconds
    try:
        if re.fullmatch(r"\d{1,2}:\d{2}", text):
            clock = datetime.datetime.strptime(text, "%H:%M").time()
            today = datetime.datetime.fromtimestamp(now).replace(hour=clock.hour, minute=clock.minute, second=0,
                                                                  microsecond=0)
            moment = today if today.timestamp() > now else today + datetime.timedelta(days=1)
            return moment.timestamp()
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise UsageError("--deadline is neither a duration nor a time", repr(value),
                         "give a duration (5h30m, 90m, 3600s) or a time (23:30, 2026-01-31T23:30)") from None


def at_entry(value: str, now: float | None = None) -> str:
    """The deadline as the moment it names, resolved once as the command starts: a duration counts from then, for
    every target of the command alike (not from each target's own start, after its image and environment were
    made), and a moment already past is refused before anything starts (it would stop every build at once and
    tell the user to resume, for ever). The ISO form :func:`parse` reads back."""
    now = time.time() if now is None else now
    moment = parse(value, now)
    if moment <= now:
        raise UsageError("--deadline has already passed", repr(value),
                         "give a duration (5h30m, 90m) or a time still to come (23:30, 2026-01-31T23:30)")
    return datetime.datetime.fromtimestamp(moment, tz=datetime.timezone.utc).isoformat(timespec="seconds")


def stopped(record: Path) -> bool:
    """Whether a compile of this build was refused at the deadline (the wrapper's mark beside the record)."""
    return record.with_name(record.name + ".stopped").exists()


def objects_done(source: Path) -> tuple[int, int]:
    """Compiles done (their object exists) and in all, read from torch's build.ninja in the source copy."""
    done = total = 0
    for ninja in sorted(source.glob("build/*/build.ninja")):
        for line in ninja.read_text(errors="replace").splitlines():
            match = re.match(r"build (\S+\.o): (?:cuda_)?compile ", line)
            if match:
                total += 1
                done += Path(match.group(1).replace("$:", ":")).exists()
    return done, total


def reached(source: Path) -> DeadlineReached:
    done, total = objects_done(source)
    return DeadlineReached(f"stopped at the deadline: {done} of {total} compiles done and cached", f"{done}/{total}",
                           "the same command resumes")
