"""Which compile cache a build runs through, where it shares its objects and where it sends its compiles: the
settings ``FARM_COMPILE_CACHE``, ``FARM_CCACHE`` (off), ``FARM_CCACHE_REMOTE``, ``FARM_SCCACHE_SCHEDULER`` and
``FARM_SCCACHE_TOKEN`` read and checked once, as a frozen :class:`CacheChoice`.

Each route has its own default engine, the one it had before sccache came (docs/compile-cache.md has the
measurements behind it): the container builds and ``develop`` run ccache, the host, cross and Windows builds none
(ninja's own incremental build of the target's work folder). A shared storage or a scheduler only makes sense with
an engine, so either one without ``FARM_COMPILE_CACHE`` picks the engine that can use it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

from ci import settings
from ci.errors import UsageError

ENGINES = ("ccache", "sccache")
OFF = ("off", "none", "0", "no", "false")
ROUTES = ("host", "cross", "container", "windows", "develop")
#: The engine of each route when nothing is set (None: no compile cache).
ROUTE_DEFAULT: Mapping[str, str | None] = {"host": None, "cross": None, "windows": None, "container": "ccache",
                                           "develop": "ccache"}
#: ``FARM_CCACHE_REMOTE=gha``: sccache's GitHub Actions cache backend (the workflow exports the runner's cache
#: service URL and token to the build step).
GHA = "gha"


@dataclasses.dataclass(frozen=True)
class Remote:
    """The shared storage: its URL as given, and its scheme (``redis``, ``http``, ``file``, ``gha``).

    A URL may carry credentials, ``redis://:pw@host``, ``redis://user:pw@host``, ``redis://pw@host`` (a lone
    user part is the password, as redis-cli and ccache read it) or ``https://user:pw@host``. Each engine gets them
    the way it understands them (measured with the pinned versions against a redis-server with ``requirepass``):
    sccache 0.16 does not authenticate with a URL's credentials (its storage check waits and gives up), so it gets
    a plain endpoint and its own ``SCCACHE_*_USERNAME``/``SCCACHE_*_PASSWORD``; ccache 4.14 refuses an empty user
    name (``redis://:pw@host`` stores nothing), so it gets ``redis://pw@host`` (``default:pw`` for a password with
    a colon, which the lone form would split).
    """

    url: str
    scheme: str

    def credentials(self) -> tuple[str, str]:
        """The URL's user name and password, percent-decoded (empty when absent)."""
        parts = urlsplit(self.url)
        if "@" not in parts.netloc:
            return "", ""
        user, colon, password = parts.netloc.rsplit("@", 1)[0].partition(":")
        if not colon:  # a lone user part is the password
            user, password = "", user
        return unquote(user), unquote(password)

    def plain(self) -> str:
        """The URL without its credentials."""
        parts = urlsplit(self.url)
        return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]))

    def env(self, engine: str) -> dict[str, str]:
        """The engine's own variables for this storage."""
        if engine == "ccache":
            return {"CCACHE_REMOTE_STORAGE": self._ccache_url()}
        user, password = self.credentials()
        if self.scheme in ("redis", "rediss"):
            parts = urlsplit(self.plain())
            db = parts.path.strip("/")
            kind, env = "REDIS", {"SCCACHE_REDIS_ENDPOINT": self.plain()}
            if db.isdigit():  # sccache reads the database number from its own variable only
                env = {"SCCACHE_REDIS_ENDPOINT": urlunsplit(parts._replace(path="")), "SCCACHE_REDIS_DB": db}
        elif self.scheme in ("http", "https"):
            env, kind = {"SCCACHE_WEBDAV_ENDPOINT": self.plain()}, "WEBDAV"
        else:
            return {"SCCACHE_GHA_ENABLED": "on"}
        if user:
            env[f"SCCACHE_{kind}_USERNAME"] = user
        if password:
            env[f"SCCACHE_{kind}_PASSWORD"] = password
        return env

    def _ccache_url(self) -> str:
        user, password = self.credentials()
        if self.scheme not in ("redis", "rediss") or user or not password:
            return self.url
        userinfo = urlsplit(self.url).netloc.rsplit("@", 1)[0].lstrip(":")
        parts = urlsplit(self.plain())
        return urlunsplit(parts._replace(netloc=f"{'default:' if ':' in password else ''}{userinfo}@{parts.netloc}"))

    def shown(self) -> str:
        """The URL without a password (what a log line may print)."""
        parts = urlsplit(self.url)
        if "@" not in parts.netloc:
            return self.url
        user, colon, _ = parts.netloc.rsplit("@", 1)[0].partition(":")
        hidden = f"{user}:***" if colon else "***"
        return urlunsplit(parts._replace(netloc=f"{hidden}@{parts.netloc.rsplit('@', 1)[-1]}"))


@dataclasses.dataclass(frozen=True)
class Scheduler:
    """An sccache-dist scheduler and the client token it checks (its ``client_auth`` of type ``token``)."""

    url: str
    token: str


@dataclasses.dataclass(frozen=True)
class CacheChoice:
    engine: str | None
    remote: Remote | None = None
    scheduler: Scheduler | None = None


_REMOTE_SCHEMES = {"ccache": ("http", "https", "redis", "rediss", "file"),
                   "sccache": ("http", "https", "redis", "rediss", GHA)}


def parse_remote(value: str) -> Remote:
    """``FARM_CCACHE_REMOTE``: ``redis://host:port``, ``http://host:port/path`` (WebDAV), ``file:///path`` (ccache),
    or ``gha`` (sccache on GitHub Actions)."""
    if value.strip().lower() == GHA:
        return Remote(GHA, GHA)
    match = re.match(r"^(https?|rediss?|file)://(\S+)$", value.strip())
    if not match or (match.group(1) != "file" and not urlsplit(value.strip()).hostname):
        raise UsageError("FARM_CCACHE_REMOTE is not a compile cache storage URL", value,
                         "use redis://host:port, http://host:port/path (a WebDAV or HTTP store), file:///path "
                         "(ccache) or gha (sccache on GitHub Actions)")
    return Remote(value.strip(), match.group(1))


def parse_scheduler(url: str, token: str | None) -> Scheduler:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError("FARM_SCCACHE_SCHEDULER is not an sccache-dist scheduler URL", url,
                         "use http(s)://host:port (the scheduler's public_addr)")
    if not token:
        raise UsageError("FARM_SCCACHE_SCHEDULER needs the scheduler's client token", "FARM_SCCACHE_TOKEN is unset",
                         "set FARM_SCCACHE_TOKEN to the token of the scheduler's [client_auth] (type = \"token\")")
    if any(c in token for c in "\r\n\"\\"):
        raise UsageError("FARM_SCCACHE_TOKEN must be a valid HTTP header value", "it holds a newline, quote or "
                         "backslash", "use the token as the scheduler's [client_auth] has it")
    return Scheduler(url.strip().rstrip("/"), token)


def engine_setting(value: str | None) -> str | None:
    """``FARM_COMPILE_CACHE`` checked: an engine, ``off``, or None (the route decides)."""
    if value is None or not value.strip():
        return None
    chosen = value.strip().lower()
    if chosen in OFF:
        return "off"
    if chosen not in ENGINES:
        raise UsageError("FARM_COMPILE_CACHE names no compile cache the farm drives", value,
                         "use ccache, sccache or off")
    return chosen


def cache_enabled() -> bool:
    """FARM_CCACHE=off turns the compiler cache off everywhere (reproducibility checks, cold timings)."""
    value = settings.current().environ.get("FARM_CCACHE", "on").strip().lower()
    if value not in ("on", "off", "1", "0", "true", "false", "yes", "no"):
        raise UsageError("FARM_CCACHE must be on or off", value, "set FARM_CCACHE=on or FARM_CCACHE=off")
    return value in ("on", "1", "true", "yes")


def choose(route: str) -> CacheChoice:
    """The compile cache of a build on ``route`` (one of :data:`ROUTES`), from the resolved settings."""
    remote_value = settings.value("FARM_CCACHE_REMOTE")
    remote = parse_remote(remote_value) if remote_value else None
    scheduler_url = settings.value("FARM_SCCACHE_SCHEDULER")
    scheduler = parse_scheduler(scheduler_url, settings.value("FARM_SCCACHE_TOKEN")) if scheduler_url else None
    asked = engine_setting(settings.value("FARM_COMPILE_CACHE"))
    if asked == "off" or not cache_enabled():
        return CacheChoice(None)
    needs_sccache = scheduler is not None or (remote is not None and remote.scheme == GHA)
    if asked == "ccache" and needs_sccache:
        what = "FARM_SCCACHE_SCHEDULER" if scheduler is not None else "FARM_CCACHE_REMOTE=gha"
        raise UsageError(f"{what} needs sccache, but FARM_COMPILE_CACHE is ccache", asked,
                         "set FARM_COMPILE_CACHE=sccache (or leave it unset)")
    engine = asked or ("sccache" if needs_sccache else ROUTE_DEFAULT[route] or ("ccache" if remote else None))
    if engine is None or (route == "windows" and engine == "ccache"):
        # ccache drives neither cl.exe's nor nvcc's Windows builds the way the farm needs: sccache does.
        return CacheChoice(None)
    if remote is not None and remote.scheme not in _REMOTE_SCHEMES[engine]:
        raise UsageError(f"{engine} cannot use this FARM_CCACHE_REMOTE", remote.url,
                         f"{engine} takes {', '.join(s + '://' for s in _REMOTE_SCHEMES[engine] if s != GHA)}"
                         + (" or gha" if engine == "sccache" else ""))
    return CacheChoice(engine, remote, scheduler)
