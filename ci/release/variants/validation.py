"""A release's ``variants/`` folder read back with the reference implementation, ``variantlib``."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

from ci.errors import UsageError
from ci.release.variants import FILE


def validate(folder: Path) -> str:
    """Read ``folder`` back with ``variantlib``: every variant wheel's name (its wheel-name pattern) and
    ``variant.json`` (its dist-info parser, with the label the name gives), the index file (its variants.json
    parser), and that the index file holds exactly the wheels' variants. Returns a one-line summary."""
    try:
        from variantlib.constants import VALIDATION_WHEEL_NAME_REGEX
        from variantlib.errors import ValidationError
        from variantlib.variant_dist_info import VariantDistInfo
        from variantlib.variants_json import VariantsJson
    except ImportError:
        raise UsageError("variantlib is not installed", "variantlib", "install the farm's locked requirements "
                         "(ci/requirements/farm.txt), which hold it") from None
    wheels = sorted(folder.glob("*.whl"))
    index_files = sorted(folder.glob("*-variants.json"))
    if len(index_files) != 1:
        raise UsageError("a variants folder needs exactly one {name}-{version}-variants.json", folder,
                         "write the folder again (release --variant-wheels)")
    seen: dict[str, Any] = {}
    try:
        for wheel in wheels:
            match = VALIDATION_WHEEL_NAME_REGEX.fullmatch(wheel.name)
            label = match.group("variant_label") if match else None
            if label is None:
                raise UsageError("not a variant wheel name (variantlib)", wheel.name, "write the folder again")
            with zipfile.ZipFile(wheel) as zf:
                info = next(n for n in zf.namelist() if n.endswith(f".dist-info/{FILE}"))
                dist_info = VariantDistInfo(zf.read(info), label)
            seen[label] = dist_info.variant_desc
        combined = VariantsJson(json.loads(index_files[0].read_text(encoding="utf-8")))
    except (ValidationError, StopIteration, ValueError) as exc:
        raise UsageError(f"variantlib refuses the variant metadata ({type(exc).__name__}: {exc})", folder,
                         "write the folder again") from None
    if combined.variants != seen:
        raise UsageError("the variants.json does not describe exactly the folder's wheels", index_files[0],
                         "write the folder again")
    return f"variantlib accepts {len(wheels)} variant wheels ({', '.join(sorted(seen))}) and {index_files[0].name}"
