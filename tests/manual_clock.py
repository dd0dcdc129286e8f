"""A clock the test advances by hand (the ``clock`` fixture; importable by name, unlike a
conftest, which several test folders have)."""

from __future__ import annotations


class ManualClock:
    """A clock the test advances by hand: injected delays with exactly known truth."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
