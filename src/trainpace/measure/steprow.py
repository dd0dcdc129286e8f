"""One optimizer step while the recorder fills it in (:class:`StepRow`), and the values of
the ``steps.jsonl`` record made of it (:func:`records_of`), on the writer thread.

Shared by the hot-path recorder (:mod:`trainpace.measure.recorder`), which fills rows in, and
the device read-back (:mod:`trainpace.measure.readback`), which resolves their device times
and values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

from trainpace.measure.batch import TokenCount
from trainpace.measure.clock import Marker
from trainpace.records import StepValues


class StepRow:
    """One optimizer step while it is being recorded and resolved.

    Its fields start as class attributes (every default is immutable), so making a row sets
    nothing: one is made per step, on the hot path. Lists are made when a first value comes
    (an empty tuple until then): most steps never have tokens, losses or markers.
    """

    wait_s = 0.0
    outside_s = 0.0  # between the previous step's end and this step's first fetch
    h2d_s: float | None = None
    samples = 0
    samples_unknown = False  # a batch of the step could not be counted
    tokens: list[TokenCount] | tuple[()] = ()
    batches = 0
    fetched_since_micro = 0
    micro_done = 0
    losses: list[Any] | tuple[()] = ()
    metrics: list[Any] | tuple[()] = ()
    wait_markers: list[tuple[Marker, Marker]] | tuple[()] = ()
    h2d_markers: list[tuple[Marker, Marker]] | tuple[()] = ()
    step = 0
    end_s = 0.0  # clock() at the step's end
    cycle_s = 0.0  # host cycle time
    start_marker: Marker | None = None
    end_marker: Marker | None = None
    # (step_s, exposed_wait_s, h2d_s) from the device's events, while its values are read
    device_times: tuple[float, float | None, float | None] | None = None
    emitted = False  # handed out as a record


def as_float(value: Any) -> float:
    """A value kept by ``observe()`` as a number: a tensor's mean (one element: itself), read
    now, on the thread that makes the record."""
    if isinstance(value, torch.Tensor):
        return float(value.item()) if value.numel() == 1 else float(value.float().mean())
    return float(value)


def step_loss(values: list[Any] | tuple[()]) -> tuple[float | None, bool | None]:
    """The step's mean loss and whether a loss was NaN or infinite (then no mean: None)."""
    if not values:
        return None, None
    kept = [as_float(v) for v in values if v is not None]
    if not all(map(math.isfinite, kept)):
        return None, True
    return (sum(kept) / len(kept) if kept else None), False


def mean_of(values: list[Any] | tuple[()]) -> float | None:
    """The mean of the finite values kept (None when there is none)."""
    finite = [as_float(v) for v in values if v is not None]
    if not finite:
        return None
    mean = sum(finite) / len(finite)
    return mean if math.isfinite(mean) else None


def records_of(rows: Iterable[StepRow], t0: float | None, metered: bool) -> list[StepValues]:
    """The rows' ``steps.jsonl`` records (their values, :data:`~trainpace.records.StepValues`):
    the step time is the device's time between the step's events where it was read
    (``device_times``), else the host cycle; the time outside the steps taken out of it.
    One loop, no call per plain step: on a loop of tiny steps this is most of the writer's
    work per step."""
    out: list[StepValues] = []
    append = out.append
    for row in rows:
        row.emitted = True
        times = row.device_times
        if times is None:
            step_s, exposed_wait_s, h2d_s = row.cycle_s - row.outside_s, None, row.h2d_s
        else:
            step_s, exposed_wait_s, h2d_s = times
        losses, metrics, tokens = row.losses, row.metrics, row.tokens
        loss, nonfinite = step_loss(losses) if losses else (None, None)
        append((
            row.step,
            row.end_s - t0,  # type: ignore[operator]  # t_s: a row is closed after touch()
            step_s,
            row.wait_s,
            exposed_wait_s,
            h2d_s,
            None if row.samples_unknown else row.samples,  # samples
            int(sum(tokens)) if tokens else None,  # tokens
            row.batches,  # micro_batches
            loss,
            mean_of(metrics) if metrics else None,  # metric
            row.outside_s if metered else None,  # outside_s
            nonfinite,  # loss_nonfinite
        ))
    return out
