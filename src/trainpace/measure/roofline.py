"""From a counted step and its time to achieved TFLOP/s, MFU, achieved GB/s and a roofline verdict.

Pure functions of numbers. The roofline compares a step's arithmetic intensity (FLOPs per
byte moved) with the device's ridge point (peak FLOP/s ÷ peak bytes/s, for the dtype that
carried most FLOPs): at or above the ridge the step can be compute-bound; below it the memory
system caps it (bandwidth-bound). A figure above its peak (MFU over 100%, an estimated
bandwidth over the peak) is not a measurement but a wrong count or a wrong peak: it becomes
an ``error`` in the figures and the percentage is null; a peak judged wrong so is not used
anywhere else either (no ridge, no roofline verdict from it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainpace.devices.specs import Peaks, canonical_dtype
from trainpace.errors import ConfigError
from trainpace.measure.flops import StepCount
from trainpace.summary import Flops


def ridge_flop_per_byte(peak_tflops: float | None, peak_gb_s: float | None) -> float | None:
    """Peak FLOP/s ÷ peak bytes/s, or None when either peak is unknown."""
    if not peak_tflops or not peak_gb_s:
        return None
    return peak_tflops * 1e12 / (peak_gb_s * 1e9)


def roofline_verdict(flops: float, moved_bytes: float, ridge: float | None) -> str | None:
    """``"compute_bound"`` at or above the ridge, ``"bandwidth_bound"`` below, None if unknown.

    Work with no FLOPs (copies, elementwise ops) only moves data: bandwidth-bound whatever
    the ridge.
    """
    if moved_bytes <= 0:
        return None
    if flops == 0:
        return "bandwidth_bound"
    if ridge is None:
        return None
    return "compute_bound" if flops / moved_bytes >= ridge else "bandwidth_bound"


@dataclass(frozen=True, kw_only=True)
class BandwidthEstimate:
    """Achieved GB/s from the counted bytes, and its share of the peak."""

    achieved_gb_s: float | None = None
    peak_gb_s: float | None = None
    peak_source: str | None = None
    util_pct: float | None = None
    error: str | None = None


def _peak_dtype(count: StepCount | None, dtype: str | None) -> str | None:
    if dtype is not None:
        try:
            return canonical_dtype(dtype)
        except ConfigError:
            return None
    if count is None or count.dtype is None:
        return None
    try:
        return canonical_dtype(count.dtype)
    except ConfigError:
        return None  # an integer or float64 step: no peak in the table


def step_figures(
    count: StepCount | None,
    *,
    peaks: Peaks,
    step_s: float | None,
    samples_per_s: float | None = None,
    flops_per_step: float | None = None,
    dtype: str | None = None,
) -> tuple[Flops, BandwidthEstimate]:
    """The ``flops`` section and the bandwidth estimate of a run.

    ``flops_per_step`` (given by the user) replaces the counted FLOPs; ``dtype`` names the
    peak to use instead of the counted step's dominant dtype. When the counted step's sample
    count and ``samples_per_s`` are known, rates follow the samples (steps of other sizes
    are scaled), else they are per step over ``step_s``.
    """
    per_step = flops_per_step if flops_per_step is not None else (count.flops if count else None)
    bytes_per_step = count.bytes if count is not None else None
    steps_per_s = None
    if count is not None and count.samples and samples_per_s:
        steps_per_s = samples_per_s / count.samples
    elif step_s:
        steps_per_s = 1.0 / step_s

    key = _peak_dtype(count, dtype)
    peak = peaks.tflops.get(key) if key is not None else None
    bandwidth_peak = peaks.bandwidth_gb_s
    ridge = ridge_flop_per_byte(peak.value if peak else None,
                                bandwidth_peak.value if bandwidth_peak else None)

    achieved_tflops = None
    if per_step is not None and steps_per_s:
        achieved_tflops = per_step * steps_per_s / 1e12
    mfu = 100.0 * achieved_tflops / peak.value if achieved_tflops is not None and peak else None
    error = None
    if peak is not None and mfu is not None and mfu > 100.0:
        error = (
            f"MFU {mfu:.0f}% exceeds 100%: the FLOPs per step ({per_step:.4g}) or the peak "
            f"({peak.value:.4g} TFLOP/s, {peak.source}) is wrong"
        )
        mfu = None

    estimate = _bandwidth(bytes_per_step, steps_per_s, peaks)
    if error is not None or estimate.error is not None:
        ridge = None  # one of its peaks is wrong: the ridge it gives is too
    intensity = per_step / bytes_per_step if per_step is not None and bytes_per_step else None
    flops = Flops(
        per_step=per_step,
        achieved_tflops=achieved_tflops,
        mfu_pct=mfu,
        peak_tflops=peak.value if peak else None,
        peak_source=peak.source if peak else None,
        dtype=key or (count.dtype if count else None),
        bytes_per_step=bytes_per_step,
        intensity_flop_per_byte=intensity,
        ridge_flop_per_byte=ridge,
        # bytes counted above what the memory could move stay in cache: no verdict from them
        roofline=roofline_verdict(per_step, bytes_per_step, ridge)
        if per_step is not None and bytes_per_step is not None and estimate.error is None
        else None,
        by_family=_by_family(count, ridge),
        source=None if per_step is None else ("user" if flops_per_step is not None else "counted"),
        error=error,
    )
    return flops, estimate


def _by_family(count: StepCount | None, ridge: float | None) -> list[dict[str, Any]] | None:
    if count is None:
        return None
    return [
        {
            "family": f.family,
            "flops": f.flops,
            "bytes": f.bytes,
            "ops": f.ops,
            "intensity_flop_per_byte": f.flops / f.bytes if f.bytes > 0 else None,
            "roofline": roofline_verdict(f.flops, f.bytes, ridge),
        }
        for f in count.families
    ]


def _bandwidth(bytes_per_step: float | None, steps_per_s: float | None,
               peaks: Peaks) -> BandwidthEstimate:
    peak = peaks.bandwidth_gb_s
    if bytes_per_step is None or not steps_per_s:
        return BandwidthEstimate(peak_gb_s=peak.value if peak else None,
                                 peak_source=peak.source if peak else None)
    achieved = bytes_per_step * steps_per_s / 1e9
    util = 100.0 * achieved / peak.value if peak else None
    error = None
    if peak is not None and util is not None and util > 100.0:
        error = (
            f"estimated bandwidth {achieved:.4g} GB/s exceeds the peak {peak.value:.4g} GB/s "
            f"({peak.source}): the counted bytes overstate DRAM traffic (tensors that stay "
            "in cache, or fused kernels), so the estimate does not apply"
        )
        util = None
    return BandwidthEstimate(
        achieved_gb_s=achieved,
        peak_gb_s=peak.value if peak else None,
        peak_source=peak.source if peak else None,
        util_pct=util,
        error=error,
    )
