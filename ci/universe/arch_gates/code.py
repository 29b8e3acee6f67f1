"""The C, C++ and CUDA text of one file as the gate reader needs it (ci/universe/arch_gates/): comments removed,
strings emptied, directives apart from code, and tokens only where the architecture (or a macro of it) is named;
then the comparisons of the architecture with a number in those tokens (:func:`scan`), as arithmetic of it
(``__CUDA_ARCH__ / 10 >= 89`` holds from 890) and CCCL's ``<nv/target>`` queries (``NV_PROVIDES_SM_89``: from 890,
``NV_IS_EXACTLY_SM_90``: 900 alone, ``NV_HAS_FEATURE_SM_90a``: a 9.0a build alone). Gates come out as
``(value, op, macro, line)``; the macros come in through :class:`MacroNames` (``sources.Macros``).

Standard library only.
"""

from __future__ import annotations

import bisect
import dataclasses
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

#: The macros defined only in an arch-specific (``a``) or family (``f``) build.
SPECIFIC = ("__CUDA_ARCH_SPECIFIC__", "__CUDA_ARCH_FAMILY_SPECIFIC__")
#: Names that stand for the architecture itself (``CUDA_ARCH``: the conventional alias, defined or not).
ARCH_NAMES = ("__CUDA_ARCH__", "CUDA_ARCH")
#: The values ``__CUDA_ARCH__`` takes (``major * 100 + minor * 10``): where a gate's answer can change.
DOMAIN = range(100, 3010, 10)
#: The lines of code read on either side of one that names the architecture (or a macro of it).
WINDOW = 5
#: CCCL's ``<nv/target>`` queries and the arch-specific feature macros nvcc defines (``__CUDA_ARCH_FEAT_SM90_ALL``).
QUERY = re.compile(r"NV_(PROVIDES|IS_EXACTLY)_SM_(\d+)|NV_HAS_FEATURE_SM_(\d+)a|__CUDA_ARCH_FEAT_SM(\d+)_ALL")
#: A name that may become one by pasting (``NV_PROVIDES_SM_ ## x``).
QUERY_PART = re.compile(r"NV_(?:PROVIDES|IS_EXACTLY|HAS_FEATURE)_SM_\w*|__CUDA_ARCH_FEAT_SM\w*")

_OPS: dict[str, Callable[[int, int], bool]] = {">=": operator.ge, ">": operator.gt, "<=": operator.le,
                                               "<": operator.lt, "==": operator.eq, "!=": operator.ne}
_MIRROR = {">=": "<=", ">": "<", "<=": ">=", "<": ">", "==": "==", "!=": "!="}
_CLEAN = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'", re.S)
_STRING = re.compile(r"\"(?:[^\"\\\n]|\\.)*\"")
_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w+)(?:(?:[^\n\\]|\\.|\\\n)*)", re.M)
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*([<\"])([^>\"\n]+)[>\"]", re.M)
_DEFINE = re.compile(r"#\s*define\s+(\w+)(\([^)]*\))?(.*)", re.S)
_TOKEN = re.compile(r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]*|([A-Za-z_]\w*)|(##|&&|\|\||<<=?|>>=?|<=|>=|==|!=|->|::|\S)")
_ARITH = frozenset("+-*/%")
_COMPARE = frozenset(_OPS)
#: Words that end an expression to their right (``return __CUDA_ARCH__ >= 800``).
_KEYWORDS = frozenset({"return", "case", "if", "while", "else", "do", "switch", "sizeof", "const", "constexpr",
                       "static", "auto", "int", "bool", "unsigned", "long", "defined", "throw", "new", "delete"})
_BOOL_LEFT = frozenset({"", "&&", "||", "!", "(", "if", "while", "?"})
_BOOL_RIGHT = frozenset({"", "&&", "||", ")", "?", "{"})


def is_arch(name: str) -> bool:
    return name in ARCH_NAMES or name in SPECIFIC


def is_op(token: Token, text: str) -> bool:
    return token[0] == "o" and token[1] == text


class MacroNames(Protocol):
    """What the comparisons need of the project's macros: those of the architecture (left after expanding, they
    are uses that could not be read), and the value of one that is a number."""

    @property
    def arch(self) -> Mapping[str, Define]: ...

    def number(self, name: str, seen: frozenset[str]) -> int | None: ...


#: A token: its kind (``n`` number, ``i`` name, ``o`` operator, ``d`` a name under ``defined``), text, line, and its
#: group (0: code; a directive's own number otherwise: an expression never crosses a group).
Token = tuple[str, str, int, int]


@dataclasses.dataclass(frozen=True)
class Define:
    name: str
    params: tuple[str, ...] | None  # None: object-like
    body: tuple[Token, ...]


@dataclasses.dataclass
class Parsed:
    """One file as the reader needs it: its lines, includes (``<`` or ``"``, name) and macro definitions, its code
    (comments removed, strings emptied, directives blanked) and its ``#if`` expressions (their tokens)."""

    lines: list[str]
    includes: list[tuple[str, str]]
    defines: list[Define]
    code: str
    starts: list[int]
    conditions: list[list[Token]]
    _tokens: dict[str, list[Token]] = dataclasses.field(default_factory=dict)

    def tokens(self, names: re.Pattern[str]) -> list[Token]:
        """The tokens where ``names`` (the architecture's, its macros') occur: each ``#if`` naming one, and the code
        around each (:data:`WINDOW` lines either side, a group of its own)."""
        if names.pattern not in self._tokens:
            found = [t for c in self.conditions if any(names.fullmatch(t[1]) for t in c if t[0] == "i") for t in c]
            windows: list[list[int]] = []
            for m in names.finditer(self.code):
                line = bisect.bisect_right(self.starts, m.start())
                if windows and line - WINDOW <= windows[-1][1] + 1:
                    windows[-1][1] = line + WINDOW
                else:
                    windows.append([line - WINDOW, line + WINDOW])
            for number, (first, last) in enumerate(windows, len(self.conditions) + 1):
                lo = self.starts[max(first, 1) - 1]
                hi = self.starts[last] if last < len(self.starts) else len(self.code)
                found += _tokens(self.code[lo:hi], lo, self.starts, number)
            self._tokens[names.pattern] = found
        return self._tokens[names.pattern]


def _blank(match: re.Match[str]) -> str:
    text = match.group(0)
    if text[0] == '"':
        return text  # kept for #include, emptied after
    return "''" if text[0] == "'" else " " + "\n" * text.count("\n")


def _number(text: str) -> int:
    if text[:2] in ("0x", "0X"):
        return int(text, 16)
    return int(text, 8) if text[0] == "0" and len(text) > 1 and set(text) <= set("01234567") else int(text)


def _tokens(text: str, offset: int, starts: list[int], group: int) -> list[Token]:
    found = []
    for m in _TOKEN.finditer(text):
        line = bisect.bisect_right(starts, offset + m.start())
        kind = "n" if m.group(1) else "i" if m.group(2) else "o"
        value = str(_number(m.group(1))) if m.group(1) else m.group(0)
        found.append((kind, value, line, group))
    return found


def parse(text: str) -> Parsed:
    """Comments removed, strings emptied (an ``#include``'s kept), directives apart from code."""
    code = _CLEAN.sub(_blank, text)
    includes = [(m.group(1), m.group(2).strip()) for m in _INCLUDE.finditer(code)]
    code = _STRING.sub('""', code)
    starts = [0] + [m.end() for m in re.finditer("\n", code)]
    conditions: list[list[Token]] = []
    defines: list[Define] = []
    parts: list[str] = []
    pos = 0
    for m in _DIRECTIVE.finditer(code):
        parts += [code[pos:m.start()], re.sub(r"[^\n]", " ", m.group(0))]  # blanked: lines and places kept
        pos = m.end()
        kind, body = m.group(1), m.group(0)
        if kind in ("if", "elif", "ifdef", "ifndef"):
            expression = body[body.index(kind) + len(kind):]
            found = _tokens(expression, m.end() - len(expression), starts, len(conditions) + 1)
            if kind != "if" and kind != "elif" and found:
                found.insert(0, ("i", "defined", found[0][2], len(conditions) + 1))
            conditions.append(found)
        elif kind == "define" and (d := _DEFINE.match(body.strip())) is not None:
            params = tuple(p.strip() for p in d.group(2)[1:-1].split(",") if p.strip()) if d.group(2) else None
            defines.append(Define(d.group(1), params, tuple(_tokens(d.group(3), 0, [0], -1))))
    parts.append(code[pos:])
    return Parsed(text.splitlines(), includes, defines, "".join(parts), starts, conditions)


# --- comparisons ---------------------------------------------------------------------------------------------------

#: An arithmetic expression of the architecture: its value for one, and the macros it reads.
Value = tuple[Callable[[int], int], frozenset[str]]


def evaluate(tokens: list[Token], macros: MacroNames, seen: frozenset[str] = frozenset()) -> Value | None:
    """``+ - * / %``, parentheses, numbers, the architecture's names and macros that are numbers; None otherwise."""
    pos = 0

    def primary() -> Value | None:
        nonlocal pos
        if pos >= len(tokens):
            return None
        kind, text = tokens[pos][0], tokens[pos][1]
        pos += 1
        if kind == "i" and is_arch(text):
            return (lambda a: a), frozenset({"__CUDA_ARCH__" if text in ARCH_NAMES else text})
        number = int(text) if kind == "n" else macros.number(text, seen) if kind == "i" else None
        if number is not None:
            return _const(number), frozenset()
        if text in ("-", "+"):
            inner = primary()
            if inner is None or text == "+":
                return inner
            negated = inner[0]
            return (lambda a: -negated(a)), inner[1]
        if text == "(":
            inner = binary(0)
            if inner is None or pos >= len(tokens) or tokens[pos][1] != ")":
                return None
            pos += 1
            return inner
        return None

    def binary(level: int) -> Value | None:
        nonlocal pos
        ops = ("+-", "*/%")[level] if level < 2 else ""
        left = binary(level + 1) if level < 1 else primary()
        while left is not None and pos < len(tokens) and tokens[pos][0] == "o" and tokens[pos][1] in ops:
            op = tokens[pos][1]
            pos += 1
            right = binary(level + 1) if level < 1 else primary()
            if right is None:
                return None
            left = _combine(op, left, right)
        return left

    found = binary(0)
    return found if found is not None and pos == len(tokens) else None


def _const(number: int) -> Callable[[int], int]:
    return lambda a: number


def _combine(op: str, left: Value, right: Value) -> Value:
    f, g = left[0], right[0]
    funcs: dict[str, Callable[[int], int]] = {
        "+": lambda a: f(a) + g(a), "-": lambda a: f(a) - g(a), "*": lambda a: f(a) * g(a),
        "/": lambda a: int(f(a) / g(a)), "%": lambda a: f(a) - g(a) * int(f(a) / g(a))}  # C truncates
    return funcs[op], left[1] | right[1]


def _is_operand(token: Token) -> bool:
    return token[0] == "n" or (token[0] == "i" and token[1] not in _KEYWORDS)


def _skip(tokens: Sequence[Token], i: int, step: int, lo: int, hi: int) -> int | None:
    """Past the parenthesised group that opens at ``i``: the index after its ``)`` (``step`` 1), or before its ``(``
    (``step`` -1, from a ``)``); None when it does not close."""
    depth = 0
    while lo <= i < hi:
        depth += is_op(tokens[i], "(" if step == 1 else ")") - is_op(tokens[i], ")" if step == 1 else "(")
        i += step
        if depth == 0:
            return i
    return None


def _atom(tokens: Sequence[Token], i: int, step: int, lo: int, hi: int) -> int | None:
    """The far edge of the operand at ``i``: a number, a name (a call with its arguments), a parenthesised group;
    rightwards the index after it, leftwards its first index."""
    if not lo <= i < hi:
        return None
    if step == 1:
        if is_op(tokens[i], "("):
            return _skip(tokens, i, 1, lo, hi)
        if tokens[i][0] == "o" and tokens[i][1] in "+-":  # a sign
            return _atom(tokens, i + 1, 1, lo, hi)
        if not _is_operand(tokens[i]):
            return None
        return (_skip(tokens, i + 1, 1, lo, hi) or i + 1) if i + 1 < hi and is_op(tokens[i + 1], "(") else i + 1
    if is_op(tokens[i], ")"):
        j = _skip(tokens, i, -1, lo, hi)
        if j is None:
            return None
        return j if j >= lo and _is_operand(tokens[j]) else j + 1  # f(x): the call
    return i if _is_operand(tokens[i]) else None


def _extend(tokens: Sequence[Token], edge: int, step: int, lo: int, hi: int) -> int:
    """From an operand's edge (the index after it rightwards, its first index leftwards), the edge of the
    arithmetic expression (``+ - * / %``) it is part of."""
    while True:
        op = edge if step == 1 else edge - 1
        if not (lo <= op < hi and tokens[op][0] == "o" and tokens[op][1] in _ARITH):
            return edge
        far = _atom(tokens, op + step, step, lo, hi)
        if far is None:
            return edge
        edge = far


def _runs(tokens: Sequence[Token]) -> list[tuple[int, int]]:
    """Each token's run: the bounds of the tokens of its group around it (a directive, or code between two)."""
    bounds: list[tuple[int, int]] = []
    lo = 0
    for i in range(1, len(tokens) + 1):
        if i == len(tokens) or tokens[i][3] != tokens[lo][3]:
            bounds += [(lo, i)] * (i - lo)
            lo = i
    return bounds


def _operand(tokens: Sequence[Token], i: int, lo: int, hi: int) -> tuple[int, int]:
    """The arithmetic expression token ``i`` sits in, with the parentheses around it alone."""
    start, end = i, i + 1
    while True:
        start, end = _extend(tokens, start, -1, lo, hi), _extend(tokens, end, 1, lo, hi)
        call = start - 2 >= lo and _is_operand(tokens[start - 2])
        if start > lo and end < hi and is_op(tokens[start - 1], "(") and is_op(tokens[end], ")") and not call:
            start, end = start - 1, end + 1
            continue
        return start, end


def _other(tokens: Sequence[Token], at: int, step: int, lo: int, hi: int) -> tuple[int, int]:
    """The operand on the other side of the comparison at ``at`` (``step`` 1: on its right)."""
    i = at + step
    while lo <= i < hi and is_op(tokens[i], "(" if step == 1 else ")"):
        i += step
    if not (lo <= i < hi and _is_operand(tokens[i])):
        return at + 1, at + 1
    return _operand(tokens, i, lo, hi)


def _gates_of(left: Value, op: str, right: Value) -> list[tuple[int, str, str]] | None:
    """The gates of ``left op right``: ``(value, op, macro)``; None when it reads no single macro."""
    macros = left[1] | right[1]
    if len(macros) != 1:
        return [] if not macros else None
    macro = next(iter(macros))
    try:
        if not right[1] and left[0](0) == 0 and left[0](1) == 1 and left[0](890) == 890:
            return [(right[0](0), op, macro)]
        if not left[1] and right[0](0) == 0 and right[0](1) == 1 and right[0](890) == 890:
            return [(left[0](0), _MIRROR[op], macro)]
        truth = [_OPS[op](left[0](v), right[0](v)) for v in DOMAIN]
    except ZeroDivisionError:
        return None
    return [(DOMAIN[k], ">=", macro) for k in range(1, len(truth)) if truth[k] != truth[k - 1]]


def _query(text: str) -> tuple[int, str, str] | None:
    m = QUERY.fullmatch(text)
    if m is None:
        return None
    if m.group(1):
        return int(m.group(2)) * 10, ">=" if m.group(1) == "PROVIDES" else "==", "__CUDA_ARCH__"
    number = m.group(3) or m.group(4)
    return int(number) * 10, "==", f"__CUDA_ARCH_FEAT_SM{number}_ALL"


def _bare(tokens: Sequence[Token], start: int, end: int, lo: int, hi: int) -> bool:
    """Whether the operand ``start:end`` (the architecture's name alone, in parentheses or not) is read for its truth
    (device code or not: ``#if __CUDA_ARCH__``, ``if (__CUDA_ARCH__)``, ``!__CUDA_ARCH__ && x``)."""
    if end - start != 1 + 2 * sum(is_op(t, "(") for t in tokens[start:end]):
        return False
    before = tokens[start - 1][1] if start > lo else ""
    after = tokens[end][1] if end < hi else ""
    return before in ("if", "while") or (before in _BOOL_LEFT and after in _BOOL_RIGHT
                                         and not (before == "(" and after == ")"))


def scan(tokens: Sequence[Token], macros: MacroNames) -> tuple[list[tuple[int, str, str, int]], list[int]]:
    """The gates of expanded ``tokens`` (``(value, op, macro, line)``) and the lines of uses they cannot read."""
    gates: list[tuple[int, str, str, int]] = []
    unread: list[int] = []
    done: set[int] = set()
    runs = _runs(tokens)
    for i, (kind, text, line, _) in enumerate(tokens):
        query = _query(text) if kind in "id" else None
        if query is not None:
            gates.append((*query, line))
        if kind == "i" and text in macros.arch:  # a macro of the architecture that could not be expanded
            unread.append(line)
        if kind != "i" or not is_arch(text) or i in done:
            continue
        lo, hi = runs[i]
        start, end = _operand(tokens, i, lo, hi)
        before = tokens[start - 1][1] if start > lo and tokens[start - 1][0] == "o" else ""
        after = tokens[end][1] if end < hi and tokens[end][0] == "o" else ""
        if after in _COMPARE or before in _COMPARE:
            at = end if after in _COMPARE else start - 1
            other = _other(tokens, at, 1 if at == end else -1, lo, hi)
            sides = ((start, end), other) if at == end else (other, (start, end))
            done.update(range(min(start, other[0]), max(end, other[1])))
            values = [evaluate(list(tokens[a:b]), macros) for a, b in sides]
            found = _gates_of(values[0], tokens[at][1], values[1]) \
                if values[0] is not None and values[1] is not None else None
            if found is None:
                unread.append(line)
            gates += [(*g, line) for g in found or ()]
        elif not _bare(tokens, start, end, lo, hi):
            unread.append(line)
    return gates, unread
