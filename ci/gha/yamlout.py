"""A small, deterministic YAML writer for the generated GitHub Actions workflows.

The workflows are built as plain Python data (dicts keep their order) and written by
:func:`dump`, so the committed files are byte-for-byte what ``python -m ci workflows``
renders and the drift check can compare text. Only what workflows need is supported:
mappings, sequences, strings, whole numbers, booleans, ``None``, multi-line strings as
literal blocks, and :class:`Commented` values (the version comment after a pinned
``uses:``).

Strings are written plain only when YAML 1.1 and 1.2 readers (GitHub's, and the
schema checker's) both read them back as the same string; otherwise JSON-style double
quotes, which YAML reads as the same string. Standard library only.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence

INDENT = "  "

#: Plain scalars that a YAML 1.1 reader turns into booleans, nulls or numbers.
_SPECIAL_WORDS = frozenset({
    "y", "yes", "n", "no", "true", "false", "on", "off", "null", "~", "",
})
_NUMBER = re.compile(r"^[-+]?(\.?[0-9][0-9_.:eExXoObB+-]*|\.inf|\.nan)$", re.IGNORECASE)
#: No control characters (tabs and newlines included) in a plain scalar.
_PLAIN_SAFE = re.compile(r"^[^\x00-\x1f\x7f]+$")


@dataclasses.dataclass(frozen=True)
class Commented:
    """A scalar with a comment after it on the same line (``uses: owner/action@sha # v1.2.3``)."""

    value: str
    comment: str


def _plain_ok(text: str) -> bool:
    if text.lower() in _SPECIAL_WORDS or _NUMBER.match(text):
        return False
    if not _PLAIN_SAFE.match(text) or text != text.strip():
        return False
    if text[0] in "!&*|>'\"%@`[]{},#?:-":
        return False
    # ": " starts a mapping and " #" a comment inside a plain scalar; a trailing ":" is a key.
    return ": " not in text and " #" not in text and not text.endswith(":")


def scalar(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value if _plain_ok(value) else json.dumps(value, ensure_ascii=False)
    raise TypeError(f"cannot write {type(value).__name__} as YAML")


def _key(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"mapping keys must be strings, got {key!r}")
    # GitHub reads `on:` as the trigger key; YAML 1.2 readers read it as a string too.
    return key if key == "on" or _plain_ok(key) else json.dumps(key)


def _is_block_text(value: object) -> bool:
    return isinstance(value, str) and "\n" in value.rstrip("\n")


def _block_text(value: str, indent: str) -> list[str]:
    # Literal block, "keep one final newline" (|) or "strip" (|-) to give back exactly `value`.
    header = "|" if value.endswith("\n") else "|-"
    if value.endswith("\n\n"):
        raise ValueError("multi-line strings may end with at most one newline")
    if value[:1] in (" ", "\t"):
        raise ValueError("multi-line strings must not start with blank space")
    body = value[:-1] if value.endswith("\n") else value
    lines = [header]
    lines += [(indent + line) if line else "" for line in body.split("\n")]
    return lines


def _emit(value: object, indent: str, out: list[str]) -> None:
    if isinstance(value, Mapping):
        if not value:
            out[-1] += " {}"
            return
        for key, item in value.items():
            _emit_entry(f"{indent}{_key(key)}:", item, indent, out)
    elif isinstance(value, Sequence) and not isinstance(value, str):
        if not value:
            out[-1] += " []"
            return
        for item in value:
            _emit_entry(f"{indent}-", item, indent, out, in_sequence=True)
    else:
        raise TypeError(f"expected a mapping or a sequence, got {type(value).__name__}")


def _emit_entry(prefix: str, item: object, indent: str, out: list[str], *, in_sequence: bool = False) -> None:
    child = indent + INDENT
    if isinstance(item, Commented):
        out.append(f"{prefix} {scalar(item.value)} # {item.comment}")
    elif _is_block_text(item):
        assert isinstance(item, str)
        lines = _block_text(item, child)
        out.append(f"{prefix} {lines[0]}")
        out.extend(lines[1:])
    elif isinstance(item, Mapping) and item and in_sequence:
        # "- key: value" with the mapping's other keys aligned under the first.
        start = len(out)
        _emit(item, child, out)
        out[start] = f"{prefix} {out[start][len(child):]}"
    elif isinstance(item, (Mapping, list, tuple)) and item:
        out.append(prefix)
        _emit(item, child, out)
    elif isinstance(item, Mapping):
        out.append(f"{prefix} {{}}")
    elif isinstance(item, (list, tuple)):
        out.append(f"{prefix} []")
    else:
        out.append(f"{prefix} {scalar(item)}")


def dump(document: Mapping[str, object], header: str = "") -> str:
    """The YAML text of ``document`` (a mapping), after ``header`` comment lines."""
    out: list[str] = [f"# {line}".rstrip() for line in header.splitlines()]
    body: list[str] = [""]
    _emit(document, "", body)
    out += body[1:]
    return "\n".join(out) + "\n"
