"""Plain-PyTorch reference implementations of every op.

Used by the tests and benchmarks, and as the fallback on devices for which the
package has no compiled kernel. Each lives next to its op (``_<op>.py``).
"""

from __future__ import annotations

from ._bias_act import reference_bias_act as bias_act
from ._lltm import reference_lltm as lltm
from ._round_ste import reference_round_ste as round_ste
from ._upfirdn2d import reference_upfirdn2d as upfirdn2d

__all__ = ["bias_act", "lltm", "round_ste", "upfirdn2d"]
