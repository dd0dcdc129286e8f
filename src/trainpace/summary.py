"""The ``trainpace.summary/1`` contract: typed sections, to and from JSON.

Every key of the contract (DESIGN.md) is always present; ``None`` (JSON ``null``) means
"not measured here", never zero. Keys after the contract's own are extensions: readers of
``trainpace.summary/1`` must ignore keys they do not know, and :meth:`Summary.from_dict`
does, so newer writers stay readable.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trainpace.errors import RunFolderError
from trainpace.summary_check import build
from trainpace.summary_goodput import Goodput, GoodputCategories, GoodputRun

SCHEMA = "trainpace.summary/1"

Bottleneck = Literal[
    "data_loading",
    "host_overhead",
    "communication",
    "memory_bandwidth",
    "compute",
    "thermal",
    "memory_capacity",
    "straggler",
    "none",
]
BOTTLENECKS: tuple[Bottleneck, ...] = typing.get_args(Bottleneck)
Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[Severity, ...] = typing.get_args(Severity)  # mildest first


@dataclass(frozen=True, kw_only=True)
class Steps:
    """Optimizer steps seen, excluded as warm-up, and measured."""

    total: int = 0
    warmup: int = 0
    measured: int = 0
    # extension: "auto" (detected steady state) or "fixed" (Meter(warmup=int))
    warmup_mode: str | None = None
    # extension: measured steps that ran while other processes took the CPU (null without
    # host CPU readings); the steady span is the measured steps without them
    slowed_by_others: int | None = None
    # extension: the steps at which a window ended early because a metered loader ran out
    # (an epoch's end), in order: trainpace's later window boundaries count from the last one
    # before them; null when not known (a summary rebuilt from steps.jsonl, or more than
    # 10,000 of them)
    window_ends: list[int] | None = None


@dataclass(frozen=True, kw_only=True)
class Throughput:
    """Work per second over the measured steps (warm-up excluded): the whole measured run,
    and its steady span."""

    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    steps_per_s: float | None = None
    # extensions: over the steady span, the measured steps without those slowed by other
    # processes (steps.slowed_by_others); the same as the whole measured run's when none was,
    # null without host CPU readings
    steady_samples_per_s: float | None = None
    # extension: tokens per second over the same steady span
    steady_tokens_per_s: float | None = None
    # "non_padding" (mask or labels said which tokens are real), "all" (every input_ids
    # token), "custom" (extension: Meter(tokens=callable)), or None (no tokens seen)
    tokens_counted: str | None = None


@dataclass(frozen=True, kw_only=True)
class Target:
    """Extension: the target a run is timed to."""

    name: str
    value: float
    higher_is_better: bool


@dataclass(frozen=True, kw_only=True)
class Time:
    """Training time: wall time, step-time distribution, time to target."""

    wall_s: float | None = None
    measured_s: float | None = None
    # Over the measured steps. A distributed job's (the merged summary) are the slowest
    # rank's steps: the median, p90 and mean of that rank's own step times (the rank with the
    # most measured seconds, the one global throughput divides by).
    step_s_median: float | None = None
    step_s_p90: float | None = None
    time_to_target_s: float | None = None
    # extensions
    step_s_mean: float | None = None
    warmup_s: float | None = None
    eta_to_target_s: float | None = None
    steps_to_target: int | None = None
    target: Target | None = None
    clock: str | None = None  # "host" (perf_counter) or "cuda"/"mps" (device events)
    # Time the loop spent outside both the metered loader and the steps (evaluation,
    # checkpointing, logging between steps): in the wall time, out of every step time.
    outside_steps_s: float | None = None
    outside_steps_pct: float | None = None  # of wall_s


@dataclass(frozen=True, kw_only=True)
class Data:
    """Data-loading latency: how long each step waits for its batch."""

    wait_s_per_step: float | None = None
    wait_pct: float | None = None
    # extensions
    h2d_s_per_step: float | None = None
    exposed_wait_s_per_step: float | None = None  # CUDA: device idle while the host waited
    loader: dict[str, Any] | None = None  # the DataLoader's settings, when one was found


@dataclass(frozen=True, kw_only=True)
class Device:
    """Device utilization: is the accelerator (or the CPU) busy, full, hot."""

    kind: str | None = None  # "cpu" | "cuda" | "mps"
    name: str | None = None
    util_pct: float | None = None
    memory_used_pct: float | None = None
    temperature_c: float | None = None
    throttle_pct: float | None = None
    # extensions (time-weighted over the window; _min/_max are the extremes of the readings)
    index: int | None = None  # NVML index of the metered GPU
    util_source: str | None = None  # "nvml_utilization_gpu" (kernel-active time) or "process_cpu"
    util_pct_min: float | None = None
    util_pct_max: float | None = None
    memory_used_pct_max: float | None = None
    memory_used_gb: float | None = None
    memory_total_gb: float | None = None
    temperature_c_max: float | None = None
    slowdown_temperature_c: float | None = None  # NVML: where hardware slowdown begins
    power_w: float | None = None
    power_limit_w: float | None = None  # the enforced limit
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    throttle_reasons: dict[str, float] | None = None  # reason -> % of the window, e.g. sw_power_cap
    pcie_tx_gb_s: float | None = None
    pcie_rx_gb_s: float | None = None
    sm_active_pct: float | None = None  # share of SMs busy (GPM SM_UTIL or DCGM SM_ACTIVE)
    sm_occupancy_pct: float | None = None
    tensor_active_pct: float | None = None
    activity_source: str | None = None  # "nvml_gpm" or "dcgm"
    samples: int | None = None  # sampler readings in the window


@dataclass(frozen=True, kw_only=True)
class Bandwidth:
    """Memory-bandwidth utilization, with the source it came from."""

    util_pct: float | None = None
    achieved_gb_s: float | None = None
    peak_gb_s: float | None = None
    # "nvml_gpm_dram_bw_util", "dcgm_dram_active", "nvml_memory_busy" (a time-% proxy, not
    # a share of the peak) or "estimate" (counted bytes per step / step time / peak)
    source: str | None = None
    # extensions
    util_pct_max: float | None = None  # the sampled source's highest reading
    estimate_util_pct: float | None = None  # achieved_gb_s / peak_gb_s, whatever the source
    memory_busy_pct: float | None = None  # NVML utilization.memory: time memory was read/written
    peak_source: str | None = None
    error: str | None = None  # a figure above its peak: what is wrong instead of a number


@dataclass(frozen=True, kw_only=True)
class Flops:
    """FLOPs per optimizer step, achieved rate and model FLOPs utilization."""

    per_step: float | None = None
    achieved_tflops: float | None = None
    mfu_pct: float | None = None
    # extensions: the roofline of the step
    peak_tflops: float | None = None
    peak_source: str | None = None  # e.g. "specs: NVIDIA H100 SXM bf16 dense" or "ceilings"
    dtype: str | None = None
    bytes_per_step: float | None = None
    intensity_flop_per_byte: float | None = None
    ridge_flop_per_byte: float | None = None  # peak FLOP/s / peak bytes/s
    roofline: str | None = None  # "compute_bound" | "bandwidth_bound"
    by_family: list[dict[str, Any]] | None = None  # [{family, flops, bytes, intensity, roofline}]
    source: str | None = None  # "counted" (one step under the FLOP counter) or "user"
    error: str | None = None  # MFU over 100%: what is wrong instead of a number


@dataclass(frozen=True, kw_only=True)
class Communication:
    """Extension: time spent in collectives, where it was measured (traces, dist)."""

    share_pct: float | None = None
    overlap_pct: float | None = None
    source: str | None = None


@dataclass(frozen=True, kw_only=True)
class Host:
    """Extension: the host side (CPU, memory) of the training process."""

    process_cpu_pct: float | None = None  # the training process and its DataLoader workers
    system_cpu_pct: float | None = None
    cpu_threads: int | None = None  # threads torch uses (the 100%-per-thread scale)
    rss_gb: float | None = None
    available_gb: float | None = None
    # extensions
    main_process_cpu_pct: float | None = None  # the training process alone, no workers
    # one of several ranks of a job on this host: the job's CPU here (this rank, its sibling
    # ranks and their workers; 100 = one core), what "other processes" are judged against
    job_cpu_pct: float | None = None
    process_cpu_pct_max: float | None = None
    memory_total_gb: float | None = None  # the cgroup limit when lower than the machine's
    memory_used_pct: float | None = None
    python_pct: float | None = None  # CPU trace: share of the steps' host time in Python
    # between operators


@dataclass(frozen=True, kw_only=True)
class Kernels:
    """Extension: launch-bound signs, where kernels were seen (a profiler trace)."""

    per_step: float | None = None
    median_us: float | None = None
    short_pct: float | None = None  # share of kernels shorter than the short-kernel threshold
    launch_lag_us: float | None = None  # median launch-to-start delay
    source: str | None = None


@dataclass(frozen=True, kw_only=True)
class Cost:
    """What the run costs: money from a price the user gives, energy from measured counters.

    Money needs ``price_per_hour`` (per device-hour; times the devices used). Energy is the
    best measured source (``energy_source``); CO2 only with a grid intensity the user gives.
    """

    price_per_hour: float | None = None
    usd_total: float | None = None
    usd_per_million_samples: float | None = None
    usd_per_million_tokens: float | None = None
    usd_to_target: float | None = None
    energy_j: float | None = None  # over the measured steps
    energy_j_per_sample: float | None = None
    energy_j_per_million_tokens: float | None = None
    power_w_mean: float | None = None
    energy_source: str | None = None  # nvml_total_energy | nvml_power_samples | rapl | rated_power
    kwh: float | None = None
    co2_kg: float | None = None
    grid_g_per_kwh: float | None = None
    # extensions
    devices: int | None = None  # devices the price is multiplied by (world size)
    energy_missing: str | None = None  # why there is no energy figure: the sources looked for
    energy_is_estimate: bool = False  # from a rated power the user gave, not a measurement


@dataclass(frozen=True, kw_only=True)
class RankEntry:
    """One rank's own figures (one entry when not distributed)."""

    rank: int = 0
    host: str | None = None
    samples_per_s: float | None = None
    step_s_median: float | None = None
    wait_pct: float | None = None
    # extensions: a distributed run's merge (trainpace.dist)
    local_rank: int | None = None
    node: int | None = None
    windows: int | None = None
    last_step: int | None = None
    final: bool | None = None  # it sent its last window (False: it ended early)
    pre_collective_pct: float | None = None  # DDP comm hook: time before the all-reduce
    communication_pct: float | None = None
    util_pct: float | None = None
    temperature_c: float | None = None
    throttle_pct: float | None = None
    process_cpu_pct: float | None = None
    system_cpu_pct: float | None = None
    relative_score: float | None = None  # 1.0: as fast as the fastest rank (latest window)
    individual_score: float | None = None  # 1.0: as fast as its own best window


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One diagnosis: what was seen (evidence: the numbers), how bad, and what to do."""

    id: str
    severity: Severity
    title: str
    evidence: dict[str, Any] = field(default_factory=dict)
    advice: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Diagnosis:
    """The bottleneck (one of :data:`BOTTLENECKS`, None before diagnosis) and the findings."""

    bottleneck: Bottleneck | None = None
    findings: list[Finding] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Summary:
    """A run's figures in the ``trainpace.summary/1`` contract. ``to_dict()`` gives the JSON."""

    schema: str = SCHEMA
    run_id: str | None = None
    world_size: int = 1
    steps: Steps = field(default_factory=Steps)
    throughput: Throughput = field(default_factory=Throughput)
    time: Time = field(default_factory=Time)
    data: Data = field(default_factory=Data)
    device: Device = field(default_factory=Device)
    bandwidth: Bandwidth = field(default_factory=Bandwidth)
    flops: Flops = field(default_factory=Flops)
    ranks: list[RankEntry] = field(default_factory=list)
    diagnosis: Diagnosis = field(default_factory=Diagnosis)
    communication: Communication = field(default_factory=Communication)
    host: Host = field(default_factory=Host)
    kernels: Kernels = field(default_factory=Kernels)
    cost: Cost = field(default_factory=Cost)
    goodput: Goodput = field(default_factory=Goodput)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict, every contract key present."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "summary") -> Summary:
        """Read a summary dict; raise :class:`RunFolderError` naming ``source`` if not one."""
        if not isinstance(data, Mapping):
            raise RunFolderError(f"{source}: expected a JSON object, got {type(data).__name__}")
        schema = data.get("schema")
        if schema != SCHEMA:
            raise RunFolderError(
                f"{source}: schema is {schema!r}, expected {SCHEMA!r}; "
                "it was not written by this version of trainpace"
            )
        missing = sorted(_CONTRACT_KEYS - set(data))
        if missing:
            raise RunFolderError(f"{source}: missing contract keys {missing}")
        try:
            return build(cls, data, nested=_NESTED, lists=_LISTS)
        except RunFolderError as exc:  # a value of the wrong type, named by its path
            raise RunFolderError(f"{source}: {exc}; the file is damaged or was edited "
                                 "(delete it: `trainpace report` rebuilds the figures from "
                                 "steps.jsonl)") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise RunFolderError(f"{source}: malformed {SCHEMA} summary ({exc})") from exc


_CONTRACT_KEYS = frozenset(
    {"schema", "run_id", "world_size", "steps", "throughput", "time", "data", "device",
     "bandwidth", "flops", "ranks", "diagnosis"}
)

# Nested sections the reader rebuilds; any other field is taken as the JSON value it is.
_NESTED: Mapping[tuple[type, str], type] = {
    (Summary, "steps"): Steps,
    (Summary, "throughput"): Throughput,
    (Summary, "time"): Time,
    (Summary, "data"): Data,
    (Summary, "device"): Device,
    (Summary, "bandwidth"): Bandwidth,
    (Summary, "flops"): Flops,
    (Summary, "ranks"): RankEntry,
    (Summary, "diagnosis"): Diagnosis,
    (Summary, "communication"): Communication,
    (Summary, "host"): Host,
    (Summary, "kernels"): Kernels,
    (Summary, "cost"): Cost,
    (Summary, "goodput"): Goodput,
    (Goodput, "categories"): GoodputCategories,
    (Goodput, "runs"): GoodputRun,
    (GoodputRun, "categories"): GoodputCategories,
    (Diagnosis, "findings"): Finding,
    (Time, "target"): Target,
}
_LISTS = frozenset({(Summary, "ranks"), (Diagnosis, "findings"), (Goodput, "runs")})
