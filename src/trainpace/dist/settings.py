"""The exchange's settings, from the launcher's environment (the one place every rank of a
job reads the same values from)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from trainpace.dist.tree import FLAT_MAX_RANKS

TIMEOUT_ENV = "TRAINPACE_DIST_TIMEOUT_S"
FLAT_MAX_ENV = "TRAINPACE_DIST_FLAT_MAX_RANKS"  # more ranks than this: node leaders merge first
DEFAULT_TIMEOUT_S = 10.0


def timeout_from_env(env: Mapping[str, str] | None = None) -> float:
    """The exchange's bound in seconds (``TRAINPACE_DIST_TIMEOUT_S``, else 10)."""
    raw = (os.environ if env is None else env).get(TIMEOUT_ENV)
    try:
        value = float(raw) if raw is not None else DEFAULT_TIMEOUT_S
    except ValueError:
        value = DEFAULT_TIMEOUT_S
    return value if value > 0 else DEFAULT_TIMEOUT_S


def flat_max_from_env(env: Mapping[str, str] | None = None) -> int:
    """``TRAINPACE_DIST_FLAT_MAX_RANKS``: the largest job rank 0 merges alone."""
    raw = (os.environ if env is None else env).get(FLAT_MAX_ENV, "")
    return int(raw) if raw.strip().isdigit() else FLAT_MAX_RANKS
