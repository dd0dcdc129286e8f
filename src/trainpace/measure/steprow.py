"""One optimizer step while the recorder fills it in (:class:`StepRow`), and the
``steps.jsonl`` record made of it (:func:`record_of`), on the writer thread.

Shared by the hot-path recorder (:mod:`trainpace.measure.recorder`), which fills rows in, and
the device read-back (:mod:`trainpace.measure.readback`), which resolves their device times
and values.
"""

from __future__ import annotations

import math
from typing import Any

from trainpace.measure.batch import TokenCount
from trainpace.measure.clock import Marker
from trainpace.records import StepRecord


class StepRow:
    """One optimizer step while it is being recorded and resolved.

    A plain slotted class, not a dataclass: one is made per step (ahead of it, see
    ``StepRecorder.stock_rows``).
    """

    __slots__ = ("batches", "cycle_s", "device_times", "emitted", "end_marker", "end_s",
                 "fetched_since_micro", "h2d_markers", "h2d_s", "losses", "metrics", "micro_done",
                 "outside_s", "samples", "samples_unknown", "start_marker", "step", "tokens",
                 "wait_markers", "wait_s")

    def __init__(self) -> None:
        self.wait_s = 0.0
        self.outside_s = 0.0  # between the previous step's end and this step's first fetch
        self.h2d_s: float | None = None
        self.samples = 0
        self.samples_unknown = False  # a batch of the step could not be counted
        # Lists are made when a first value comes (an empty tuple until then): most steps
        # never have tokens or markers, and a row is made per step.
        self.tokens: list[TokenCount] | tuple[()] = ()
        self.batches = 0
        self.fetched_since_micro = 0
        self.micro_done = 0
        self.losses: list[Any] | tuple[()] = ()
        self.metrics: list[Any] | tuple[()] = ()
        self.wait_markers: list[tuple[Marker, Marker]] | tuple[()] = ()
        self.h2d_markers: list[tuple[Marker, Marker]] | tuple[()] = ()
        self.step = 0
        self.end_s = 0.0  # clock() at the step's end
        self.cycle_s = 0.0  # host cycle time
        self.start_marker: Marker | None = None
        self.end_marker: Marker | None = None
        # (step_s, exposed_wait_s, h2d_s) from the device's events, while its values are read
        self.device_times: tuple[float, float | None, float | None] | None = None
        self.emitted = False  # handed out as a record


def step_loss(values: list[Any] | tuple[()]) -> tuple[float | None, bool | None]:
    """The step's mean loss and whether a loss was NaN or infinite (then no mean: None)."""
    if not values:
        return None, None
    kept = [float(v) for v in values if v is not None]
    if not all(map(math.isfinite, kept)):
        return None, True
    return (sum(kept) / len(kept) if kept else None), False


def mean_of(values: list[Any] | tuple[()]) -> float | None:
    """The mean of the finite values kept (None when there is none)."""
    finite = [float(v) for v in values if v is not None]
    if not finite:
        return None
    mean = sum(finite) / len(finite)
    return mean if math.isfinite(mean) else None


def record_of(row: StepRow, t0: float, metered: bool, step_s: float,
              exposed_wait_s: float | None, h2d_s: float | None) -> StepRecord:
    """The row's ``steps.jsonl`` record, its step time given (the host cycle, or the device's
    time between the step's events), the time outside the steps taken out of it."""
    row.emitted = True
    tokens, losses, metrics = row.tokens, row.losses, row.metrics
    loss, nonfinite = step_loss(losses) if losses else (None, None)
    return {
        "step": row.step,
        "t_s": row.end_s - t0,
        "step_s": step_s,
        "wait_s": row.wait_s,
        "exposed_wait_s": exposed_wait_s,
        "h2d_s": h2d_s,
        "samples": None if row.samples_unknown else row.samples,
        "tokens": int(sum(tokens)) if tokens else None,
        "micro_batches": row.batches,
        "loss": loss,
        "metric": mean_of(metrics) if metrics else None,
        "outside_s": row.outside_s if metered else None,
        "loss_nonfinite": nonfinite,
    }


def host_records(rows: list[StepRow], t0: float | None, metered: bool) -> list[StepRecord]:
    """The records of rows timed on the host clock (every value already on the host)."""
    assert t0 is not None or not rows  # a row is closed after touch()
    return [record_of(row, t0, metered, row.cycle_s - row.outside_s, None,  # type: ignore[arg-type]
                      row.h2d_s) for row in rows]
