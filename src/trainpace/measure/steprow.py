"""One optimizer step while the recorder fills it in, the values its record is made of, and
a window of host-clock rows made into its lines and columns (:func:`host_batch`).

Shared by the hot-path recorder (:mod:`trainpace.measure.recorder`), which fills rows in, and
the device read-back (:mod:`trainpace.measure.readback`), which resolves their device times
and values.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

import msgspec

from trainpace.measure.batch import TokenCount
from trainpace.measure.clock import Marker
from trainpace.records import StepRecord
from trainpace.stepcolumns import COLUMNS, NAN, StepBatch, StepColumns, StepLine, columns_of


class StepRow:
    """One optimizer step while it is being recorded and resolved.

    A plain slotted class, not a dataclass: one is made per step (ahead of it, see
    ``StepRecorder.stock_rows``).
    """

    __slots__ = ("batches", "cycle_s", "emitted", "end_marker", "end_s", "fetched_since_micro",
                 "h2d_markers", "h2d_s", "losses", "metrics", "micro_done", "outside_s", "record",
                 "samples", "samples_unknown", "start_marker", "step", "tokens", "wait_markers",
                 "wait_s")

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
        self.record: StepRecord | None = None  # resolved, waiting for device values
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


def host_batch(rows: list[StepRow], t0: float | None, metered: bool) -> StepBatch:
    """The rows' records and columns, made in one loop (where this is most of the
    per-step work when steps are tiny): locals, no call per row for a plain step. The
    columns of the fields every host step has (and the loss) are filled here; a window
    with tokens, metrics, copies or an uncounted batch has them taken from its records."""
    assert t0 is not None or not rows  # a row is closed after touch()
    out: list[msgspec.Struct] = []
    append = out.append
    steps: list[int] = []
    ends: list[float] = []
    cycles: list[float] = []
    waits: list[float] = []
    outsides: list[float] = []
    samples: list[int] = []
    batches: list[int] = []
    loss_values: list[float] = []
    nonfinite_values: list[float] = []
    losses_seen = rare = False
    for row in rows:
        row.emitted = True
        losses, metrics, tokens = row.losses, row.metrics, row.tokens
        if losses:
            loss, nonfinite = step_loss(losses)
            losses_seen = True
        else:
            loss = nonfinite = None
        if metrics or tokens or row.samples_unknown or row.h2d_s is not None:
            rare = True
        outside = row.outside_s
        step, t_s, step_s = row.step, row.end_s - t0, row.cycle_s - outside  # type: ignore[operator]  # asserted above
        # positional, in the fields' order (keywords cost ~0.1 µs a step more)
        append(StepLine(step, t_s, step_s, row.wait_s, None, row.h2d_s,
                        None if row.samples_unknown else row.samples,
                        int(sum(tokens)) if tokens else None, row.batches, loss,
                        mean_of(metrics) if metrics else None,
                        outside if metered else None, nonfinite))
        steps.append(step)
        ends.append(t_s)
        cycles.append(step_s)
        waits.append(row.wait_s)
        outsides.append(outside)
        samples.append(row.samples)
        batches.append(row.batches)
        loss_values.append(NAN if loss is None else loss)
        nonfinite_values.append(NAN if nonfinite is None else nonfinite)
    if rare:
        records = [msgspec.structs.asdict(line) for line in out]
        return StepBatch(out, columns_of(records), records)  # type: ignore[arg-type]
    values: dict[str, array[float] | float] = dict.fromkeys(COLUMNS, NAN)
    values["step"] = array("d", steps)
    values["t_s"] = array("d", ends)
    values["step_s"] = array("d", cycles)
    values["wait_s"] = array("d", waits)
    values["samples"] = array("d", samples)
    values["micro_batches"] = array("d", batches)
    if metered:
        values["outside_s"] = array("d", outsides)
    if losses_seen:
        values["loss"] = array("d", loss_values)
        values["loss_nonfinite"] = array("d", nonfinite_values)
    return StepBatch(out, StepColumns(len(out), values))
