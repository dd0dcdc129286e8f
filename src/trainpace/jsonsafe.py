"""Strict JSON from any value trainpace writes: figures that may hold NaN or infinity, settings
that hold paths, tuples and callables.

On its own, with no imports of ours, so that printing a result (``trainpace analyze --json``)
does not load the run-folder reader and its step series on the way.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any


def json_safe(value: Any) -> Any:
    """``value`` as strict JSON values, recursively: a non-finite float becomes None, a tuple a
    list, a mapping's keys strings, a path its text, a callable its qualified name, and any
    other object its ``repr``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if callable(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', '?')}"
    return repr(value)
