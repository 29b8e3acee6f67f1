"""A build that tried to download (a prebuilt binary, usually), and the variable that makes it compile instead.

Many extension projects download a prebuilt wheel from their releases unless an environment variable forces a
local build: ``FORCE_BUILD = os.getenv("X_FORCE_BUILD", "FALSE") == "TRUE"``. The advice names that variable with
the very literal the script compares with (``X_FORCE_BUILD = "TRUE"``: ``"1"`` would be ignored by that script),
or, where that literal means off (``!= "0"``, ``== "0": download``), the value that means on (``"1"``),
read from ``setup.py`` with ``ast`` where it parses (a regular expression where it does not). A variable that
skips compiling (``X_SKIP_CUDA_BUILD``) or sets something else (``X_FORCE_CXX11_ABI``, ``FORCE_CUDA``) is never
named: following the advice must build the project, with its CUDA code.

A network message is evidence only where it is fatal: a warning (a compiler cache's remote storage, pip's
``WARNING: Retrying``), a script's own "falling back, building from source" line, or the traceback of a download
the script caught before building locally ("During handling of the above exception...", printed after the
compiler's error when the local build fails) say the build went on without the network, so the cause is what
failed later.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from ci.builds.failure.causes import TABLE, Cause, Found

#: Messages of a network access that failed (urllib, requests, curl, getaddrinfo, sockets).
NETWORK = re.compile(
    r"urlopen error|Name or service not known|Temporary failure in name resolution|Connection refused|"
    r"Network is unreachable|No route to host|Could not resolve host|getaddrinfo failed|nodename nor servname|"
    r"Max retries exceeded with url|Failed to establish a new connection|Connection timed out|"
    r"NewConnectionError|ConnectionResetError|Connection reset by peer|The read operation timed out")
#: Lines whose network message is not fatal: a warning, a compiler cache's remote storage, a fallback.
NOT_FATAL = re.compile(r"warning|ccache|sccache|build(?:ing)? from source|fall(?:ing)? ?back|"
                       r"precompiled wheel not found", re.IGNORECASE)
URL = re.compile(r"""(?:https?|ftp)://[^\s'"<>)\]]+""")
#: Links tools print to their own documentation (setuptools' and pip's deprecation notes).
DOC_LINK = re.compile(r"//(?:[\w-]+\.)*(?:pypa\.io|python\.org|readthedocs\.io)(?:/|$)|//github\.com/pypa/")
#: Variables a build script reads that usually switch between a download and a local build.
SWITCH_WORDS = ("FORCE", "BUILD", "LOCAL", "SKIP", "NO_DOWNLOAD", "SOURCE", "COMPILE", "PREBUILT", "OFFLINE")
#: Names of a variable that forces a local build: FORCE with BUILD/COMPILE/SOURCE/LOCAL, or no download/prebuilt.
FORCES = re.compile(r"FORCE_?(?:LOCAL_?)?(?:BUILD|COMPILE|SOURCE)|BUILD_?FROM_?SOURCE|FROM_SOURCE|LOCAL_?BUILD|"
                    r"(?:NO|SKIP|DISABLE)_?(?:DOWNLOAD|PREBUILT|FETCH|BINARY|WHEEL)|OFFLINE")
#: Names of a variable that leaves something out or sets another thing: never the advice.
NEVER = re.compile(r"SKIP_?(?:CUDA|BUILD|EXT|CPP|COMPILE|KERNEL)|CXX11_?ABI|FORCE_CUDA$|_(?:URL|PATH|DIR|HOME|ROOT)$")


#: Values a switch reads as off, and the value that turns it on instead (case kept: ``FALSE`` gives ``TRUE``).
OFF_TO_ON = {"0": "1", "false": "true", "no": "yes", "off": "on", "n": "y", "f": "t", "": "1"}


@dataclasses.dataclass(frozen=True)
class Switch:
    """An environment variable the build script reads, and the value it compares it with (None: read for its
    truth, any non-empty value)."""

    name: str
    literal: str | None

    def on(self) -> str:
        """The value that turns the switch on: the literal the script compares it with (``== "TRUE"``), but for a
        literal that means off (``!= "0"``, ``== "0": download``: the script tests for the switch being off) the
        value that means on, ``1`` where it is read for its truth."""
        if self.literal is None:
            return "1"
        on = OFF_TO_ON.get(self.literal.lower())
        if on is None:
            return self.literal
        return on.upper() if self.literal.isupper() else on.capitalize() if self.literal.istitle() else on


def switches(build_script: str) -> list[Switch]:
    """The environment variables the build script reads (``os.environ.get("X")``, ``os.getenv("X")``,
    ``os.environ["X"]``, ``"X" in os.environ``) whose names look like a download/build switch, with the literal each
    is compared with."""
    try:
        tree = ast.parse(build_script)
    except SyntaxError:
        return _switches_by_text(build_script)
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: dict[str, Switch] = {}
    for node in ast.walk(tree):
        name = read_name(node)
        if name is None or not any(w in name.upper() for w in SWITCH_WORDS) or (NEVER.search(name.upper()) \
                and not FORCES.search(name.upper())):
            continue
        literal = compared_with(node, parents)
        if name not in found or found[name].literal is None:
            found[name] = Switch(name, literal)
    return list(found.values())


def read_name(node: ast.AST) -> str | None:
    """The variable an ``os.environ``/``os.getenv`` read names, or None."""
    def is_environ(value: ast.expr) -> bool:
        return ast.unparse(value) in ("os.environ", "environ")

    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr == "get" and is_environ(func.value)) or \
                ast.unparse(func) in ("os.getenv", "getenv"):
            return node.args[0].value
    if isinstance(node, ast.Subscript) and is_environ(node.value) and isinstance(node.slice, ast.Constant) \
            and isinstance(node.slice.value, str):
        return node.slice.value
    if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str) \
            and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
            and is_environ(node.comparators[0]):
        return node.left.value
    return None


def compared_with(node: ast.AST, parents: dict[int, ast.AST]) -> str | None:
    """The string the read is compared with (``== "TRUE"``, ``!= "1"``, ``in ("1", "true")``: its first),
    through ``.lower()``/``.strip()``/``int(...)`` around it; None when it is read for its truth alone."""
    parent = parents.get(id(node))
    while not isinstance(node, ast.Compare) and (
            (isinstance(parent, ast.Attribute) and parent.value is node)  # .lower
            or (isinstance(parent, ast.Call) and (parent.func is node or any(a is node for a in parent.args)))):
        node, parent = parent, parents.get(id(parent))
    if not isinstance(parent, ast.Compare) or len(parent.ops) != 1:
        return None
    other = parent.comparators[0] if parent.left is node else parent.left
    if isinstance(other, ast.Constant) and isinstance(other.value, (str, int)) and not isinstance(other.value, bool):
        return str(other.value)
    if isinstance(other, (ast.Tuple, ast.List, ast.Set)) and isinstance(parent.ops[0], ast.In):
        values = [e.value for e in other.elts if isinstance(e, ast.Constant) and isinstance(e.value, (str, int))]
        return str(values[0]) if values else None
    return None


def _switches_by_text(build_script: str) -> list[Switch]:
    names = re.findall(r"""(?:environ\.get|getenv|environ)\s*[\[(]\s*['"]([A-Za-z_][A-Za-z0-9_]*)['"]""",
                       build_script)
    found = []
    for name in dict.fromkeys(names):
        if any(w in name.upper() for w in SWITCH_WORDS) and (FORCES.search(name.upper())
                                                            or not NEVER.search(name.upper())):
            compared = re.search(rf"""['"]{name}['"][^)\n]*\)\s*(?:\.\w+\(\)\s*)*[!=]=\s*['"]([^'"\n]*)['"]""",
                                 build_script)
            found.append(Switch(name, compared.group(1) if compared else None))
    return found


def forcing(build_script: str) -> Switch | None:
    """The variable that forces a local build, when the script reads one: a name that says so
    (``X_FORCE_BUILD``, ``X_NO_DOWNLOAD``, ``X_BUILD_FROM_SOURCE``), never one that skips CUDA."""
    named = [s for s in switches(build_script) if FORCES.search(s.name.upper())]
    return named[0] if named else None


#: What Python prints after an exception that was caught and led to another: the first one did not end the build.
HANDLED = "During handling of the above exception, another exception occurred:"


def _fatal(output: str, at: int) -> bool:
    """Whether the network message at ``at`` ended the build: not on a warning or fallback line, and not the
    exception of a traceback that was handled (a download that failed, then a local build that failed for its own
    reason: Python prints the download's traceback after the compiler's error)."""
    start = output.rfind("\n", 0, at) + 1
    end = output.find("\n", at)
    end = len(output) if end < 0 else end
    if NOT_FATAL.search(output[start:end]):
        return False
    return not output[end:end + 400].lstrip().startswith(HANDLED)


def network(output: str, build_script: str, *, cpu: bool) -> Found | None:
    fatal = [m for m in NETWORK.finditer(output) if _fatal(output, m.start())]
    if not fatal:
        return None
    last = fatal[-1]  # the final exception says the most: <urlopen error [Errno -2] Name or service not known>
    line = output[output.rfind("\n", 0, last.start()) + 1:].split("\n", 1)[0].strip()
    # The address: a URL on the first failing line or the lines before it (the script announcing its download),
    # not a tool's link to its documentation.
    before = output[:fatal[0].end()].splitlines()[-200:]
    urls = [u for text in before for u in URL.findall(text) if not DOC_LINK.search(u)]
    key = "cpu-env" if cpu else "build-env"
    switch = forcing(build_script)
    if switch is not None:
        value = switch.on()
        compared = "reads it as a switch" if switch.literal is None else f'compares it with "{switch.literal}"' + (
            "" if value == switch.literal else f', so "{value}" turns it on')
        fix = (f"the build script forces a local build with {switch.name} (it {compared}): set {key} = "
               f'{{ {switch.name} = "{value}" }} in {TABLE}, so the farm compiles the project instead')
    else:
        others = [s.name for s in switches(build_script)]
        fix = ((f"the build script reads {', '.join(others)}; see which of them turns its download off, " if others
                else "projects that download a prebuilt binary usually have a variable that forces a local build "
                "(look for os.environ in setup.py); ")
               + f"set it in {key} of {TABLE} with the value the script compares it with, so the farm compiles the "
               "project instead")
    return Found(last.start(), Cause("the build tried to reach the network (a download during the build)",
                                     f"{urls[-1] + ': ' if urls else ''}{line[:200]}", fix))


#: A compiler cache that failed to start or to reach its storage: sccache's server (``sccache: error: Server startup
#: failed: cache storage failed to read``), ccache's own errors. The compile failed for the cache, not the code.
CACHE_FAILED = re.compile(r"^(?P<tool>s?ccache): error: (?P<message>.+)$", re.MULTILINE)


def compiler_cache(output: str) -> Found | None:
    found = list(CACHE_FAILED.finditer(output))
    if not found:
        return None
    first = found[0]
    return Found(first.start(), Cause(
        f"the compiler cache ({first['tool']}) failed, so the compile did", first.group(0).strip()[:200],
        f"fix its storage ({first['tool'].upper()}_* variables, FARM_CCACHE_REMOTE) or build without it: "
        "FARM_CCACHE=off"))
