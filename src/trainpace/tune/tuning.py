"""What the DataLoader tuner measured and decided: plain data, rendered elsewhere."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

# The data wait a step may see before loading counts as the bottleneck (the diagnosis's
# data_wait_warning_pct: the Meter's "healthy" line).
TARGET_WAIT_PCT = 10.0

Bound = Literal["cpu", "io"]


@dataclass(frozen=True, kw_only=True)
class Setting:
    """The DataLoader settings the tuner varies."""

    num_workers: int
    prefetch_factor: int | None  # None with num_workers=0: the DataLoader does not prefetch
    pin_memory: bool
    persistent_workers: bool

    def kwargs(self) -> dict[str, Any]:
        """The settings as DataLoader keywords (prefetch_factor only where it is allowed)."""
        out: dict[str, Any] = {"num_workers": self.num_workers}
        if self.num_workers > 0:
            out["prefetch_factor"] = self.prefetch_factor
            out["persistent_workers"] = self.persistent_workers
        out["pin_memory"] = self.pin_memory
        return out

    def label(self) -> str:
        """A short name for tables and progress: ``w=4 pf=2 pin``."""
        text = f"w={self.num_workers}"
        if self.num_workers > 0:
            text += f" pf={self.prefetch_factor}"
        return text + (" pin" if self.pin_memory else "")


@dataclass(frozen=True, kw_only=True)
class Probe:
    """The dataset timed in the main process, one sample at a time, then collated."""

    samples: int          # samples timed
    sample_s: float       # wall time of one __getitem__ (mean)
    sample_cpu_s: float   # CPU time of it (this process, all threads)
    sample_runq_s: float  # time it was ready to run but waited for a core: a busy machine
    collate_s: float      # collating one batch of batch_size samples
    batch_s: float        # one batch in one process: batch_size × sample_s + collate_s
    sample_bytes: int     # tensor bytes of one sample
    batch_bytes: int      # tensor bytes of one collated batch

    @property
    def sample_wait_s(self) -> float:
        """The part of a sample's time spent off the CPU by its own doing: I/O, sleeps, locks."""
        return max(self.sample_s - self.sample_cpu_s - self.sample_runq_s, 0.0)

    @property
    def cpu_share(self) -> float:
        """The share of a sample's own time that is CPU work (a busy machine left out)."""
        work = self.sample_cpu_s + self.sample_wait_s
        return min(self.sample_cpu_s / work, 1.0) if work > 0 else 1.0


@dataclass(frozen=True, kw_only=True)
class Trial:
    """One setting run against a simulated training step."""

    setting: Setting
    batches: int                  # batches in the measured (steady) window
    warmup_batches: int           # batches before it, not counted
    startup_s: float              # iter() to the first batch: what each epoch pays without
                                  # persistent workers
    batches_per_s: float
    wait_s_per_batch: float       # mean time blocked in next() in the window
    wait_pct: float | None        # wait / (wait + step); None when no step time was given
    worker_cpu_s_per_batch: float | None  # workers' CPU time per batch delivered (psutil)
    worker_rss_gb: float | None   # resident memory of the workers, summed
    worker_uss_gb: float | None   # their unique memory (shared pages of the fork not counted)
    memory_gb: float | None       # what the setting holds: workers' unique memory + queued batches
    duration_s: float
    complete: bool = True         # False when the budget cut the window short

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["setting"] = asdict(self.setting)
        return out


@dataclass(frozen=True, kw_only=True)
class TuneResult:
    """The tuner's answer: the cheapest setting that hides the data wait, or why none can."""

    recommended: Setting
    wait_pct: float | None       # the recommended setting's measured wait share of the step
    reachable: bool | None       # any setting under TARGET_WAIT_PCT; None with no step time
    step_s: float | None         # the training step simulated (compute only, no wait)
    step_source: str | None      # where it came from: "given", a run folder, ...
    batch_size: int | None
    probe: Probe
    trials: list[Trial]
    bound: Bound | None          # what a worker's time is spent on, from its CPU use
    cores: int | None
    memory_budget_gb: float
    budget_s: float
    elapsed_s: float
    verdict: str
    advice: list[str] = field(default_factory=list)
    code: str = ""               # the DataLoader(...) line to paste
    # where the step computes: "cpu" (simulated as CPU work on the training thread), an
    # accelerator (simulated as a sleep); None without a step
    step_device: str | None = None

    @property
    def sample_s(self) -> float:
        return self.probe.sample_s

    @property
    def batch_s(self) -> float:
        return self.probe.batch_s

    def to_dict(self) -> dict[str, Any]:
        """The ``tune-loader --json`` object."""
        return {
            "recommended": asdict(self.recommended),
            "wait_pct": self.wait_pct,
            "reachable": self.reachable,
            "target_wait_pct": TARGET_WAIT_PCT,
            "sample_s": self.probe.sample_s,
            "batch_s": self.probe.batch_s,
            "step_s": self.step_s,
            "step_source": self.step_source,
            "step_device": self.step_device,
            "batch_size": self.batch_size,
            "bound": self.bound,
            "cores": self.cores,
            "probe": {**asdict(self.probe), "sample_wait_s": self.probe.sample_wait_s,
                      "cpu_share": self.probe.cpu_share},
            "trials": [t.to_dict() for t in self.trials],
            "memory_budget_gb": self.memory_budget_gb,
            "budget_s": self.budget_s,
            "elapsed_s": self.elapsed_s,
            "verdict": self.verdict,
            "advice": list(self.advice),
            "code": self.code,
        }
