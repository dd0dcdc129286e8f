"""One small sink interface, a null sink and a fan-out.

Every output (the run folder, the console line, TensorBoard, W&B, MLflow, Prometheus) is a
:class:`Sink`. The Meter writes the run folder itself, on its writer thread, and gives every
other sink its own thread and bounded queue (:class:`trainpace.sinks.background.SinkThread`),
so that no sink can hold the run folder back. :class:`FanOut` is the synchronous fan-out for
other callers: a sink that raises is logged once and the others go on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from trainpace.runlog import Record

logger = logging.getLogger(__name__)


@runtime_checkable
class Sink(Protocol):
    """Receives records; must not block the training loop for long.

    A sink whose class sets ``reads_steps = False`` reads only a window record's figures: the
    Meter then gives it window records whose ``"steps"`` list is empty (making a record per
    step costs the writer ~1 µs a step, most of its work when steps are tiny). Without it,
    ``"steps"`` holds the window's step records.
    """

    def log(self, record: Record) -> None:
        """Take one record (see :class:`trainpace.runlog.Record` for the kinds)."""

    def close(self) -> None:
        """Flush and release resources; called once, at the end of the run."""


class NullSink:
    """Drops everything."""

    def log(self, record: Record) -> None:
        """Drop the record."""

    def close(self) -> None:
        """Nothing to release."""


class FanOut:
    """Sends each record to every sink; a failing sink is logged once and skipped."""

    def __init__(self, sinks: Iterable[Sink]) -> None:
        self.sinks: list[Sink] = list(sinks)
        self._reported: set[int] = set()

    def log(self, record: Record) -> None:
        """Send ``record`` to every sink, containing the failure of any one."""
        for sink in self.sinks:
            try:
                sink.log(record)
            except Exception as exc:  # noqa: BLE001 - a sink must never break training
                self._report(sink, "log", exc)

    def close(self) -> None:
        """Close every sink, containing failures."""
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:  # noqa: BLE001 - a sink must never break training
                self._report(sink, "close", exc)

    def _report(self, sink: Sink, action: str, exc: Exception) -> None:
        if id(sink) in self._reported:
            return
        self._reported.add(id(sink))
        logger.warning(
            "trainpace: %s.%s failed (%s: %s); training goes on, further errors of this sink "
            "are not shown",
            type(sink).__name__,
            action,
            type(exc).__name__,
            exc,
        )
