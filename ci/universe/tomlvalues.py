"""Typed readers of ``[tool.cuda-ext-farm]`` values: each returns the value or raises one :class:`ConfigError` line
naming the key, the value and how to write it."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from ci.errors import UsageError
from ci.universe import sizes

TABLE = "cuda-ext-farm"


class ConfigError(UsageError):
    """The project configuration is missing, malformed or asks for something impossible."""


def _key(name: str) -> str:
    return f"[tool.{TABLE}] {name}"


def size(table: Mapping[str, Any], name: str, default: int) -> int:
    value = sizes.parse(table.get(name, default))
    if value is None:
        raise ConfigError(f"{_key(name)} is not a size", repr(table[name]),
                          'write a number of bytes or a size like "95 MiB"')
    return value


def string(table: Mapping[str, Any], key: str, default: str | None) -> Any:
    value = table.get(key, default)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{_key(key)} must be a string", repr(value), f'write {key} = "..."')
    return value


def boolean(table: Mapping[str, Any], key: str, default: bool) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{_key(key)} must be true or false", repr(value), f"write {key} = true (or false)")
    return value


def choice(table: Mapping[str, Any], key: str, choices: tuple[str, ...], default: str) -> Any:
    value = table.get(key, default)
    if value not in choices:
        raise ConfigError(f"{_key(key)} has a bad value", repr(value), f"use one of {', '.join(map(repr, choices))}")
    return value


def string_list(table: Mapping[str, Any], key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    value = table.get(key, default)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{_key(key)} must be a list of strings", repr(value), f'write {key} = ["..."]')
    return tuple(v.strip() for v in value)


def subset(table: Mapping[str, Any], key: str, choices: tuple[str, ...], default: tuple[str, ...],
           required: str | None = None) -> tuple[str, ...]:
    """A list of some of ``choices`` (a lone string is one); ``required``: the one it must hold."""
    value = string_list(table, key, default)
    unknown = [v for v in value if v not in choices]
    if unknown:
        raise ConfigError(f"{_key(key)} names an unknown value", unknown[0], f"use some of {', '.join(choices)}")
    if required is not None and required not in value:
        raise ConfigError(f"{_key(key)} must include {required!r}", repr(list(value)),
                          f'write {key} = ["{required}"] (or leave it out for {", ".join(default)})')
    return tuple(c for c in choices if c in value)


def versions(table: Mapping[str, Any], key: str, pattern: str) -> tuple[tuple[str, ...], SpecifierSet | None]:
    value = table.get(key)
    if value is None:
        return (), None
    if isinstance(value, str) and any(op in value for op in "<>=!~"):
        try:
            return (), SpecifierSet(value)
        except InvalidSpecifier:
            raise ConfigError(f"{_key(key)} is not a version specifier", repr(value),
                              'write it like ">=2.11"') from None
    items = string_list(table, key, ())
    bad = [v for v in items if not re.fullmatch(pattern, v)]
    if bad:
        example = '["2.11", "2.13"]' if key == "torch" else '["3.11", "3.12", "3.13t"]'
        raise ConfigError(f"{_key(key)} has a bad version", bad[0], f"write versions like {example} or a specifier")
    return items, None


def string_table(table: Mapping[str, Any], key: str, default: Mapping[str, str],
                  placeholders: tuple[str, ...]) -> Mapping[str, str]:
    value = table.get(key, default)
    if not isinstance(value, dict) or not all(isinstance(v, (str, int, bool)) for v in value.values()):
        raise ConfigError(f"{_key(key)} must be a table of strings", repr(value), f'write {key} = {{ NAME = "1" }}')
    result = {}
    for name, raw in value.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ConfigError(f"{_key(key)} has a bad environment variable name", name, "use letters, digits and _")
        text = str(raw).lower() if isinstance(raw, bool) else str(raw)
        for field in re.findall(r"\{([^{}]*)\}", text):
            if field not in placeholders:
                raise ConfigError(f"{_key(key)}.{name} uses an unknown placeholder", "{" + field + "}",
                                  f"use one of {', '.join('{' + p + '}' for p in placeholders)}")
        result[name] = text
    return result


def command(table: Mapping[str, Any], key: str, placeholders: tuple[str, ...]) -> tuple[str, ...] | None:
    value = table.get(key)
    if value is None:
        return None
    where = f"[tool.{TABLE}.commands] {key}"
    if isinstance(value, str):
        try:
            parts = shlex.split(value)
        except ValueError as exc:
            raise ConfigError(f"{where} is not a valid command line ({exc})", value, "fix its quoting") from None
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        parts = list(value)
    else:
        raise ConfigError(f"{where} must be a string or a list of strings", repr(value), 'write it like "pytest tests"')
    if not parts:
        raise ConfigError(f"{where} is empty", repr(value), "give a command or remove the key")
    for part in parts:
        for field in re.findall(r"\{([^{}]*)\}", part):
            if field not in placeholders:
                raise ConfigError(f"{where} uses an unknown placeholder", "{" + field + "}",
                                  f"use one of {', '.join('{' + p + '}' for p in placeholders)}")
    return tuple(parts)


def requirements(table: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """A list of PEP 508 requirement strings (``test-requires = ["pytest>=8", "numpy"]``), each one checked."""
    from packaging.requirements import InvalidRequirement, Requirement

    items = string_list(table, key, ())
    for item in items:
        try:
            Requirement(item)
        except InvalidRequirement:
            raise ConfigError(f"{_key(key)} has an invalid requirement", repr(item),
                              f'write one requirement per string, like {key} = ["pytest>=8", "numpy"]') from None
    return items


def extras(table: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """Names of extras (``[project.optional-dependencies]`` keys), normalised as pip compares them."""
    items = string_list(table, key, ())
    for item in items:
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", item):
            raise ConfigError(f"{_key(key)} has a bad extra name", repr(item),
                              f'write the names of the wheel\'s extras, like {key} = ["test"]')
    return tuple(re.sub(r"[-_.]+", "-", item).lower() for item in items)
