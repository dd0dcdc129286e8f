"""From a sampler window to the summary's device, bandwidth, FLOP and host sections.

Pure functions of the window's time-weighted aggregates (:meth:`Sampler.window`), the open
sources' fixed facts (the GPU's name, memory, clocks) and the counted step; the
:class:`~trainpace.measure.vitals.DeviceVitals` facade calls them and contains their failures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainpace.devices.specs import Peaks
from trainpace.measure.device_sources import BANDWIDTH_SOURCES
from trainpace.measure.flops import StepCount
from trainpace.measure.roofline import step_figures
from trainpace.sampling.aggregates import Aggregate
from trainpace.sampling.nvml import THROTTLE_NAMES, GpuInfo
from trainpace.summary import Bandwidth, Device, Flops, Host

Window = Mapping[str, Aggregate]


@dataclass(frozen=True, kw_only=True)
class Facts:
    """What the sections need beside the readings: the device and how its step was counted."""

    kind: str  # torch device type
    name: str | None
    gpu: GpuInfo | None
    threads: int
    count: StepCount | None
    peaks: Peaks
    flops_per_step: float | None
    dtype: str | None


def window_figures(window: Window, kind: str) -> dict[str, float | None]:
    """The headline readings of one window (time-weighted means)."""
    figures: dict[str, float | None] = {
        key: _mean(window.get(key))
        for key in ("device_util_pct", "memory_used_pct", "temperature_c")
    }
    figures["bandwidth_util_pct"] = None
    for key, _ in BANDWIDTH_SOURCES if kind == "cuda" else ():
        found = window.get(key)
        if found is not None:
            figures["bandwidth_util_pct"] = found.mean
            break
    return figures


def window_signs(window: Window, kind: str) -> dict[str, float | None]:
    """What a rank tells the others of one window (its device and host), as
    :func:`sections` has them, without making the sections."""
    agg = window.get
    return {"util_pct": _mean(agg("device_util_pct")),
            "temperature_c": _mean(agg("temperature_c")),
            "throttle_pct": _mean(agg("gpu.throttled")) if kind == "cuda" else None,
            "process_cpu_pct": _mean(agg("host.process_cpu_pct")),
            "system_cpu_pct": _mean(agg("host.system_cpu_pct"))}


def sections(window: Window, facts: Facts, step_s: float | None,
             samples_per_s: float | None) -> tuple[Device, Bandwidth, Flops, Host]:
    """The four sections over the window, the FLOP figures at ``step_s``/``samples_per_s``."""
    agg = window.get
    flops, estimate = step_figures(
        facts.count, peaks=facts.peaks, step_s=step_s, samples_per_s=samples_per_s,
        flops_per_step=facts.flops_per_step, dtype=facts.dtype,
    )
    cuda = facts.kind == "cuda"
    sampled, source = None, None
    for key, name in BANDWIDTH_SOURCES if cuda else ():
        sampled = agg(key)
        if sampled is not None:
            source = name
            break
    if sampled is None and estimate.util_pct is not None:
        source = "estimate"
    bandwidth = Bandwidth(
        util_pct=sampled.mean if sampled else estimate.util_pct,
        achieved_gb_s=estimate.achieved_gb_s,
        peak_gb_s=estimate.peak_gb_s,
        source=source,
        util_pct_max=sampled.max if sampled else None,
        estimate_util_pct=estimate.util_pct,
        memory_busy_pct=_mean(agg("gpu.memory_busy_pct")) if cuda else None,
        peak_source=estimate.peak_source,
        error=estimate.error,
    )
    return _device(window, facts), bandwidth, flops, _host(window, facts.threads)


def _device(window: Window, facts: Facts) -> Device:
    agg = window.get
    util, memory, temperature = agg("device_util_pct"), agg("memory_used_pct"), \
        agg("temperature_c")
    readings = agg("sampler.reading")
    cuda = facts.kind == "cuda"
    fields: dict[str, Any] = {}
    if cuda:
        fields = _gpu_fields(window, facts.gpu)
    elif facts.kind == "cpu":
        fields = {"memory_total_gb": _mean(agg("host.memory_total_gb"))}
    return Device(
        kind=facts.kind,
        name=facts.name,
        util_pct=_mean(util),
        util_source=None if util is None else
        ("nvml_utilization_gpu" if cuda else "process_cpu"),  # mps: util is None
        util_pct_min=util.min if util else None,
        util_pct_max=util.max if util else None,
        memory_used_pct=_mean(memory),
        memory_used_pct_max=memory.max if memory else None,
        temperature_c=_mean(temperature),
        temperature_c_max=temperature.max if temperature else None,
        samples=readings.readings if readings else 0,
        **fields,
    )


def _gpu_fields(window: Window, gpu: GpuInfo | None) -> dict[str, Any]:
    """The device section's GPU-only figures: throttling, clocks, power, PCIe, activity."""
    agg = window.get
    reasons = {name: found.mean for name in THROTTLE_NAMES
               if (found := agg(f"gpu.throttle.{name}")) is not None and found.mean > 0}
    gpm_sm, dcgm_sm = agg("gpu.sm_util_pct"), agg("gpu.dcgm_sm_active_pct")
    activity = "nvml_gpm" if gpm_sm else "dcgm" if dcgm_sm else None
    prefix = "gpu." if gpm_sm else "gpu.dcgm_"
    return {
        "throttle_pct": _mean(agg("gpu.throttled")),
        "throttle_reasons": reasons if agg("gpu.throttled") else None,
        "memory_used_gb": _mean(agg("gpu.memory_used_gb")),
        "memory_total_gb": gpu.memory_total_gb if gpu else None,
        "slowdown_temperature_c": gpu.slowdown_temperature_c if gpu else None,
        "power_w": _mean(agg("gpu.power_w")),
        "power_limit_w": _mean(agg("gpu.power_limit_w")),
        "sm_clock_mhz": _mean(agg("gpu.sm_clock_mhz")),
        "sm_clock_max_mhz": gpu.sm_clock_max_mhz if gpu else None,
        "pcie_tx_gb_s": _mean(agg("gpu.pcie_tx_gb_s")),
        "pcie_rx_gb_s": _mean(agg("gpu.pcie_rx_gb_s")),
        "sm_active_pct": _mean(gpm_sm or dcgm_sm),
        "sm_occupancy_pct": _mean(agg(f"{prefix}sm_occupancy_pct")) if activity else None,
        "tensor_active_pct": _mean(agg("gpu.tensor_util_pct" if gpm_sm
                                       else "gpu.dcgm_tensor_active_pct")),
        "activity_source": activity,
        "index": gpu.index if gpu else None,
    }


def _host(window: Window, threads: int) -> Host:
    agg = window.get
    process = agg("host.process_cpu_pct")
    return Host(
        process_cpu_pct=_mean(process),
        system_cpu_pct=_mean(agg("host.system_cpu_pct")),
        cpu_threads=threads,
        rss_gb=_mean(agg("host.rss_gb")),
        available_gb=_mean(agg("host.available_gb")),
        main_process_cpu_pct=_mean(agg("host.main_cpu_pct")),
        job_cpu_pct=_mean(agg("host.job_cpu_pct")),
        process_cpu_pct_max=process.max if process else None,
        memory_total_gb=_mean(agg("host.memory_total_gb")),
        memory_used_pct=_mean(agg("host.memory_used_pct")),
    )


def _mean(found: Aggregate | None) -> float | None:
    return found.mean if found is not None else None
