"""The peaks a run's figures are measured against: the user's, else the spec table, else the
ceilings ``trainpace ceilings`` measured and cached on this machine."""

from __future__ import annotations

from typing import Any

import torch

from trainpace.devices.ceilings import load_ceilings
from trainpace.devices.specs import Peaks, table_peaks
from trainpace.sampling.nvml import GpuInfo


def resolve_peaks(device: torch.device, name: str | None, gpu: GpuInfo | None,
                  user: Peaks | None) -> tuple[Peaks, str | None]:
    """(the peaks, a note naming what is missing when there are none at all)."""
    memory_gb = None
    if gpu is not None and gpu.memory_total_gb:
        memory_gb = gpu.memory_total_gb * 1e9 / 2**30  # names print GiB as "GB"
    table = table_peaks(name, memory_gb=memory_gb)
    ceilings = load_ceilings(device) if device.type in ("cpu", "cuda") else None
    measured = ceilings.peaks() if ceilings is not None else Peaks()
    peaks = table.merged_over(measured)
    if user is not None:
        peaks = user.merged_over(peaks)
    why = ceilings.why_provisional if ceilings is not None else None
    if why is not None and not peaks.tflops and peaks.bandwidth_gb_s is None:
        threads = f" --threads {ceilings.threads}" if ceilings and ceilings.threads else ""
        return peaks, (f"the peak of {name or device} is provisional, so not used (its cached "
                       f"ceiling: {why}); run `trainpace ceilings{threads}` on a quiet "
                       "machine, or pass peaks")
    if not peaks.tflops and peaks.bandwidth_gb_s is None:
        return peaks, (f"no peaks for {name or device}: not in the spec table and no "
                       "measured ceilings; run `trainpace ceilings` once on this machine, or "
                       "pass peaks")
    return peaks, None


def peaks_meta(peaks: Peaks, note: str | None) -> dict[str, Any]:
    """The ``peaks`` part of ``meta.json``: each peak with its source."""
    return {
        "bandwidth_gb_s": None if peaks.bandwidth_gb_s is None else {
            "value": peaks.bandwidth_gb_s.value, "source": peaks.bandwidth_gb_s.source},
        "tflops": {k: {"value": p.value, "source": p.source} for k, p in peaks.tflops.items()},
        "note": note,
    }
