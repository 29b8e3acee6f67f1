"""PEP 503 "simple" package indexes: one per CUDA variant, like PyTorch's own (``…/cu124/<project>/``).

A variant's index lists every file of that variant, each link carrying its SHA-256 (pip checks it)
and the wheel's ``Requires-Python``. A wheel whose core metadata is served beside it (``<wheel>.metadata``, the
``METADATA`` of its dist-info: PEP 658, attribute renamed by PEP 714) says so with ``data-dist-info-metadata`` and
``data-core-metadata`` (both ``sha256=<hex>``, so older and newer installers see it): pip then resolves from that
small file and downloads no wheel it does not install. The pages are static files: a folder on disk
(``pip install --index-url file:///…/index/cu124``), GitHub Pages, any web server.
The links may be relative (a release folder that holds the files next to the index) or absolute
(GitHub Release download URLs).

Layout (``site`` is any folder)::

    site/index.html                     the variants
    site/cu124/index.html               the projects of that variant (PEP 503 root)
    site/cu124/<project>/index.html     the project's files (PEP 503 project page)

Standard library only.
"""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

REPOSITORY_VERSION = "1.0"  # PEP 629
#: PEP 658's attribute and PEP 714's name for it; a page carries both (pip < 23.3 reads the first only).
METADATA_ATTRIBUTES = ("data-dist-info-metadata", "data-core-metadata")
METADATA_SUFFIX = ".metadata"


@dataclasses.dataclass(frozen=True)
class IndexFile:
    """One distribution file as an index links it."""

    name: str
    #: Where the file lives: a URL, or a path relative to the project page.
    url: str
    sha256: str
    requires_python: str | None = None
    #: SHA-256 of ``<url>.metadata`` (PEP 658/714), where the index serves the wheel's METADATA beside it.
    metadata_sha256: str | None = None

    def href(self) -> str:
        return f"{self.url}#sha256={self.sha256}"


def normalize(name: str) -> str:
    """The PEP 503 normalised project name (``classic_ext`` -> ``classic-ext``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def file_url(base: str, *parts: str) -> str:
    """``base/part/part`` with each part percent-encoded (a local version's ``+`` becomes ``%2B``)."""
    return "/".join([base.rstrip("/"), *(quote(p, safe="") for p in parts)])


def _page(title: str, links: Iterable[str]) -> str:
    body = "\n".join(f"    {link}<br>" for link in links)
    return (
        "<!DOCTYPE html>\n<html>\n  <head>\n"
        f'    <meta name="pypi:repository-version" content="{REPOSITORY_VERSION}">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n"
        f"    <h1>{html.escape(title)}</h1>\n{body}\n  </body>\n</html>\n"
    )


def project_page(project: str, files: Sequence[IndexFile]) -> str:
    links = []
    for item in sorted(files, key=lambda f: f.name):
        attrs = f'href="{html.escape(item.href())}"'
        if item.requires_python:
            attrs += f' data-requires-python="{html.escape(item.requires_python)}"'
        if item.metadata_sha256:
            for name in METADATA_ATTRIBUTES:
                attrs += f' {name}="sha256={item.metadata_sha256}"'
        links.append(f"<a {attrs}>{html.escape(item.name)}</a>")
    return _page(f"Links for {normalize(project)}", links)


def listing_page(title: str, names: Iterable[str]) -> str:
    return _page(title, (f'<a href="{html.escape(quote(n))}/">{html.escape(n)}</a>' for n in sorted(names)))


def write_site(site: Path, variants: Mapping[str, Mapping[str, Sequence[IndexFile]]], *, title: str = "") -> list[Path]:
    """Write one PEP 503 index per variant under ``site``; returns the pages written.

    ``variants`` maps a variant (``cu124``) to projects to their files. Two different files of one name in
    one project page cannot be told apart by pip, so that is refused.
    """
    written: list[Path] = []
    for variant, projects in sorted(variants.items()):
        for project, files in sorted(projects.items()):
            seen: dict[str, str] = {}
            for item in files:
                if seen.setdefault(item.name, item.sha256) != item.sha256:
                    raise ValueError(f"two different files named {item.name} in the {variant} index of {project}")
            unique = {f.name: f for f in files}.values()
            page = site / variant / normalize(project) / "index.html"
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text(project_page(project, list(unique)), encoding="utf-8")
            written.append(page)
        root = site / variant / "index.html"
        root.write_text(listing_page(f"Simple index ({variant})", (normalize(p) for p in projects)), encoding="utf-8")
        written.append(root)
    top = site / "index.html"
    site.mkdir(parents=True, exist_ok=True)
    top.write_text(listing_page(title or "Package indexes, one per CUDA variant", variants), encoding="utf-8")
    written.append(top)
    return written


_ANCHOR = re.compile(r"<a\s+([^>]*)>([^<]*)</a>")
_ATTR = re.compile(r'([a-z-]+)="([^"]*)"')


def read_project_page(path: Path) -> list[IndexFile]:
    """The links of a project page this module wrote (tests and checks read indexes back)."""
    files = []
    for attrs_text, text in _ANCHOR.findall(path.read_text(encoding="utf-8")):
        attrs = {k: html.unescape(v) for k, v in _ATTR.findall(attrs_text)}
        url, _, fragment = attrs["href"].partition("#sha256=")
        files.append(IndexFile(html.unescape(text), url, fragment, attrs.get("data-requires-python"),
                               _metadata_hash(attrs)))
    return files


def _metadata_hash(attrs: Mapping[str, str]) -> str | None:
    """The ``sha256=<hex>`` of PEP 714's attribute, else PEP 658's; None without one (or ``"true"``: no hash)."""
    for name in reversed(METADATA_ATTRIBUTES):
        value = attrs.get(name)
        if value is not None:
            return value.partition("sha256=")[2] or None
    return None
