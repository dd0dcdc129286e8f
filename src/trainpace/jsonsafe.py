"""Strict JSON from figures that may hold NaN or infinity.

On its own, with no imports of ours, so that printing a result (``trainpace analyze --json``)
does not load the run-folder reader and its step series on the way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def json_safe(value: Any) -> Any:
    """Replace non-finite floats with None, recursively, so the output is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
