"""Failures of trainpace's own work: logged once per place, never raised into the loop."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


class LogOnce:
    """Reports a failure of trainpace's own work once per place; the training goes on."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def report(self, where: str, exc: BaseException) -> None:
        if where in self._seen:
            return
        self._seen.add(where)
        logger.warning(
            "trainpace: %s failed (%s: %s); training goes on, the figures may miss it",
            where, type(exc).__name__, exc,
        )

    def warn_once(self, key: str, message: str) -> None:
        """A misuse worth one line (not a failure of ours)."""
        if key in self._seen:
            return
        self._seen.add(key)
        logger.warning("trainpace: %s", message)
