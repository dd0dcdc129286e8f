"""A sink that, once it fails, is dropped with one warning (monitoring never breaks training).

Remote dashboards fail in the middle of runs (a server gone, a disk full, credentials that
expired). The first failure is logged once on the "trainpace" logger; every later record is
ignored, so a dead server costs neither retries nor time.
"""

from __future__ import annotations

import logging

from trainpace.runlog import Record

logger = logging.getLogger(__name__)


class DroppingSink:
    """Base of the dashboard sinks: :meth:`_log` and :meth:`_close` do the work."""

    label = "a sink"
    reads_steps = False  # the window figures only (see trainpace.sinks.base.Sink)
    shows_job = True  # under DDP: the job's figures, at rank 0 (see trainpace.meter.outputs)

    def __init__(self) -> None:
        self.dropped = False

    def log(self, record: Record) -> None:
        """Hand the record to :meth:`_log`, unless this sink was dropped."""
        if self.dropped:
            return
        try:
            self._log(record)
        except Exception as exc:  # noqa: BLE001 - a dashboard must never break training
            self._drop(f"logging to {self.label}", exc)

    def close(self) -> None:
        """Call :meth:`_close` (the final summary goes out here), unless dropped."""
        if self.dropped:
            return
        try:
            self._close()
        except Exception as exc:  # noqa: BLE001 - a dashboard must never break training
            self._drop(f"closing {self.label}", exc)
        self.dropped = True

    def _drop(self, what: str, exc: BaseException) -> None:
        self.dropped = True
        logger.warning("trainpace: %s failed (%s: %s); it is dropped and training goes on",
                       what, type(exc).__name__, exc)

    def _log(self, record: Record) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        """Nothing to release by default."""
