"""What ``trainpace analyze`` finds, as frozen records; ``to_dict()`` gives the JSON.

Times are µs (as in the traces), shares are % of a stated whole, ``None`` means "could not be
computed from this trace" and a note says why.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec
from msgspec import field

from trainpace.summary import Finding, Summary

SCHEMA = "trainpace.trace/1"

# The records are msgspec Structs, not dataclasses: a Struct class is built in C, where a
# dataclass compiles its methods at import time, which every ``trainpace analyze`` waits for.


class StepRow(msgspec.Struct, frozen=True, kw_only=True):
    """One ``ProfilerStep#N``, split the way torch-tb-profiler's overview splits it.

    The eight roles (kernel … other) are exclusive, in priority order, and add up to
    ``duration_us``: time covered by a kernel is kernel time even if the host was also in
    the DataLoader then.
    """

    name: str
    start_us: float  # from the first step's start
    duration_us: float  # on the device: to the end of the work the step launched
    host_us: float  # the ProfilerStep span on the host
    kernel_us: float
    memcpy_us: float
    memset_us: float
    communication_us: float
    runtime_us: float
    dataloader_us: float
    cpu_exec_us: float
    other_us: float
    device_busy_us: float  # any device work (kernel, copy, memset) during the step
    compute_us: float  # computation kernels (HTA's rule) during the step
    dataloader_span_us: float  # host time inside DataLoader __next__ during the step


ROLES: tuple[str, ...] = ("kernel", "memcpy", "memset", "communication", "runtime",
                          "dataloader", "cpu_exec", "other")


class StepsBreakdown(msgspec.Struct, frozen=True, kw_only=True):
    """The profiled steps (torch-tb-profiler's definitions, so figures compare with its
    overview)."""

    count: int = 0
    origin_us: float | None = None  # the first step's start on the trace's clock
    dropped: list[str] = field(default_factory=list)  # tail steps whose kernels were cut off
    duration_us_mean: float | None = None
    duration_us_median: float | None = None
    duration_us_p90: float | None = None
    roles_us_mean: dict[str, float] = field(default_factory=dict)
    gpu_util_pct: float | None = None  # kernel time / all steps' span
    dataloader_pct: float | None = None  # DataLoader role (not hidden by device work) / step
    dataloader_span_pct: float | None = None  # host time in DataLoader __next__ / step
    rows: list[StepRow] = field(default_factory=list)


class StreamIdle(msgspec.Struct, frozen=True, kw_only=True):
    """Idle time between consecutive kernels of one stream, by cause (HTA's definitions)."""

    stream: int
    host_wait_us: float
    kernel_wait_us: float
    other_us: float
    gaps: int


class Gap(msgspec.Struct, frozen=True, kw_only=True):
    """A stretch with no device work at all, and what the host was doing meanwhile."""

    start_us: float  # from the start of the device window
    duration_us: float
    step: str | None
    cause: str  # the host activity covering most of it (see idle.CAUSES)
    host_us: dict[str, float]
    top_ops: list[dict[str, Any]]


class IdleBreakdown(msgspec.Struct, frozen=True, kw_only=True):
    """Why the device was idle."""

    host_wait_us: float  # the next kernel was not launched yet
    kernel_wait_us: float  # launched, a short (< kernel_wait_threshold_us) launch gap
    other_us: float  # launched long before, waiting on something else (events, streams)
    kernel_wait_threshold_us: float
    streams: list[StreamIdle]
    gap_threshold_us: float
    gaps_count: int
    gaps_total_us: float
    gaps_pct: float | None  # of the device window
    gaps_by_cause_us: dict[str, float]
    gaps: list[Gap]  # the longest ones


class CategoryRow(msgspec.Struct, frozen=True, kw_only=True):
    category: str
    count: int
    total_us: float
    pct: float | None  # of all device kernel time (durations summed)


class KernelRow(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    category: str
    count: int
    total_us: float
    mean_us: float
    median_us: float
    max_us: float
    pct: float | None


class KernelBreakdown(msgspec.Struct, frozen=True, kw_only=True):
    """Device kernels by category, the top ones, and the signs of a launch-bound step."""

    count: int
    per_step: float | None
    median_us: float | None
    short_pct: float | None  # share of kernels shorter than short_threshold_us
    short_threshold_us: float
    launch_lag_us: float | None  # median: launch call's end to kernel start
    launch_lag_p90_us: float | None
    categories: list[CategoryRow]
    top: list[KernelRow]


class OperatorRow(msgspec.Struct, frozen=True, kw_only=True):
    """One host operator (by name): its self time is its span less the spans nested in it."""

    name: str
    count: int
    self_us: float
    total_us: float  # the spans summed (an operator nested in one of its own name counts twice)
    self_pct: float | None  # of the host time analyzed (HostBreakdown.window_us)
    in_dataloader_us: float  # of its self time, inside the DataLoader's __next__


class HostStepRow(msgspec.Struct, frozen=True, kw_only=True):
    """One ``ProfilerStep#N`` on the host, split as :class:`HostBreakdown` splits the whole."""

    name: str
    duration_us: float
    dataloader_us: float
    operators_us: float
    python_us: float


class HostBreakdown(msgspec.Struct, frozen=True, kw_only=True):
    """Where the host's time went, for a trace with no device work (a CPU run).

    On the threads that ran the steps, each moment of the window counts once, in this order:
    *data loading* (inside the DataLoader's ``__next__``, the ops it runs included), then
    *operators* (inside an ATen op or autograd node), then *Python*: the rest, the
    interpreter running the loop, module calls and the optimizer between operators.
    """

    window: str  # what the window is: the ProfilerStep spans, or the main thread's span
    window_us: float
    steps: int
    dataloader_us: float
    dataloader_pct: float | None
    operators_us: float
    operators_pct: float | None
    python_us: float
    python_pct: float | None
    threads: int  # threads with host events in the window
    operator_events: int
    python_function_events: int  # recorded with with_stack=True
    top: list[OperatorRow]
    rows: list[HostStepRow]


class RankAnalysis(msgspec.Struct, frozen=True, kw_only=True):
    """One trace (one rank). The temporal breakdown uses HTA 0.5's definitions: the window
    runs from the first to the last device event, the last ProfilerStep is left out when
    there are two or more, and memcpy/memset count as device work (non-compute)."""

    rank: int
    path: str
    device_name: str | None = None
    device_listed: bool = False  # the trace's deviceProperties names a device
    events: int = 0
    device_events: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    window_us: float | None = None
    idle_us: float | None = None
    compute_us: float | None = None
    non_compute_us: float | None = None
    idle_pct: float | None = None
    compute_pct: float | None = None
    non_compute_pct: float | None = None
    comm_comp_overlap_pct: float | None = None  # share of communication hidden under compute
    communication_us: float | None = None
    exposed_communication_us: float | None = None  # communication with no compute under it
    hta_dropped_step: str | None = None
    window_steps: int = 0  # ProfilerSteps inside the device window
    steps: StepsBreakdown = field(default_factory=StepsBreakdown)
    idle: IdleBreakdown | None = None
    kernels: KernelBreakdown | None = None
    host: HostBreakdown | None = None  # traces with no device events (CPU runs)
    distributed: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


class CrossRank(msgspec.Struct, frozen=True, kw_only=True):
    """Ranks compared (two or more): per rank ``{rank, step_us_median,
    communication_us_per_step, clock_offset_us}``, where the clock offset is how much later
    the first common ProfilerStep starts on that rank's clock than on the first rank's."""

    ranks: list[dict[str, Any]] = field(default_factory=list)
    step_skew_pct: float | None = None  # slowest rank's median step over the median rank's
    slowest_rank: int | None = None
    notes: list[str] = field(default_factory=list)


class TraceAnalysis(msgspec.Struct, frozen=True, kw_only=True):
    """The analysis of a set of traces (one per rank), with findings from the same rules as a
    live run."""

    ranks: list[RankAnalysis]
    cross_rank: CrossRank
    summary: Summary
    notes: list[str] = field(default_factory=list)
    run_meta: str | None = None  # the run folder's meta.json read with the traces

    @property
    def findings(self) -> list[Finding]:
        return self.summary.diagnosis.findings

    @property
    def bottleneck(self) -> str | None:
        return self.summary.diagnosis.bottleneck

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` object: traces, per-rank breakdowns, findings, and the summary."""
        return {
            "schema": SCHEMA,
            "traces": [
                {"path": r.path, "rank": r.rank, "events": r.events,
                 "device_events": r.device_events, "skipped": r.skipped,
                 "device_name": r.device_name, "distributed": r.distributed}
                for r in self.ranks
            ],
            "ranks": [r.to_dict() for r in self.ranks],
            "cross_rank": msgspec.to_builtins(self.cross_rank),
            "bottleneck": self.bottleneck,
            "findings": [dataclasses.asdict(f) for f in self.findings],
            "summary": self.summary.to_dict(),
            "run_meta": self.run_meta,
            "notes": list(self.notes),
        }
