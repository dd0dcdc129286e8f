"""Number arguments of the verbs, checked by argparse (a bad one: exit 2, one line).

NaN and infinity parse as floats but measure nothing: every number flag refuses them.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable


def number(kind: type[float] | type[int] = float, *, above: float | None = None,
           at_least: float | None = None,
           at_most: Callable[[], int] | None = None,
           what: str | None = None) -> Callable[[str], float]:
    """An argparse ``type``: a finite number of ``kind``, ``> above`` and ``>= at_least``
    when given, and ``<= at_most()`` (a bound known only when the flag is used); ``what``
    the number is, said when it is refused."""
    said = f" ({what})" if what else ""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number{said}, got {text!r}")
        if above is not None and not value > above:
            raise argparse.ArgumentTypeError(f"must be > {above:g}, got {text}")
        if at_least is not None and not value >= at_least:
            raise argparse.ArgumentTypeError(f"must be >= {at_least:g}, got {text}")
        if at_most is not None and value > (most := at_most()):
            raise argparse.ArgumentTypeError(f"must be <= {most} (the CPU cores available), "
                                             f"got {text}")
        return value

    return parse


def cpu_cores() -> int:
    """The CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
