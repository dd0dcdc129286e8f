"""What a rule sees (:class:`Context`) and what it returns (:class:`Outcome`).

The per-step records are held as columns (float64, NaN for unknown), whether they came as a
:class:`~trainpace.series.StepSeries` (a run of millions of steps is never turned into one
Python object per step) or as a list of ``steps.jsonl`` records.

Memory: the rules' working columns are views of the store's wherever the values are the same
(the measured steps are a contiguous stretch, the data wait is known everywhere), so a run of
1e6 steps is diagnosed with a few MB of masks beside its columns, not a copy of each; the step
numbers are the one column copied (int32 when they fit), a chunk at a time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from trainpace.diagnosis.thresholds import Thresholds
from trainpace.records import STEP_FIELDS
from trainpace.series import StepSeries
from trainpace.stats import median
from trainpace.summary import Bottleneck, Finding, Severity, Summary
from trainpace.units import number_or_none

CHUNK = 1 << 16  # steps converted at a time: bounds the temporaries of a long run


def selection(mask: np.ndarray) -> slice | np.ndarray:
    """The positions where ``mask`` is True: a slice when they are contiguous (the usual case:
    every step past the warm-up), so indexing with it is a view, not a copy."""
    count = int(np.count_nonzero(mask))
    if count == 0:
        return slice(0, 0)
    first = int(np.argmax(mask))
    if bool(mask[first:first + count].all()):
        return slice(first, first + count)
    return np.flatnonzero(mask)


def finite_or(values: np.ndarray, fill: float) -> np.ndarray:
    """``values`` with NaN and inf replaced by ``fill``: ``values`` itself (no copy) when they
    are all finite."""
    known = np.isfinite(values)
    if bool(known.all()):
        return values
    return np.where(known, values, fill)


def _step_numbers(step: np.ndarray) -> np.ndarray:
    """Each record's step number; its position (1-based) where it has none (NaN or ≤ 0).
    Truncated to an integer as ``astype`` does; int32 when every number fits."""
    n = step.size
    top = max(n, float(np.nanmax(step)) if n and not bool(np.isnan(step).all()) else 0.0)
    out = np.empty(n, dtype=np.int32 if top < 2**31 - 1 else np.int64)
    for lo in range(0, n, CHUNK):
        hi = min(n, lo + CHUNK)
        part = step[lo:hi]
        out[lo:hi] = np.where(np.isnan(part) | (part <= 0),
                              np.arange(lo + 1, hi + 1, dtype=np.float64), part)
    return out


class StepColumnSource(Protocol):
    """Anything that gives a step field as a float64 column (NaN for null): a StepSeries."""

    def column(self, name: str) -> np.ndarray: ...

    def __len__(self) -> int: ...


StepsInput = Sequence[Mapping[str, Any]] | StepColumnSource | None


@dataclass(frozen=True)
class Verdict:
    """A finding, the bottleneck category it points at (if any) and the share of time it costs.

    ``lost_pct`` ranks findings of the same severity when the bottleneck is chosen.
    """

    finding: Finding
    bottleneck: Bottleneck | None = None
    lost_pct: float | None = None


@dataclass(frozen=True)
class Outcome:
    """A rule's result: its verdicts, or what it checked and found fine, or why it could not."""

    verdicts: tuple[Verdict, ...] = ()
    checked: str | None = None
    skipped: str | None = None


def verdict(
    finding_id: str,
    severity: Severity,
    title: str,
    evidence: dict[str, Any],
    advice: Sequence[str],
    *,
    bottleneck: Bottleneck | None = None,
    lost_pct: float | None = None,
) -> Outcome:
    """An outcome holding one finding."""
    finding = Finding(id=finding_id, severity=severity, title=title, evidence=evidence,
                      advice=list(advice))
    return Outcome(verdicts=(Verdict(finding, bottleneck, lost_pct),))


def severity_for(value: float, warning: float, critical: float) -> Severity:
    """The severity of a value against its warning and critical thresholds."""
    return "critical" if value >= critical else "warning" if value >= warning else "info"


def _record_columns(records: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Records → columns. The column store's fast path; a record with a value of the wrong
    type (hand-made input, a trace's records) goes through the slow, forgiving one."""
    try:
        series = StepSeries.from_records(records)
        return {name: np.asarray(series.column(name)) for name in STEP_FIELDS}
    except (TypeError, ValueError, OverflowError):
        out = {}
        for name in STEP_FIELDS:
            values = (number_or_none(r.get(name)) for r in records)
            out[name] = np.array([math.nan if v is None else v for v in values], dtype=np.float64)
        return out


class Steps:
    """Every step record as columns (warm-up included), and which were warm-up."""

    def __init__(self, steps: Sequence[Mapping[str, Any]] | StepColumnSource, warmup: int) -> None:
        flags: np.ndarray | None = None
        if isinstance(steps, Sequence):
            self._columns = _record_columns(steps)
            if any("warmup" in r for r in steps[:1]):  # hand-made or older records say so
                flags = np.array([bool(r.get("warmup")) for r in steps])
        else:
            self._columns = {}
            for name in STEP_FIELDS:
                try:
                    self._columns[name] = np.asarray(steps.column(name), dtype=np.float64)
                except KeyError:  # a field the producer does not keep
                    self._columns[name] = np.full(len(steps), math.nan)
        self.n = len(self._columns["step"])
        self.step = _step_numbers(self._columns["step"])
        self.warmup = self.step <= warmup
        if flags is not None:
            self.warmup |= flags

    def column(self, name: str) -> np.ndarray:
        """One field over every step (NaN for unknown)."""
        return self._columns[name]


@dataclass(frozen=True)
class StepTimes:
    """The measured (non-warm-up) steps with a known step time, as parallel columns."""

    step: np.ndarray  # int32 or int64
    step_s: np.ndarray
    wait_s: np.ndarray  # unknown as 0
    t_s: np.ndarray  # NaN unknown
    index: slice | np.ndarray  # positions in :class:`Steps` (a slice when contiguous)

    def __len__(self) -> int:
        return int(self.step_s.size)


def _empty_times() -> StepTimes:
    empty = np.empty(0)
    return StepTimes(np.empty(0, dtype=np.int64), empty, empty, empty, slice(0, 0))


@dataclass(frozen=True)
class Context:
    """The inputs of every rule. ``steps``/``system`` are None when not given (a trace summary)."""

    summary: Summary
    steps: StepsInput
    system: Sequence[Mapping[str, Any]] | None
    meta: Mapping[str, Any]
    t: Thresholds
    mtbf_s: float | None = None  # the machines' mean time between failures, when the user gave it

    @cached_property
    def all_steps(self) -> Steps | None:
        """Every step's columns, warm-up included (None when no records were given)."""
        if self.steps is None:
            return None
        return Steps(self.steps, self.summary.steps.warmup)

    @cached_property
    def times(self) -> StepTimes:
        """The measured steps' times (empty when no step records were given).

        A step is warm-up when its record says so or when it is among the first
        ``summary.steps.warmup``.
        """
        steps = self.all_steps
        if steps is None or steps.n == 0:
            return _empty_times()
        step_s = steps.column("step_s")
        keep = selection(~steps.warmup & np.isfinite(step_s))
        return StepTimes(
            step=steps.step[keep],
            step_s=step_s[keep],
            wait_s=finite_or(steps.column("wait_s")[keep], 0.0),
            t_s=steps.column("t_s")[keep],
            index=keep,
        )

    @cached_property
    def step_s(self) -> float | None:
        """The median step time: the summary's, else the records'."""
        if self.summary.time.step_s_median is not None:
            return self.summary.time.step_s_median
        return median(self.times.step_s)

    @property
    def measured_steps(self) -> int:
        """How many steps the figures cover."""
        return self.summary.steps.measured or len(self.times)

    @property
    def loader(self) -> Mapping[str, Any] | None:
        """The DataLoader's settings: the summary's, else meta.json's ``loader``."""
        if self.summary.data.loader:
            return self.summary.data.loader
        loader = self.meta.get("loader")
        return loader if isinstance(loader, Mapping) and loader else None

    @property
    def cpu_count(self) -> int | None:
        """CPU cores available to the run, from meta.json (``host.cpu_count`` or ``cpu_count``)."""
        host = self.meta.get("host")
        value = host.get("cpu_count") if isinstance(host, Mapping) else None
        if value is None:
            value = self.meta.get("cpu_count")
        return value if isinstance(value, int) and value > 0 else None

    def system_values(self, key: str) -> list[float]:
        """The sampler rows' readings of a top-level key, in time order, unknowns dropped."""
        values = (number_or_none(row.get(key)) for row in self.system or ())
        return [v for v in values if v is not None]

    @cached_property
    def host_rows(self) -> dict[str, np.ndarray]:
        """The sampler rows' host readings as columns (``t_s`` and each ``host.*`` key)."""
        keys = ("system_cpu_pct", "process_cpu_pct", "main_cpu_pct", "memory_used_pct",
                "available_gb", "main_demand_pct", "workers_demand_pct", "workers", "rss_gb",
                "memory_total_gb", "job_cpu_pct")
        rows = [r for r in self.system or () if number_or_none(r.get("t_s")) is not None]
        out = {"t_s": np.array([float(r["t_s"]) for r in rows], dtype=np.float64)}
        for key in keys:
            values = []
            for r in rows:  # system.jsonl nests them under "host"; a flat row has them too
                host = r.get("host")
                v = number_or_none(host.get(key) if isinstance(host, Mapping) else r.get(key))
                values.append(math.nan if v is None else v)
            out[key] = np.array(values, dtype=np.float64)
        out["temperature_c"] = np.array(
            [math.nan if (v := number_or_none(r.get("temperature_c"))) is None else v
             for r in rows],
            dtype=np.float64)
        out["throttled"] = np.array([_throttled(r) for r in rows], dtype=np.float64)
        return out

    def measured_mean(self, key: str) -> float | None:
        """A host reading's time-weighted mean over the measured steps (None unknown)."""
        rows, times = self.host_rows, self.times
        t = rows["t_s"]
        if t.size < 2 or len(times) == 0 or not np.isfinite(times.t_s).any():
            return None
        ends = times.t_s[np.isfinite(times.t_s)]
        start, stop = float(ends[0] - times.step_s[0]), float(ends[-1])
        begin = np.concatenate(([t[0] - (t[1] - t[0])], t[:-1]))
        weights = np.clip(np.minimum(t, stop) - np.maximum(begin, start), 0.0, None)
        values = rows[key]
        known = np.isfinite(values) & (weights > 0)
        if not known.any():
            return None
        return float((values[known] * weights[known]).sum() / weights[known].sum())

    @property
    def steps_rank(self) -> int | None:
        """The rank whose steps a job's diagnosis reads (the merged meta's
        ``dist.steps_rank``: the slowest rank's, see :mod:`trainpace.dist.job_summary`); None
        for one process."""
        dist = self.meta.get("dist")
        rank = dist.get("steps_rank") if isinstance(dist, Mapping) else None
        if self.summary.world_size <= 1 or isinstance(rank, bool) or not isinstance(rank, int):
            return None
        return rank

    @property
    def window_steps(self) -> int | None:
        """trainpace's own window (steps between its window boundaries), from meta.json."""
        config = self.meta.get("config")
        value = config.get("window") if isinstance(config, Mapping) else None
        return value if isinstance(value, int) and value > 1 else None

    @property
    def window_ends(self) -> list[int] | None:
        """The steps at which a window ended early (a metered loader ran out), in order:
        the summary's ``steps.window_ends``; None when not known."""
        return self.summary.steps.window_ends

    @property
    def made_by(self) -> str | None:
        """The front-end that made the run when it is not a loop's own Meter: ``"run"`` or
        ``"demo"`` (its advice then names the verb's flags), ``"lightning"`` or ``"hf"`` (the
        callback's keywords). meta.json's ``made_by``; for a run written before it was
        recorded, inferred from its argv (``trainpace run``/``demo``)."""
        made_by = self.meta.get("made_by")
        if isinstance(made_by, str):
            return made_by if made_by in ("run", "demo", "lightning", "hf") else None
        argv = self.meta.get("argv")  # an old run's
        if (isinstance(argv, list) and len(argv) >= 2 and isinstance(argv[0], str)
                and "trainpace" in argv[0] and argv[1] in ("run", "demo")):
            return str(argv[1])
        return None

    @property
    def samples_per_step(self) -> float | None:
        """Samples per optimizer step, from the throughput figures."""
        tp = self.summary.throughput
        if tp.samples_per_s is None or not tp.steps_per_s:
            return None
        return tp.samples_per_s / tp.steps_per_s


def _throttled(row: Mapping[str, Any]) -> float:
    """100 when the row's (first) GPU reported a throttle reason, 0 when not, NaN unknown."""
    flat = number_or_none(row.get("throttled_pct"))
    if flat is not None:
        return flat
    gpus = row.get("gpus")
    if not isinstance(gpus, list) or not gpus or not isinstance(gpus[0], Mapping):
        return math.nan
    value = gpus[0].get("throttled")
    return math.nan if value is None else 100.0 * bool(value)
