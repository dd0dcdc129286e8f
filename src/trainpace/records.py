"""The one step record: what the recorder makes, the summarizer reads and ``steps.jsonl`` holds.

Every other place that needs the fields of a step (the column store, the run-log reader, the
run-folder writer) takes them from here, so the schema is written once. A step is a
:class:`~trainpace.measure.steprow.StepRow` on the hot path; on the writer thread its
record's values (:data:`StepValues`), which become the window's columns
(:class:`~trainpace.series.StepSeries`, for the figures) and its ``steps.jsonl`` line
(:data:`StepLine`) at once; a dict (:class:`StepRecord`) only for whoever reads records.
"""

from __future__ import annotations

from typing import Any, TypedDict, get_type_hints

import msgspec


class StepRecord(TypedDict):
    """One optimizer step (a line of ``steps.jsonl``; every key present, ``None`` if unknown)."""

    step: int
    """1-based optimizer step."""
    t_s: float
    """Seconds from the run's start to the end of this step (host clock)."""
    step_s: float
    """The step's cycle time: from the end of the previous step to the end of this one, data
    wait included, time outside the loop's steps excluded (device clock on CUDA, host on CPU)."""
    wait_s: float
    """Host time blocked in next() on the loader for this step's batches."""
    exposed_wait_s: float | None
    """CUDA only: device idle time while the host waited for the batch."""
    h2d_s: float | None
    """Host-to-device copy time of this step's batches (meter.loader(device=))."""
    samples: int | None
    """Samples in the step (all micro-batches); None when they could not be counted."""
    tokens: int | None
    """Tokens in the step (see throughput.tokens_counted), or None."""
    micro_batches: int
    """Batches the step consumed."""
    loss: float | None
    """Mean of the losses passed to meter.observe() (None when none, or not finite)."""
    metric: float | None
    """Mean of the metrics passed to meter.observe()."""
    outside_s: float | None
    """Time of this step's cycle spent outside both the metered loader and the step
    (evaluation, checkpointing, logging between steps): kept out of ``step_s``."""
    loss_nonfinite: bool | None
    """True when a loss observed in this step was NaN or infinite (``loss`` is then None)."""


STEP_FIELDS: tuple[str, ...] = tuple(StepRecord.__annotations__)
"""The fields of a step record, in file order."""

StepValues = tuple[Any, ...]
"""A step record's values in :data:`STEP_FIELDS` order: what the Meter's writer thread makes
of each step. Its window's values become columns (:meth:`~trainpace.series.StepSeries.from_columns`)
and lines (:data:`StepLine`) while they are in the CPU's caches; a dict is made only for
whoever reads records (a dict per step would cost the writer several times more, and its
GIL time is the loop's)."""

StepLine: type[msgspec.Struct] = msgspec.defstruct(
    "StepLine", list(get_type_hints(StepRecord).items()), gc=False, module=__name__)
"""A ``steps.jsonl`` line to encode: the record's fields as a struct, made positionally from
its :data:`StepValues` (encoded several times faster than a dict)."""

INTEGRAL_FIELDS: frozenset[str] = frozenset({"step", "samples", "tokens", "micro_batches"})
"""Fields that hold whole numbers (a column store keeps them as floats, NaN for None)."""


class Figures(TypedDict, total=False):
    """The figures of a window's steps or the run's (:func:`trainpace.measure.summarize.figures`):
    a window record's ``"window"`` (the console line, TensorBoard points, window observers).

    The step figures are always there (``None`` when unknown); for a window the Meter adds the
    device readings, the target and ``device_kind`` when it has them.
    """

    first_step: int | None
    last_step: int | None
    steps: int
    measured_steps: int
    warmup_steps: int
    measured_s: float | None
    samples_per_s: float | None
    tokens_per_s: float | None
    steps_per_s: float | None
    step_s_median: float | None
    step_s_p90: float | None
    step_s_mean: float | None
    wait_s_per_step: float | None
    wait_pct: float | None
    exposed_wait_s_per_step: float | None
    h2d_s_per_step: float | None
    outside_s: float | None
    loss: float | None
    loss_nonfinite_steps: int
    t_s: float | None
    time_to_target_s: float | None
    eta_to_target_s: float | None
    usd_per_million_samples: float | None  # with Meter(price_per_hour=...)
    usd_per_million_tokens: float | None
    device_kind: str
    device_util_pct: float | None
    memory_used_pct: float | None
    temperature_c: float | None
    bandwidth_util_pct: float | None
