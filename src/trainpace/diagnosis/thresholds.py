"""The thresholds the diagnosis rules use: data, each with its source, configurable.

Change one with ``Thresholds(data_wait_warning_pct=5.0)`` or, from text (the CLI's
``--threshold KEY=VALUE``), with :meth:`Thresholds.from_mapping`. :data:`SOURCES` says where
each default comes from; "inferred" marks a value no source states, with the reasoning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainpace.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    """The rules' thresholds. Shares are percent of step time unless the name says otherwise."""

    # data loading
    data_wait_warning_pct: float = 10.0
    data_wait_critical_pct: float = 20.0
    data_wait_min_steps_warning: int = 2
    data_wait_min_steps_critical: int = 20
    h2d_warning_pct: float = 10.0
    loader_headroom: float = 1.2
    # device
    device_util_low_pct: float = 50.0
    device_busy_pct: float = 90.0
    memory_used_risk_pct: float = 95.0
    thermal_margin_c: float = 5.0
    throttle_warning_pct: float = 5.0
    bandwidth_high_pct: float = 60.0
    # step-time anomalies
    outlier_min_steps: int = 10
    stall_factor: float = 3.0
    spike_factor: float = 1.5
    spike_min_count: int = 3
    period_tolerance_pct: float = 5.0
    trainpace_boundary_max_s: float = 0.025
    trainpace_boundary_steps: int = 10
    outlier_warning_pct: float = 5.0
    outlier_critical_pct: float = 20.0
    drift_warning_pct: float = 10.0
    drift_min_steps: int = 20
    slow_phase_factor: float = 1.5
    slow_phase_min_steps: int = 5
    slow_phase_min_wall_pct: float = 2.0
    slow_phase_warning_pct: float = 5.0
    slow_phase_critical_pct: float = 20.0
    compile_warmup_steps: int = 3
    warmup_long_pct: float = 33.3
    outside_steps_info_pct: float = 10.0
    framework_work_info_pct: float = 10.0
    framework_work_warning_pct: float = 25.0
    # host overhead
    short_kernel_warning_pct: float = 50.0
    launch_lag_starved_us: float = 100.0
    host_cpu_saturated_pct: float = 90.0
    python_overhead_warning_pct: float = 30.0
    cpu_contention_system_pct: float = 80.0
    cpu_others_pct: float = 30.0
    # distributed
    communication_warning_pct: float = 10.0
    communication_critical_pct: float = 30.0
    straggler_warning_pct: float = 10.0
    straggler_critical_pct: float = 20.0
    # a job's goodput (shares of the job's wall time)
    goodput_badput_info_pct: float = 5.0
    goodput_badput_warning_pct: float = 10.0
    goodput_badput_critical_pct: float = 20.0
    mtbf_min_failures: int = 2

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"thresholds.{f.name}", value, "must be a number ≥ 0")
        pairs = (
            ("data_wait_warning_pct", "data_wait_critical_pct"),
            ("data_wait_min_steps_warning", "data_wait_min_steps_critical"),
            ("outlier_warning_pct", "outlier_critical_pct"),
            ("communication_warning_pct", "communication_critical_pct"),
            ("straggler_warning_pct", "straggler_critical_pct"),
            ("spike_factor", "stall_factor"),
            ("slow_phase_warning_pct", "slow_phase_critical_pct"),
            ("goodput_badput_info_pct", "goodput_badput_warning_pct"),
            ("goodput_badput_warning_pct", "goodput_badput_critical_pct"),
        )
        for low, high in pairs:
            if getattr(self, low) > getattr(self, high):
                raise ConfigError(
                    f"thresholds.{low}", getattr(self, low), f"must be ≤ thresholds.{high}"
                )
        if self.slow_phase_factor <= 1.0:
            raise ConfigError("thresholds.slow_phase_factor", self.slow_phase_factor,
                              "must be > 1")
        if self.spike_factor <= 1.0:
            raise ConfigError("thresholds.spike_factor", self.spike_factor, "must be > 1")
        if self.loader_headroom < 1.0:
            raise ConfigError("thresholds.loader_headroom", self.loader_headroom, "must be ≥ 1")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Thresholds:
        """Defaults overridden by ``values`` (numbers, or text such as CLI ``KEY=VALUE`` gives)."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, raw in values.items():
            if key not in known:
                raise ConfigError("threshold", key, f"is not one of {sorted(known)}")
            is_int = isinstance(getattr(cls(), key), int)
            try:
                kwargs[key] = int(raw) if is_int else float(raw)
            except (TypeError, ValueError):
                kind = "an integer" if is_int else "a number"
                raise ConfigError(f"thresholds.{key}", raw, f"must be {kind}") from None
        return cls(**kwargs)


SOURCES: Mapping[str, str] = {
    "data_wait_warning_pct": "TraceML DiagnosisThresholds.overhead_share_warn = 0.10 "
    "(TF profiler calls 5–20% 'moderately input-bound')",
    "data_wait_critical_pct": "TraceML overhead_share_crit = 0.20; TF profiler "
    "kHighlyInfeedBoundThresholdInPercent = 20",
    "data_wait_min_steps_warning": "TraceML min_steps_for_warning_diag = 2",
    "data_wait_min_steps_critical": "TraceML min_steps_for_confident_diag = 20",
    "h2d_warning_pct": "TraceML overhead_share_warn = 0.10 (applied to H2D as TraceML does)",
    "loader_headroom": "research note data_and_time.md §1.5: loader throughput ≥ 1.1–1.2× "
    "the model's consumption rate",
    "device_util_low_pct": "torch-tb-profiler RunProfileData.analyze: GPU utilization < 0.5 "
    "→ 'increase batch size'",
    "device_busy_pct": "TraceML compute_bound_share_warn = 0.90; gpu_metrics.md §2.4: "
    "host-bound when GPU-Util < ~90%",
    "memory_used_risk_pct": "trainpace's specification; torch-tb-profiler advises at 90%",
    "thermal_margin_c": "gpu_metrics.md §1.4: flag when slowdown − temperature < ~5 °C",
    "throttle_warning_pct": "gpu_metrics.md §2.4: throttled when Δthrottle counters/Δt > ~5%",
    "bandwidth_high_pct": "gpu_metrics.md §2.4: bandwidth-bound when DRAM activity ≥ ~0.6 "
    "(practical peak ≈ 0.8 per NVIDIA)",
    "outlier_min_steps": "inferred: a median needs enough steps before 3× of it means a stall",
    "stall_factor": "trainpace's specification: a stall is a step > 3× the median",
    "spike_factor": "inferred: 1.5× the median is well outside steady jitter and catches "
    "eval or checkpoint steps that are not full stalls",
    "spike_min_count": "inferred: three events are the fewest that show a period",
    "period_tolerance_pct": "inferred: an event may land up to 5% of its period (at least one "
    "step) off its place, as evaluations or checkpoints triggered by time do",
    "trainpace_boundary_max_s": "measured: trainpace's own work at a window boundary costs the "
    "step after it 1-11 ms (benchmarks/boundary.py, 1 process and 2-4 DDP ranks on the CPU); a "
    "larger excess each time is the loop's own (a checkpoint save every window's length)",
    "trainpace_boundary_steps": "measured: the writer does a window record's work in about "
    "eight parts, a step's time apart (meter/pipeline.py), so it lands on the first ten or so "
    "steps after it took a window's last steps, no later; it looks for steps an eighth of a "
    "window past each hand-over at the loop's pace (on a device clock, every three quarters of "
    "the loop's time per half window), so the steps counted from the boundary are these plus "
    "three eighths of a window",
    "outlier_warning_pct": "inferred: TF profiler counts 'all other time' ≥ 3–15% of the step "
    "as significant; 5% of the run lost is worth fixing",
    "outlier_critical_pct": "TraceML overhead_share_crit = 0.20 (same band as other overheads)",
    "drift_warning_pct": "trainpace's specification: > 10% slower over the run",
    "drift_min_steps": "TraceML min_steps_for_confident_diag = 20",
    "slow_phase_factor": "inferred: the spike factor (1.5× the median) held by a run of steps "
    "instead of one",
    "slow_phase_min_steps": "inferred: five slow steps in a row are a phase, not a stall or two",
    "slow_phase_min_wall_pct": "inferred: a phase under 2% of the wall time changes no figure",
    "slow_phase_warning_pct": "inferred: the outlier band — 5% of the run lost is worth fixing",
    "slow_phase_critical_pct": "TraceML overhead_share_crit = 0.20 (same band as other overheads)",
    "compile_warmup_steps": "inferred: torch.compile, the allocator and cuDNN autotuning settle "
    "in the first few steps (torchtitan's and Lightning's timers skip 1–3)",
    "warmup_long_pct": "trainpace's specification: an excluded warm-up over a third of the "
    "wall time leaves the steady figures describing a minority of the run",
    "outside_steps_info_pct": "inferred: the TraceML/TF profiler 10% band, applied to time "
    "between steps",
    "framework_work_info_pct": "inferred: the TraceML/TF profiler 10% band, applied to the "
    "framework's own work between the user's hooks",
    "framework_work_warning_pct": "inferred: a quarter of every step in the framework's own "
    "bookkeeping is more than the user's model gains from most tuning (2.4 ms of a 7.7 ms "
    "Lightning DDP step measured on 2 CPU processes: 31%)",
    "cpu_others_pct": "inferred: when other processes keep ≥ 30% of the machine's CPU busy, "
    "a run's threads wait for cores (contention measured on a shared machine took half of it)",
    "short_kernel_warning_pct": "inferred from HTA CUDA launch stats: when most kernels are "
    "shorter than their ~5–20 µs launch overhead, the step is launch-bound",
    "launch_lag_starved_us": "inferred from HTA's launch stats (launch overhead 5–20 µs): a "
    "kernel that starts within ~100 µs of its launch found the device queue empty; a longer "
    "lag means the host runs ahead, so short kernels do not make the step launch-bound",
    "host_cpu_saturated_pct": "inferred: a CPU near 100% busy cannot feed the device on time",
    "python_overhead_warning_pct": "inferred: with a third of a CPU step in Python outside any "
    "operator, removing it (torch.compile, a larger batch) is the largest gain left after "
    "loading",
    "cpu_contention_system_pct": "inferred: with under a fifth of the CPU idle, a CPU run whose "
    "threads are idle half the time is being crowded out by other processes",
    "communication_warning_pct": "torch-tb-profiler: communication / step > 0.10 → gradient "
    "compression / accumulation advice",
    "communication_critical_pct": "inferred: DAWNBench analysis found distributed entries "
    "spending over half their time communicating; 30% is well past tb-profiler's 10%",
    "straggler_warning_pct": "TraceML straggler warn = 0.10 (slowest vs median rank)",
    "straggler_critical_pct": "TraceML straggler crit = 0.20",
    "goodput_badput_info_pct": "inferred: the outlier band — a category under 5% of a job's "
    "wall time changes its training time little",
    "goodput_badput_warning_pct": "TraceML overhead_share_warn = 0.10, applied to a job's "
    "wall time",
    "goodput_badput_critical_pct": "TraceML overhead_share_crit = 0.20, applied to a job's "
    "wall time",
    "mtbf_min_failures": "inferred: one failure gives a time between failures with no spread "
    "to judge it by; two are the fewest that make the mean an estimate (below: --mtbf-hours)",
}


def threshold_table(thresholds: Thresholds | None = None) -> list[dict[str, Any]]:
    """The thresholds as rows ``{name, value, default, source}``, for reports and docs."""
    current = thresholds or Thresholds()
    default = Thresholds()
    return [
        {
            "name": f.name,
            "value": getattr(current, f.name),
            "default": getattr(default, f.name),
            "source": SOURCES[f.name],
        }
        for f in dataclasses.fields(Thresholds)
    ]
