"""The diagnosis rules, in the order an expert checks them (DESIGN.md).

Step-time anomalies → throughput vs what the hardware allows → device and bandwidth
utilization → data loading → host overhead → communication and rank imbalance. Each rule is a
small pure function of a :class:`Context` returning an :class:`Outcome`: findings with their
evidence (the numbers) and advice computed from them, or what it checked, or why it could not.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from trainpace.diagnose import advice as adv
from trainpace.diagnose._context import Context, Outcome, Verdict
from trainpace.stats import median
from trainpace.summary import Finding, Severity

Rule = Callable[[Context], Outcome]


def _verdict(
    id: str,
    severity: Severity,
    title: str,
    evidence: dict[str, Any],
    advice: Sequence[str],
    *,
    bottleneck: str | None = None,
    lost_pct: float | None = None,
) -> Outcome:
    finding = Finding(
        id=id, severity=severity, title=title, evidence=evidence, advice=list(advice)
    )
    return Outcome(verdicts=(Verdict(finding, bottleneck, lost_pct),))


def _banded(value: float, warning: float, critical: float) -> Severity:
    return "critical" if value >= critical else "warning" if value >= warning else "info"


def _period(steps: Sequence[int], tolerance_pct: float) -> int | None:
    """The common interval of step numbers, if every gap is within tolerance of the median gap."""
    gaps = [b - a for a, b in itertools.pairwise(steps)]
    typical = median(gaps)
    if typical is None or typical < 2:
        return None
    tolerance = max(1.0, typical * tolerance_pct / 100.0)
    if all(abs(gap - typical) <= tolerance for gap in gaps):
        return round(typical)
    return None


# ---- 1. step-time anomalies -------------------------------------------------------------


def _too_few_steps(ctx: Context, need: int, what: str) -> Outcome | None:
    if ctx.steps is None:
        return Outcome(skipped=f"no per-step records (steps.jsonl) for the {what} check")
    n = len(ctx.times.step_s)
    if n < need:
        return Outcome(skipped=f"only {n} measured steps; the {what} check needs {need}")
    return None


def step_outliers(ctx: Context) -> Outcome:
    """Stalls (> stall_factor × the median step) and periodic slow steps (every N steps)."""
    t, times = ctx.t, ctx.times
    n = len(times.step_s)
    short = _too_few_steps(ctx, t.outlier_min_steps, "stall")
    if short is not None:
        return short
    med = median(times.step_s) or 0.0
    wait_med = median(times.wait_s) or 0.0
    spikes = [i for i, s in enumerate(times.step_s) if s > t.spike_factor * med]
    period = None
    if len(spikes) >= t.spike_min_count:
        period = _period([times.step[i] for i in spikes], t.period_tolerance_pct)
    chosen = spikes if period else [i for i in spikes if times.step_s[i] > t.stall_factor * med]
    if not chosen:
        return Outcome(
            checked=f"no step over {t.stall_factor:g}× the median ({adv.duration(med)}) "
            f"in {n} steps, no periodic slow step"
        )
    lost_s = sum(times.step_s[i] - med for i in chosen)
    lost_pct = 100.0 * lost_s / sum(times.step_s)
    in_wait_s = sum(max(0.0, times.wait_s[i] - wait_med) for i in chosen)
    in_loader = in_wait_s >= 0.5 * lost_s
    severity = _banded(lost_pct, t.outlier_warning_pct, t.outlier_critical_pct)
    slow = [times.step_s[i] for i in chosen]
    worst = max(chosen, key=lambda i: times.step_s[i])
    evidence = {
        "measured_steps": n,
        "step_s_median": med,
        "count": len(chosen),
        "period_steps": period,
        "outlier_steps": [times.step[i] for i in chosen[:20]],
        "outlier_step_s_median": median(slow),
        "worst_step": times.step[worst],
        "worst_step_s": times.step_s[worst],
        "lost_s": lost_s,
        "lost_pct": lost_pct,
        "in_data_wait_pct": 100.0 * in_wait_s / lost_s if lost_s > 0 else None,
    }
    each = adv.duration(lost_s / len(chosen))
    if period:
        kind = "stall" if max(slow) > t.stall_factor * med else "slow step"
        title = (
            f"Periodic {kind} every {period} steps: {len(chosen)} steps took "
            f"{adv.duration(median(slow) or 0.0)} instead of {adv.duration(med)} "
            f"({lost_pct:.1f}% of the time)"
        )
        if in_loader:
            advice = [
                f"the extra {each} each time is in the data wait: the loader runs dry every "
                f"{period} steps — an epoch boundary that restarts the workers "
                "(persistent_workers=True) or a prefetch queue too short for slow batches "
                f"(raise prefetch_factor) — {adv.gain_text(lost_pct)}"
            ]
        else:
            advice = [
                f"periodic work outside the loader costs {each} every {period} steps: a "
                "checkpoint save, an evaluation or a logging sync; save asynchronously "
                "(torch.distributed.checkpoint.async_save) or less often, evaluate less often "
                f"— {adv.gain_text(lost_pct)}"
            ]
        finding_id = "periodic_stall"
    else:
        title = (
            f"{len(chosen)} stall{'s' if len(chosen) > 1 else ''} over {t.stall_factor:g}× the "
            f"median step: worst {adv.duration(times.step_s[worst])} at step "
            f"{times.step[worst]} ({lost_pct:.1f}% of the time)"
        )
        cause = (
            "the stalls are in the data wait: a slow read or a slow sample (check storage and "
            "samples that decode slowly)"
            if in_loader
            else "the stalls are outside the loader: garbage collection (gc.freeze() after "
            "setup), host memory swapping, a competing process, or a synchronizing call "
            "(.item(), .cpu()) behind queued work"
        )
        advice = [f"{cause} — {adv.gain_text(lost_pct)}"]
        finding_id = "stalls"
    return _verdict(
        finding_id,
        severity,
        title,
        evidence,
        advice,
        bottleneck=None if severity == "info" else "data_loading" if in_loader else "host_overhead",
        lost_pct=lost_pct,
    )


def drift(ctx: Context) -> Outcome:
    """Step time that grows (or falls) over the run: first quarter against last quarter."""
    t, times = ctx.t, ctx.times
    n = len(times.step_s)
    short = _too_few_steps(ctx, t.drift_min_steps, "drift")
    if short is not None:
        return short
    med = median(times.step_s) or 0.0
    keep = [i for i, s in enumerate(times.step_s) if s <= t.stall_factor * med]
    quarter = max(1, len(keep) // 4)
    head, tail = keep[:quarter], keep[-quarter:]
    first = median([times.step_s[i] for i in head]) or 0.0
    last = median([times.step_s[i] for i in tail]) or 0.0
    if first <= 0:
        return Outcome(skipped="the first steps have no duration")
    drift_pct = 100.0 * (last / first - 1.0)
    wait_first = median([times.wait_s[i] for i in head]) or 0.0
    wait_last = median([times.wait_s[i] for i in tail]) or 0.0
    evidence = {
        "measured_steps": n,
        "first_quarter_step_s": first,
        "last_quarter_step_s": last,
        "drift_pct": drift_pct,
        "first_quarter_wait_s": wait_first,
        "last_quarter_wait_s": wait_last,
    }
    span = f"from {adv.duration(first)} to {adv.duration(last)} over {n} steps"
    if drift_pct >= t.drift_warning_pct:
        temps = ctx.system_values("temperature_c")
        if wait_last - wait_first >= 0.5 * (last - first):
            cause = "the growth is in the data wait: the loader slows down (a cache filling, "
            "files growing, workers leaking memory)"
        elif len(temps) >= 2 and temps[-1] - temps[0] >= 10:
            cause = (
                f"the device warmed from {temps[0]:.0f} to {temps[-1]:.0f} °C: "
                "check clocks and throttling"
            )
        else:
            cause = (
                "the growth is in the step itself: tensors kept across steps (summing losses "
                "without .item() or .detach() keeps their graphs alive), allocator "
                "fragmentation, or inputs that grow (sequence length)"
            )
        return _verdict(
            "drift",
            "warning",
            f"Step time drifts up {drift_pct:.0f}% {span}",
            evidence,
            [cause],
        )
    if drift_pct <= -t.drift_warning_pct:
        return _verdict(
            "drift",
            "info",
            f"Step time falls {-drift_pct:.0f}% {span}: warm-up may reach into the measured steps",
            evidence,
            [
                f"exclude more warm-up, e.g. Meter(warmup={ctx.summary.steps.warmup + n // 4}), "
                "or run longer so the steady window dominates"
            ],
        )
    return Outcome(checked=f"step time steady ({round(drift_pct):+d}% {span})")


# ---- 2. throughput vs what the hardware allows; 3. device and bandwidth ------------------


def _bandwidth_families(ctx: Context) -> list[str]:
    families = ctx.summary.flops.by_family or []
    total = sum(float(f.get("bytes") or 0.0) for f in families)
    lines = []
    for fam in sorted(families, key=lambda f: -float(f.get("bytes") or 0.0)):
        moved = float(fam.get("bytes") or 0.0)
        if fam.get("roofline") != "bandwidth_bound" or total <= 0 or moved <= 0:
            continue
        intensity = fam.get("intensity")
        at = f" at {intensity:.2g} FLOP/byte" if isinstance(intensity, (int, float)) else ""
        lines.append(f"{fam.get('family')} ops move {100.0 * moved / total:.0f}% of the bytes{at}")
    return lines[:3]


def hardware(ctx: Context) -> Outcome:
    """The roofline verdict and the bandwidth reading: compute-bound or bandwidth-bound."""
    s, t = ctx.summary, ctx.t
    f, b, d = s.flops, s.bandwidth, s.device
    bw_high = b.util_pct is not None and b.util_pct >= t.bandwidth_high_pct
    evidence = {
        "roofline": f.roofline,
        "intensity_flop_per_byte": f.intensity_flop_per_byte,
        "ridge_flop_per_byte": f.ridge_flop_per_byte,
        "achieved_tflops": f.achieved_tflops,
        "mfu_pct": f.mfu_pct,
        "peak_source": f.peak_source,
        "dtype": f.dtype,
        "bandwidth_util_pct": b.util_pct,
        "achieved_gb_s": b.achieved_gb_s,
        "peak_gb_s": b.peak_gb_s,
        "bandwidth_source": b.source,
    }
    lower_precision = f.dtype in ("float32", "torch.float32") and d.kind == "cuda"
    if f.roofline == "bandwidth_bound" or bw_high:
        if f.roofline == "bandwidth_bound" and f.intensity_flop_per_byte is not None:
            ridge = (
                f" below the ridge of {f.ridge_flop_per_byte:.3g}"
                if f.ridge_flop_per_byte is not None
                else ""
            )
            title = (
                f"Memory-bandwidth-bound: {f.intensity_flop_per_byte:.3g} FLOP per byte{ridge}"
            )
        elif b.util_pct is not None:
            title = f"Memory-bandwidth-bound: bandwidth {b.util_pct:.0f}% of peak ({b.source})"
        else:
            title = "Memory-bandwidth-bound (roofline verdict)"
        advice = _bandwidth_families(ctx)
        advice.append(
            "fuse chains of elementwise ops (torch.compile) so intermediates stay in cache "
            "instead of making round trips to memory; prefer in-place ops"
        )
        if lower_precision:
            advice.append("bf16 autocast halves the bytes every op moves")
        return _verdict(
            "bandwidth_bound", "warning", title, evidence, advice, bottleneck="memory_bandwidth"
        )
    if f.roofline == "compute_bound":
        if f.mfu_pct is not None and f.achieved_tflops is not None:
            title = (
                f"Compute-bound: {f.achieved_tflops:.3g} TFLOP/s, {f.mfu_pct:.0f}% of the peak"
                f" ({f.peak_source or 'peak source unknown'})"
            )
        else:
            title = "Compute-bound (above the ridge); MFU unknown: no peak for this device"
        advice = ["the device's arithmetic is the limit: fewer FLOPs or a faster device"]
        if lower_precision:
            advice.insert(0, "bf16 autocast: tensor cores run matmuls several times faster")
        elif f.mfu_pct is not None and f.mfu_pct < 40:
            advice.insert(0, "kernels run well below peak: torch.compile, matmul shapes in "
                          "multiples of 64, larger batches")
        return _verdict("compute_bound", "info", title, evidence, advice, bottleneck="compute")
    if f.roofline is None and d.util_pct is not None and d.util_pct >= t.device_busy_pct:
        return _verdict(
            "device_busy",
            "info",
            f"Device busy {d.util_pct:.0f}% of the time; no FLOP count, so compute and "
            "bandwidth cannot be told apart",
            evidence,
            ["count FLOPs (the Meter does on its first step) to get the roofline verdict"],
            bottleneck="compute",
        )
    if f.roofline is None and b.util_pct is None:
        return Outcome(skipped="no FLOP count (flops.roofline) and no bandwidth reading")
    return Outcome(checked=f"bandwidth {b.util_pct:.0f}% of peak ({b.source})"
                   if b.util_pct is not None else "no roofline verdict")


def device_util(ctx: Context) -> Outcome:
    """Is the device busy? Low use with no data wait means the host cannot feed it."""
    s, t = ctx.summary, ctx.t
    d = s.device
    if d.util_pct is None:
        return Outcome(skipped=f"no utilization reading for the {d.kind or 'device'}")
    if d.util_pct >= t.device_util_low_pct:
        return Outcome(checked=f"device busy {d.util_pct:.0f}% (≥ {t.device_util_low_pct:g}%)")
    wait = s.data.wait_pct or 0.0
    if wait >= t.data_wait_warning_pct:
        return Outcome(
            checked=f"device busy {d.util_pct:.0f}%, explained by the data wait ({wait:.0f}%)"
        )
    lost = max(0.0, 100.0 - d.util_pct - wait)
    evidence = {"util_pct": d.util_pct, "kind": d.kind, "wait_pct": s.data.wait_pct,
                "samples_per_step": ctx.samples_per_step, "cpu_threads": s.host.cpu_threads}
    batch = ctx.samples_per_step
    batch_text = f" (now {batch:.0f} samples per step)" if batch else ""
    if d.kind == "cpu":
        threads = s.host.cpu_threads
        title = f"The CPU threads are busy only {d.util_pct:.0f}% of the time"
        advice = [
            f"the ops are too small to spread over {threads or 'the'} threads: a larger batch"
            f"{batch_text}; check torch.get_num_threads() against the cores"
        ]
    else:
        title = (
            f"The {d.kind or 'device'} is busy only {d.util_pct:.0f}% of the time, "
            "with no data wait to explain it"
        )
        advice = [
            f"the host does not enqueue work fast enough: a larger batch{batch_text} gives "
            "each launch more work; torch.compile(mode='reduce-overhead') or CUDA graphs cut "
            "launch cost; remove per-step syncs (.item(), .cpu(), printing tensors) — "
            f"{adv.gain_text(lost)}"
        ]
    return _verdict("device_idle", "warning", title, evidence, advice,
                    bottleneck="host_overhead", lost_pct=lost)


def memory(ctx: Context) -> Outcome:
    """Device memory near full: a risk of running out, and no room for a larger batch."""
    d = ctx.summary.device
    readings = ctx.system_values("memory_used_pct")
    peak = max(readings) if readings else d.memory_used_pct
    if peak is None:
        return Outcome(skipped=f"no memory reading for the {d.kind or 'device'}")
    if peak < ctx.t.memory_used_risk_pct:
        return Outcome(checked=f"memory {peak:.0f}% used at most")
    return _verdict(
        "memory_full",
        "warning",
        f"Device memory {peak:.0f}% used: close to running out",
        {"memory_used_pct": d.memory_used_pct, "memory_used_pct_max": peak, "kind": d.kind},
        [
            "activation checkpointing (torch.utils.checkpoint) on the largest blocks",
            "halve the micro-batch and accumulate two micro-batches per step to keep the batch",
            "bf16 autocast; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against "
            "fragmentation",
        ],
        bottleneck="memory_capacity",
    )


def thermal(ctx: Context) -> Outcome:
    """Clocks held back: throttle reasons active, or the temperature close to slowdown."""
    d, t = ctx.summary.device, ctx.t
    temps = ctx.system_values("temperature_c")
    temp = max(temps) if temps else d.temperature_c
    slowdown = getattr(d, "slowdown_temperature_c", None)
    if temp is None and d.throttle_pct is None:
        return Outcome(skipped=f"no temperature or throttle reading for the {d.kind or 'device'}")
    margin = slowdown - temp if slowdown is not None and temp is not None else None
    evidence = {"temperature_c_max": temp, "slowdown_temperature_c": slowdown,
                "margin_c": margin, "throttle_pct": d.throttle_pct,
                "throttle_reasons": getattr(d, "throttle_reasons", None)}
    throttled = d.throttle_pct is not None and d.throttle_pct >= t.throttle_warning_pct
    hot = margin is not None and margin <= t.thermal_margin_c
    if not (throttled or hot):
        parts = [f"{temp:.0f} °C" if temp is not None else None,
                 f"{margin:.0f} °C below slowdown" if margin is not None else None,
                 f"throttled {d.throttle_pct:.0f}% of the time"
                 if d.throttle_pct is not None else None]
        return Outcome(checked=", ".join(p for p in parts if p))
    if throttled:
        title = f"Clocks throttled {d.throttle_pct:.0f}% of the time"
    else:
        title = f"Temperature {temp:.0f} °C, {margin:.0f} °C from the slowdown threshold"
    return _verdict(
        "thermal",
        "warning",
        title,
        evidence,
        [
            "check cooling and airflow, and the power limit (nvidia-smi -q -d PERFORMANCE "
            "lists the active throttle reasons)",
        ],
        bottleneck="thermal",
        lost_pct=d.throttle_pct,
    )


# ---- 4. data loading ---------------------------------------------------------------------


def data_wait(ctx: Context) -> Outcome:
    """Does the step wait for its batch? And does the host-to-device copy cost much?"""
    s, t = ctx.summary, ctx.t
    wait_pct, wait_s, step_s = s.data.wait_pct, s.data.wait_s_per_step, ctx.step_s
    if wait_pct is None:
        return Outcome(skipped="no data wait measured (wrap the DataLoader with meter.loader)")
    n = ctx.measured_steps
    if n < t.data_wait_min_steps_warning:
        return Outcome(skipped=f"only {n} measured steps for the data wait")
    verdicts: list[Verdict] = []
    if wait_pct >= t.data_wait_warning_pct:
        severity: Severity = "warning"
        note = ""
        if wait_pct >= t.data_wait_critical_pct:
            if n >= t.data_wait_min_steps_critical:
                severity = "critical"
            else:
                note = f" (only {n} steps measured: not enough to call it critical)"
        waits = ctx.times.wait_s
        mean_wait = sum(waits) / len(waits) if waits else 0.0
        bursty = mean_wait > 0 and (median(waits) or 0.0) < 0.5 * mean_wait
        evidence = {
            "wait_pct": wait_pct, "wait_s_per_step": wait_s, "step_s_median": step_s,
            "exposed_wait_s_per_step": s.data.exposed_wait_s_per_step,
            "measured_steps": n, "device_util_pct": s.device.util_pct,
            "loader": dict(ctx.loader) if ctx.loader else None, "bursty": bursty,
        }
        if wait_s is not None and step_s:
            advice = adv.loader_advice(
                wait_pct=wait_pct, wait_s=wait_s, step_s=step_s, loader=ctx.loader,
                device_kind=s.device.kind, cpu_count=ctx.cpu_count, bursty=bursty,
                headroom=t.loader_headroom,
            )
        else:
            advice = [f"raise DataLoader num_workers — {adv.gain_text(wait_pct)}"]
        title = f"The step waits for data {wait_pct:.0f}% of the time{note}"
        verdicts.append(Verdict(Finding(id="data_wait", severity=severity, title=title,
                                        evidence=evidence, advice=advice),
                                "data_loading", wait_pct))
    h2d_s = s.data.h2d_s_per_step
    h2d_pct = 100.0 * h2d_s / step_s if h2d_s is not None and step_s else None
    if h2d_pct is not None and h2d_pct >= t.h2d_warning_pct:
        pinned = (ctx.loader or {}).get("pin_memory")
        verdicts.append(Verdict(Finding(
            id="h2d_copy", severity="warning",
            title=f"Host-to-device copies take {h2d_pct:.0f}% of the step",
            evidence={"h2d_s_per_step": h2d_s, "h2d_pct": h2d_pct, "pin_memory": pinned},
            advice=[("DataLoader(pin_memory=True) and " if not pinned else "")
                    + ".to(device, non_blocking=True) let the copy overlap compute — "
                    + adv.gain_text(h2d_pct)]),
            "data_loading", h2d_pct))
    if verdicts:
        return Outcome(verdicts=tuple(verdicts))
    h2d_text = f", host-to-device {h2d_pct:.0f}%" if h2d_pct is not None else ""
    return Outcome(
        checked=f"data wait {wait_pct:.1f}% of the step (< {t.data_wait_warning_pct:g}%)"
        f"{h2d_text}"
    )


# ---- host overhead -----------------------------------------------------------------------


def host_overhead(ctx: Context) -> Outcome:
    """Launch-bound kernels (from a trace) and a saturated host CPU."""
    s, t = ctx.summary, ctx.t
    k, h = s.kernels, s.host
    verdicts: list[Verdict] = []
    if k.short_pct is not None and k.short_pct >= t.short_kernel_warning_pct:
        lost = 100.0 - s.device.util_pct if s.device.util_pct is not None else None
        per_step = f"{k.per_step:.0f} kernels per step, " if k.per_step is not None else ""
        median_us = f" (median {k.median_us:.0f} µs)" if k.median_us is not None else ""
        verdicts.append(Verdict(Finding(
            id="launch_bound", severity="warning",
            title=f"Launch-bound: {per_step}{k.short_pct:.0f}% of them short{median_us}",
            evidence={"kernels_per_step": k.per_step, "kernel_median_us": k.median_us,
                      "short_pct": k.short_pct, "launch_lag_us": k.launch_lag_us,
                      "source": k.source},
            advice=["CUDA graphs or torch.compile(mode='reduce-overhead') replay the step "
                    "without a launch per kernel; fusing ops (torch.compile) makes fewer, "
                    "longer kernels; a larger batch makes each kernel longer"]),
            "host_overhead", lost))
    saturated = (h.system_cpu_pct is not None and h.system_cpu_pct >= t.host_cpu_saturated_pct
                 and s.device.kind not in (None, "cpu"))
    if saturated:
        verdicts.append(Verdict(Finding(
            id="host_cpu", severity="warning",
            title=f"The host CPUs are {h.system_cpu_pct:.0f}% busy",
            evidence={"system_cpu_pct": h.system_cpu_pct, "process_cpu_pct": h.process_cpu_pct,
                      "cpu_count": ctx.cpu_count},
            advice=["DataLoader workers, tokenization or other processes compete with the "
                    "training loop for the CPU: fewer workers doing cheaper work, or move "
                    "preprocessing offline"]),
            "host_overhead", None))
    if verdicts:
        return Outcome(verdicts=tuple(verdicts))
    if k.short_pct is None and h.system_cpu_pct is None:
        return Outcome(skipped="no kernel statistics (profiler trace) and no host CPU reading")
    parts = [f"{k.short_pct:.0f}% short kernels" if k.short_pct is not None else None,
             f"host CPU {h.system_cpu_pct:.0f}%" if h.system_cpu_pct is not None else None]
    return Outcome(checked=", ".join(p for p in parts if p))


# ---- 5. communication and rank imbalance -------------------------------------------------


def communication(ctx: Context) -> Outcome:
    """Time in collectives, and how much of it overlaps compute."""
    s, t = ctx.summary, ctx.t
    c = s.communication
    if c.share_pct is None:
        if s.world_size <= 1:
            return Outcome(checked="one process, nothing to exchange")
        return Outcome(skipped="no communication time measured (needs a profiler trace)")
    if c.share_pct < t.communication_warning_pct:
        return Outcome(checked=f"communication {c.share_pct:.1f}% of the step")
    severity = _banded(c.share_pct, t.communication_warning_pct, t.communication_critical_pct)
    overlap = c.overlap_pct
    advice = []
    if overlap is not None and overlap < 50:
        advice.append(
            f"only {overlap:.0f}% of it overlaps compute: let DDP start earlier "
            "(smaller bucket_cap_mb, gradient_as_bucket_view=True) or FSDP prefetch "
            "(forward_prefetch, backward_prefetch)"
        )
    advice.append(
        "accumulate gradients over more micro-batches (DDP no_sync()) to exchange less often; "
        f"check the interconnect (NCCL_DEBUG=INFO shows NVLink or PCIe) — "
        f"{adv.gain_text(c.share_pct * (1 - (overlap or 0) / 100))}"
    )
    return _verdict(
        "communication",
        severity,
        f"Communication takes {c.share_pct:.0f}% of the step"
        + (f", {overlap:.0f}% of it overlapped" if overlap is not None else ""),
        {"share_pct": c.share_pct, "overlap_pct": overlap, "source": c.source,
         "world_size": s.world_size},
        advice,
        bottleneck="communication",
        lost_pct=c.share_pct,
    )


def ranks(ctx: Context) -> Outcome:
    """A rank slower than the others holds every synchronous step back."""
    t = ctx.t
    entries = [r for r in ctx.summary.ranks if r.step_s_median is not None]
    if len(entries) < 2:
        return Outcome(checked="one rank") if len(ctx.summary.ranks) <= 1 else Outcome(
            skipped="no per-rank step times")
    typical = median([r.step_s_median for r in entries if r.step_s_median is not None]) or 0.0
    slow = max(entries, key=lambda r: r.step_s_median or 0.0)
    if typical <= 0 or slow.step_s_median is None:
        return Outcome(skipped="per-rank step times are zero")
    skew_pct = 100.0 * (slow.step_s_median / typical - 1.0)
    if skew_pct < t.straggler_warning_pct:
        return Outcome(checked=f"slowest rank {skew_pct:.0f}% over the median")
    waits = [r.wait_pct for r in entries if r.wait_pct is not None]
    wait_typical = median(waits)
    where = f"rank {slow.rank}" + (f" on {slow.host}" if slow.host else "")
    if (slow.wait_pct is not None and wait_typical is not None
            and slow.wait_pct - wait_typical >= t.data_wait_warning_pct):
        cause = (f"{where} waits for data {slow.wait_pct:.0f}% of its step against "
                 f"{wait_typical:.0f}% on the others: its input pipeline is the culprit "
                 "(that host's disk or CPU, or an uneven shard)")
    else:
        cause = (f"{where} is slower in compute: check that device's clocks and temperature, "
                 "other processes on it, and uneven work (variable sequence lengths: bucket "
                 "or pack them)")
    return _verdict(
        "straggler",
        _banded(skew_pct, t.straggler_warning_pct, t.straggler_critical_pct),
        f"Rank {slow.rank} is {skew_pct:.0f}% slower than the median rank",
        {"slowest_rank": slow.rank, "host": slow.host, "step_s_median": slow.step_s_median,
         "ranks_step_s_median": typical, "skew_pct": skew_pct, "wait_pct": slow.wait_pct,
         "ranks_wait_pct_median": wait_typical, "ranks": len(entries)},
        [f"{cause} — {adv.gain_text(100.0 * (1 - typical / slow.step_s_median))}"],
        bottleneck="straggler",
        lost_pct=skew_pct,
    )


RULES: tuple[tuple[str, Rule], ...] = (
    ("step-time outliers", step_outliers),
    ("step-time drift", drift),
    ("roofline and bandwidth", hardware),
    ("device utilization", device_util),
    ("device memory", memory),
    ("thermal", thermal),
    ("data loading", data_wait),
    ("host overhead", host_overhead),
    ("communication", communication),
    ("rank imbalance", ranks),
)
"""(name, rule) in the expert's order; :func:`trainpace.diagnose.diagnose` runs them all."""

