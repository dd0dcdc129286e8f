"""What a rule sees (:class:`Context`) and what it returns (:class:`Outcome`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from trainpace.diagnose.thresholds import Thresholds
from trainpace.stats import median
from trainpace.summary import Finding, Severity, Summary


@dataclass(frozen=True)
class Verdict:
    """A finding, the bottleneck category it points at (if any) and the share of time it costs.

    ``lost_pct`` ranks findings of the same severity when the bottleneck is chosen.
    """

    finding: Finding
    bottleneck: str | None = None
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
    bottleneck: str | None = None,
    lost_pct: float | None = None,
) -> Outcome:
    """An outcome holding one finding."""
    finding = Finding(id=finding_id, severity=severity, title=title, evidence=evidence,
                      advice=list(advice))
    return Outcome(verdicts=(Verdict(finding, bottleneck, lost_pct),))


def banded(value: float, warning: float, critical: float) -> Severity:
    """The severity of a value against its warning and critical thresholds."""
    return "critical" if value >= critical else "warning" if value >= warning else "info"


@dataclass(frozen=True)
class StepTimes:
    """The measured (non-warm-up) steps with a known step time, as parallel lists."""

    step: list[int] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    wait_s: list[float] = field(default_factory=list)
    t_s: list[float | None] = field(default_factory=list)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


@dataclass(frozen=True)
class Context:
    """The inputs of every rule. ``steps``/``system`` are None when not given (a trace summary)."""

    summary: Summary
    steps: Sequence[Mapping[str, Any]] | None
    system: Sequence[Mapping[str, Any]] | None
    meta: Mapping[str, Any]
    t: Thresholds

    @cached_property
    def times(self) -> StepTimes:
        """The measured steps' times (empty when no step records were given).

        A step is warm-up when its record says so or when it is among the first
        ``summary.steps.warmup`` (records written before warm-up was decided say false).
        """
        out = StepTimes()
        warmup = self.summary.steps.warmup
        for index, record in enumerate(self.steps or (), start=1):
            step_s = _number(record.get("step_s"))
            step = int(record.get("step") or index)
            if record.get("warmup") or step <= warmup or step_s is None:
                continue
            out.step.append(step)
            out.step_s.append(step_s)
            out.wait_s.append(_number(record.get("wait_s")) or 0.0)
            out.t_s.append(_number(record.get("t_s")))
        return out

    @cached_property
    def step_s(self) -> float | None:
        """The median step time: the summary's, else the records'."""
        if self.summary.time.step_s_median is not None:
            return self.summary.time.step_s_median
        return median(self.times.step_s)

    @property
    def measured_steps(self) -> int:
        """How many steps the figures cover."""
        return self.summary.steps.measured or len(self.times.step_s)

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
        values = (_number(row.get(key)) for row in self.system or ())
        return [v for v in values if v is not None]

    @property
    def samples_per_step(self) -> float | None:
        """Samples per optimizer step, from the throughput figures."""
        tp = self.summary.throughput
        if tp.samples_per_s is None or not tp.steps_per_s:
            return None
        return tp.samples_per_s / tp.steps_per_s
