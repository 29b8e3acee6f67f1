"""What ccache did in one build, from its stats log (``CCACHE_STATSLOG``: a ``# <file>`` line before each compile's
counters, one counter name a line): the shared counters of the cache folder would mix every build that runs at the
same time."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

HITS = ("direct_cache_hit", "preprocessed_cache_hit")
REMOTE_ERRORS = ("remote_storage_error", "remote_storage_timeout")


def counts(stats_log: Path) -> dict[str, int]:
    """hits, misses, remote hits and remote errors of the compiles the log recorded."""
    seen = Counter(line.strip() for line in stats_log.read_text(errors="replace").splitlines()
                   if line.strip() and not line.startswith("#")) if stats_log.is_file() else Counter[str]()
    return {"hits": sum(seen[c] for c in HITS), "misses": seen["cache_miss"],
            "remote_hits": seen["remote_storage_hit"], "errors": sum(seen[c] for c in REMOTE_ERRORS), "dist": 0}
