"""What the tests of the FLOP counter run: a function once under a StepCounter."""

from __future__ import annotations

from collections.abc import Callable

from trainpace.measure.flops import StepCount, StepCounter


def count_step(fn: Callable[[], object]) -> StepCount | None:
    """Run ``fn()`` once under a :class:`StepCounter`; its count (None if it could not count)."""
    with StepCounter() as counter:
        fn()
    return counter.result
