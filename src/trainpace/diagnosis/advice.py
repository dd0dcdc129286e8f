"""Advice computed from the run's own figures: what to change, to what, and the expected gain.

Pure functions of numbers and settings; the rules call them with what they measured. A piece
of advice names the setting and the value to try, and says what it is computed from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainpace.units import format_duration as duration


def gain_if_removed(lost_pct: float) -> float:
    """The speed-up if a share of the time (percent) disappeared entirely: 1 / (1 − share)."""
    share = min(max(lost_pct, 0.0), 99.0) / 100.0
    return 1.0 / (1.0 - share)


def gain_text(lost_pct: float) -> str:
    """``expected gain up to 1.6×`` for a share of the time that could be removed (under a
    10% gain, in percent: "up to 1×" would read as no gain at all)."""
    gain = gain_if_removed(lost_pct)
    if gain < 1.1:
        return f"expected gain up to {100.0 * (gain - 1.0):.0f}%"
    return f"expected gain up to {gain:.2g}×"


# The CLI flags that set a Meter keyword, by verb (the demo sets its own warm-up and window).
CLI_FLAGS: dict[str, dict[str, str]] = {
    "run": {"warmup": "--warmup", "window": "--window", "profile_steps": "--profile"},
    "demo": {"num_workers": "--workers"},
}


def setting(made_by: str | None, keyword: str, value: Any) -> str:
    """How the user sets ``keyword`` to ``value``: the CLI verb's flag when the run was made
    by one that has it (``trainpace run --warmup 3``), the callback's keyword under Lightning
    or the HF Trainer (it passes them to its Meter), else the Meter's keyword."""
    flag = CLI_FLAGS.get(made_by or "", {}).get(keyword)
    if flag is not None:
        return f"`trainpace {made_by} {flag} {value}`"
    if made_by in ("lightning", "hf"):
        return f"TrainpaceCallback({keyword}={value})"
    return f"Meter({keyword}={value})"


def _call(settings: Mapping[str, Any]) -> str:
    args = ", ".join(f"{key}={value!r}" for key, value in settings.items())
    return f"`DataLoader({args})`"


IO_WORKERS_MAX = 32  # past this, threads in the Dataset or async reads beat more processes
IO_BOUND_CPU = 0.3  # loading that keeps a worker's core busy under 30% of the time waits on I/O
IO_HEADROOM = 2.0  # I/O latency has long tails and an idle worker costs memory, not a core
CPU_BOUND_CPU = 0.7


def workers_needed(
    *, batch_load_s: float, compute_s: float, headroom: float, cpu_count: int | None,
    cpu_fraction: float | None = None, spare_cores: int | None = None,
) -> tuple[int, bool]:
    """Workers that deliver a batch every ``compute_s`` when each takes ``batch_load_s``.

    Returns (workers, capped): at least 2, and at most what the CPU can run. A worker uses
    ``cpu_fraction`` of a core while it loads (1 when unknown: CPU-bound, as Lightning's
    cores − 1 assumes); the cores it may use are ``spare_cores`` (default ``cpu_count − 1``:
    one core for the training loop), so the cap is ``spare / cpu_fraction`` — loading that
    waits on I/O may run more workers than there are cores (at most :data:`IO_WORKERS_MAX`).
    ``capped`` says the cap bit.
    """
    raw = math.ceil(headroom * batch_load_s / compute_s)
    needed = max(2, raw)  # two at least: one loads while the other's batch is consumed
    fraction = 1.0 if cpu_fraction is None else min(max(cpu_fraction, 0.0), 1.0)
    cap = IO_WORKERS_MAX
    if cpu_count is not None and cpu_count > 1:
        spare = spare_cores if spare_cores is not None else cpu_count - 1
        cap = min(IO_WORKERS_MAX, math.floor(max(1, spare) / max(fraction, 1.0 / IO_WORKERS_MAX)))
    elif fraction > 0:
        cap = IO_WORKERS_MAX if cpu_count is None else 1
    if needed > cap:
        return max(1, cap), raw > cap
    return needed, False


@dataclass(frozen=True)
class LoadingCpu:
    """How much of a core the loading keeps busy while it loads, and where that came from."""

    fraction: float | None  # 0 = pure waiting (I/O, sleep), 1 = a core busy the whole time
    source: str  # "workers" (their CPU over their time), "main process" (an estimate), "none"
    bound: str  # "io", "cpu", "mixed" or "unknown"

    def to_dict(self) -> dict[str, Any]:
        return {"cpu_fraction": self.fraction, "source": self.source, "bound": self.bound}


def loading_cpu(*, workers: int, wait_s: float, step_s: float, main_cpu_pct: float | None,
                process_cpu_pct: float | None, device_kind: str | None,
                threads: int | None, main_demand_pct: float | None = None,
                workers_demand_pct: float | None = None) -> LoadingCpu:
    """The loading's CPU use, from what the sampler measured.

    Best, CPU *demand* (time on a core plus time waiting for one; see
    :mod:`trainpace.sampling.host`), which other processes crowding the machine do not
    shrink: with workers, theirs over the time they had (``workers`` × the wall time: a
    loader-bound loop keeps every worker loading); without, the loop thread's demand per
    step less the step's compute (during which it wants its core), over the wait. Else CPU
    time, the same way (the compute's share bounded by ``threads`` cores on a CPU device):
    on a crowded machine it reads CPU-bound loading as partly I/O.
    """
    fraction: float | None = None
    source = "none"
    compute_s = step_s - wait_s
    if workers > 0 and workers_demand_pct is not None:
        fraction = workers_demand_pct / (100.0 * workers)
        source = "workers' CPU demand"
    elif workers == 0 and main_demand_pct is not None and wait_s > 0:
        fraction = max(0.0, main_demand_pct / 100.0 * step_s - compute_s) / wait_s
        source = "loop thread's CPU demand"
    elif workers > 0 and process_cpu_pct is not None and main_cpu_pct is not None:
        fraction = max(0.0, process_cpu_pct - main_cpu_pct) / (100.0 * workers)
        source = "workers' CPU time"
    elif workers == 0 and main_cpu_pct is not None and wait_s > 0:
        compute_cores = (threads or 1) if device_kind == "cpu" else 1
        main_cpu_s = main_cpu_pct / 100.0 * step_s
        fraction = max(0.0, main_cpu_s - compute_cores * compute_s) / wait_s
        source = "main process's CPU time"
    if fraction is None:
        return LoadingCpu(None, source, "unknown")
    fraction = min(fraction, 1.0)
    bound = ("io" if fraction <= IO_BOUND_CPU else "cpu" if fraction >= CPU_BOUND_CPU
             else "mixed")
    return LoadingCpu(fraction, source, bound)


TUNE_LOADER = "`trainpace tune-loader MODULE:FACTORY --run RUN`"


@dataclass(frozen=True)
class LoaderAdvice:
    """What to change in the loader: the lines of advice, and the settings to use as data."""

    advice: list[str]
    recommended: dict[str, Any] | None  # num_workers, prefetch_factor, pin_memory,
    # persistent_workers: the whole setting to pass to DataLoader, not only what changes
    loading: dict[str, Any] = field(default_factory=dict)


def loader_advice(
    *,
    wait_pct: float,
    wait_s: float,
    step_s: float,
    loader: Mapping[str, Any] | None,
    device_kind: str | None,
    cpu_count: int | None,
    bursty: bool,
    headroom: float,
    main_cpu_pct: float | None = None,
    process_cpu_pct: float | None = None,
    threads: int | None = None,
    main_demand_pct: float | None = None,
    workers_demand_pct: float | None = None,
) -> LoaderAdvice:
    """What to change in the DataLoader, computed from the measured wait, step time and CPU.

    The model: with ``w`` workers a batch takes each worker ``w × step`` when the loop is
    loader-bound (``wait`` itself when ``w = 0``: the loop loads it), and the loader must deliver
    one every ``step − wait`` (the time the step spends outside the loader), with headroom.
    How many workers the CPU can run follows from the loading's CPU use
    (:func:`loading_cpu`): CPU-bound loading needs a core per worker, loading that waits
    on I/O does not.
    """
    gain = gain_text(wait_pct)
    compute_s = step_s - wait_s
    cuda = device_kind == "cuda"
    workers = int((loader or {}).get("num_workers") or 0)
    cpu = loading_cpu(workers=workers, wait_s=wait_s, step_s=step_s, main_cpu_pct=main_cpu_pct,
                      process_cpu_pct=process_cpu_pct, device_kind=device_kind, threads=threads,
                      main_demand_pct=main_demand_pct, workers_demand_pct=workers_demand_pct)
    spare = None
    if cpu_count is not None and device_kind == "cpu" and threads:
        spare = max(1, cpu_count - threads)  # the model's own threads hold cores on a CPU run
    batch_load_s = wait_s if workers == 0 else workers * step_s
    needed, capped = workers, False
    if compute_s > 0:
        needed, capped = workers_needed(
            batch_load_s=batch_load_s, compute_s=compute_s,
            headroom=max(headroom, IO_HEADROOM) if cpu.bound == "io" else headroom,
            cpu_count=cpu_count, cpu_fraction=cpu.fraction, spare_cores=spare)
    settings = dict(loader or {})
    new_workers = max(needed, workers)
    prefetch = int(settings.get("prefetch_factor") or 2)
    recommended: dict[str, Any] = {
        "num_workers": new_workers,
        "prefetch_factor": (4 if bursty and prefetch < 4 else prefetch) if new_workers else None,
        "pin_memory": True if cuda else bool(settings.get("pin_memory")),
        "persistent_workers": new_workers > 0,
    }
    loading = {**cpu.to_dict(), "batch_load_s": batch_load_s, "compute_s": compute_s,
               "workers_needed": needed, "workers_capped": capped}
    lines: list[str] = []
    if loader is None:
        lines.append(
            f"data wait is {wait_pct:.0f}% of the step ({duration(wait_s)} of "
            f"{duration(step_s)}); the loader meter.loader(...) wrapped is not a torch "
            "DataLoader, so its settings are unknown: load in parallel (a DataLoader with "
            f"`num_workers={new_workers}` over the same data) — {gain}; {TUNE_LOADER} "
            "measures which settings remove the wait"
        )
        if compute_s > 0:
            lines.append(
                f"the loader must deliver a batch every {duration(compute_s)} (the step's "
                "time outside the loader); each worker makes one batch at a time"
            )
        return LoaderAdvice(lines, recommended, loading)
    changes: dict[str, Any] = {}
    if new_workers != workers:
        changes["num_workers"] = new_workers
    if recommended["pin_memory"] and not settings.get("pin_memory"):
        changes["pin_memory"] = True
    if new_workers > 0 and not settings.get("persistent_workers"):
        changes["persistent_workers"] = True
    if new_workers > 0 and recommended["prefetch_factor"] != prefetch:
        changes["prefetch_factor"] = recommended["prefetch_factor"]
    if changes:
        lines.append(
            f"data wait is {wait_pct:.0f}% of the step with `num_workers={workers}`; try "
            f"{_call(changes)} — {gain}"
        )
    else:
        lines.append(
            f"data wait is {wait_pct:.0f}% of the step with `num_workers={workers}` — {gain} "
            "if loading is made cheaper"
        )
    if cpu.fraction is not None:
        kind = {"io": "waits on I/O", "cpu": "is CPU-bound", "mixed": "is part CPU, part I/O"}
        beyond = (" — more workers than cores can help" if cpu.bound == "io"
                  and new_workers > (cpu_count or new_workers) else "")
        lines.append(
            f"loading {kind[cpu.bound]}: it keeps a core {100.0 * cpu.fraction:.0f}% busy while "
            f"it loads (from the {cpu.source}){beyond}"
        )
    if capped:
        cores = f"{cpu_count} CPU cores" if cpu_count else "the CPU cores"
        lines.append(
            f"workers alone cannot hide it on {cores}: one batch takes ~{duration(batch_load_s)} "
            f"to load but the step needs one every {duration(compute_s)}; make loading "
            "cheaper (decode once and cache, move augmentation to the device, a faster decoder)"
        )
    if cpu.fraction is None or cpu.bound == "mixed":
        lines.append(f"to find the settings by measurement, {TUNE_LOADER} times candidate "
                     "settings on this machine")
    if bursty:
        lines.append(
            "the wait comes in bursts (median wait well below the mean): a deeper prefetch "
            "queue smooths them"
        )
    if cuda and changes.get("pin_memory"):
        lines.append("with pin_memory=True, copy with `.to(device, non_blocking=True)`")
    if device_kind == "cpu" and "num_workers" in changes and cpu.bound != "io":
        lines.append(
            "on a CPU-only run, workers take cores from the model's threads: "
            "check torch.get_num_threads() against the cores left"
        )
    return LoaderAdvice(lines, recommended, loading)
