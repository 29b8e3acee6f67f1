"""Plain-PyTorch reference implementations of every op.

Used by the tests and benchmarks, and as the fallback on devices for which the
package has no compiled kernel. Each lives next to its op (``_<op>.py``).
"""

from __future__ import annotations

from ._round_ste import reference_round_ste as round_ste

__all__ = ["round_ste"]
