"""Throughput against what the hardware allows (MFU, the roofline, a peak judged wrong), then
the device: its utilization, its memory, and its clocks held back by heat or power.

The second and third of the expert's looks (:data:`trainpace.diagnosis.rules.RULES`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainpace.diagnosis import advice as adv
from trainpace.diagnosis._context import Context, Outcome, Verdict, verdict
from trainpace.summary import Finding

_DEVICE_WORDS = {"cuda": "GPU", "mps": "GPU", "cpu": "CPU"}


def _bandwidth_families(ctx: Context) -> list[str]:
    families = ctx.summary.flops.by_family or []
    total = sum(float(f.get("bytes") or 0.0) for f in families)
    lines = []
    for fam in sorted(families, key=lambda f: -float(f.get("bytes") or 0.0)):
        moved = float(fam.get("bytes") or 0.0)
        if fam.get("roofline") != "bandwidth_bound" or total <= 0 or moved <= 0:
            continue
        intensity = fam.get("intensity_flop_per_byte")
        at = f" at {intensity:.2g} FLOP/byte" if isinstance(intensity, (int, float)) else ""
        lines.append(f"{fam.get('family')} ops move {100.0 * moved / total:.0f}% of the bytes{at}")
    return lines[:3]


def hardware(ctx: Context) -> Outcome:
    """The roofline verdict and the bandwidth reading; a figure above its peak is named as a
    wrong peak (or count) instead of being shown."""
    outcome = _roofline(ctx)
    f, b = ctx.summary.flops, ctx.summary.bandwidth
    errors = [e for e in (f.error, b.error) if e]
    if not errors:
        return outcome
    wrong = Verdict(Finding(
        id="peak_wrong", severity="warning",
        title="A figure exceeds its peak, so it is not shown: " + errors[0],
        evidence={"flops_error": f.error, "bandwidth_error": b.error,
                  "peak_tflops": f.peak_tflops, "peak_source": f.peak_source,
                  "peak_gb_s": b.peak_gb_s, "bandwidth_peak_source": b.peak_source,
                  "mfu_pct": f.mfu_pct, "bandwidth_util_pct": b.util_pct},
        advice=_peak_wrong_advice(ctx)))
    return Outcome(verdicts=(wrong, *outcome.verdicts), checked=outcome.checked,
                   skipped=None if outcome.verdicts else outcome.skipped)


def _peak_wrong_advice(ctx: Context) -> list[str]:
    """What to do about each figure above its peak: the matmul peak is measured again; the
    bandwidth estimate counts bytes that never left the cache."""
    s = ctx.summary
    advice = []
    if s.flops.error:
        threads = s.host.cpu_threads
        flag = f" --threads {threads}" if s.device.kind == "cpu" and threads else ""
        advice.append("MFU over 100% is not a measurement: the matmul peak (or the FLOP count) "
                      f"is wrong; a measured ceiling below it is measured again after the next "
                      f"run, or measure it in full now (`trainpace ceilings{flag}` on a quiet "
                      "machine), or pass the right one (Meter(peaks={...}))")
    if s.bandwidth.error:
        advice.append("the bandwidth estimate counts every byte an op touches, including bytes "
                      "that stay in cache, so here it neither gives a share of the peak nor a "
                      "roofline verdict; a GPU's sampled DRAM activity (NVML GPM, DCGM) does")
    return advice


def _provisional_note(ctx: Context) -> str | None:
    """meta.json's note when the only peak known is a provisional ceiling, else None."""
    ceilings = ctx.meta.get("ceilings")  # what the end of the run did about the peaks
    if isinstance(ceilings, dict) and ceilings.get("status") == "provisional":
        return str(ceilings.get("note"))
    vitals = ctx.meta.get("vitals")
    peaks = vitals.get("peaks") if isinstance(vitals, dict) else None
    note = peaks.get("note") if isinstance(peaks, dict) else None
    return note if isinstance(note, str) and "provisional" in note else None


def _roofline(ctx: Context) -> Outcome:
    """The roofline verdict and the bandwidth reading: compute-bound or bandwidth-bound."""
    s, t = ctx.summary, ctx.t
    f, b, d = s.flops, s.bandwidth, s.device
    bw_high = b.util_pct is not None and b.util_pct >= t.bandwidth_high_pct
    # below the ridge, yet far from the memory's roof: neither memory nor arithmetic limits the
    # step (launches, the host do); bandwidth-bound needs a real share of the peak
    below_roof = (f.roofline == "bandwidth_bound" and b.util_pct is not None and not bw_high)
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
        "flops_error": f.error,
        "bandwidth_error": b.error,
        "peak_note": _provisional_note(ctx),
    }
    if below_roof:
        return Outcome(checked=f"below the ridge ({f.intensity_flop_per_byte:.3g} FLOP/byte) "
                       f"but moving only {b.util_pct:.1f}% of peak bandwidth ({b.source}): not "
                       f"bandwidth-bound (that needs ≥ {t.bandwidth_high_pct:.0f}%)"
                       if f.intensity_flop_per_byte is not None else
                       f"moving only {b.util_pct:.1f}% of peak bandwidth: not bandwidth-bound")
    lower_precision = f.dtype in ("float32", "torch.float32") and d.kind == "cuda"
    if f.roofline == "bandwidth_bound" or bw_high:
        if f.roofline == "bandwidth_bound" and f.intensity_flop_per_byte == 0:
            moved = (f" at {b.achieved_gb_s:.3g} GB/s" if b.achieved_gb_s is not None else "")
            title = f"Memory-bandwidth-bound: the step only moves data (no matmul FLOPs){moved}"
        elif f.roofline == "bandwidth_bound" and f.intensity_flop_per_byte is not None:
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
        return verdict(
            "bandwidth_bound", "warning", title, evidence, advice, bottleneck="memory_bandwidth"
        )
    if f.roofline == "compute_bound":
        if f.mfu_pct is not None and f.achieved_tflops is not None:
            title = (
                f"Compute-bound: {f.achieved_tflops:.3g} TFLOP/s, {f.mfu_pct:.0f}% of the peak"
                f" ({f.peak_source or 'peak source unknown'})"
            )
        else:
            why = f.error or "no peak for this device"
            title = f"Compute-bound (above the ridge); MFU unknown: {why}"
        advice = ["the device's arithmetic is the limit: fewer FLOPs or a faster device"]
        if lower_precision:
            advice.insert(0, "bf16 autocast: tensor cores run matmuls several times faster")
        elif f.mfu_pct is not None and f.mfu_pct < 40:
            advice.insert(0, "kernels run well below peak: torch.compile, matmul shapes in "
                          "multiples of 64, larger batches")
        return verdict("compute_bound", "info", title, evidence, advice, bottleneck="compute")
    if f.roofline is None and d.util_pct is not None and d.util_pct >= t.device_busy_pct:
        # FLOPs counted but no peak known (a CPU before `trainpace ceilings`), or not counted.
        provisional = _provisional_note(ctx)
        if f.per_step is not None and provisional is not None:
            missing = "the peak is provisional (measured on a busy machine), so not used"
            fix = provisional
        elif f.per_step is not None:
            missing = f"no peak known for the {d.kind or 'device'}"
            threads = ctx.summary.host.cpu_threads
            flag = f" --threads {threads}" if d.kind == "cpu" and threads else ""
            fix = (f"run `trainpace ceilings{flag}` once on this machine (or pass "
                   "Meter(peaks=...)) to get the roofline verdict")
        else:
            missing = "no FLOP count"
            fix = "count FLOPs (the Meter does on its first step) to get the roofline verdict"
        return verdict(
            "device_busy",
            "info",
            f"Device busy {d.util_pct:.0f}% of the time; {missing}, so compute and "
            "bandwidth cannot be told apart",
            evidence,
            [fix],
            bottleneck="compute",
        )
    if f.roofline is None and b.util_pct is None:
        if f.per_step is not None and _provisional_note(ctx) is not None:
            return Outcome(skipped=f"FLOPs counted but {_provisional_note(ctx)}")
        if f.per_step is not None:
            return Outcome(skipped=f"FLOPs counted but no peak known for the {d.kind or 'device'}"
                           " (trainpace ceilings measures one), so no roofline verdict")
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
    idle = 100.0 - d.util_pct
    if wait >= t.data_wait_warning_pct and wait >= 0.5 * idle:
        return Outcome(
            checked=f"device busy {d.util_pct:.0f}%, explained by the data wait ({wait:.0f}%)"
        )
    lost = max(0.0, 100.0 - d.util_pct - wait)
    system_cpu = s.host.system_cpu_pct
    evidence = {"util_pct": d.util_pct, "kind": d.kind, "wait_pct": s.data.wait_pct,
                "samples_per_step": ctx.samples_per_step, "cpu_threads": s.host.cpu_threads,
                "system_cpu_pct": system_cpu}
    batch = ctx.samples_per_step
    batch_text = f" (now {batch:.0f} samples per step)" if batch else ""
    finding_id = "device_idle"
    busy = (d.kind == "cpu" and system_cpu is not None
            and system_cpu >= t.cpu_contention_system_pct)
    job, cores = ctx.measured_mean("job_cpu_pct"), ctx.cpu_count
    if busy and system_cpu is not None and job is not None and cores:
        # one of several ranks on the host: the busy share left to others decides
        evidence["job_cpu_pct"] = job
        busy = system_cpu - min(100.0, job / cores) >= t.cpu_others_pct
        if not busy:
            title = (f"The job's ranks on this host keep its CPU {system_cpu:.0f}% busy: this "
                     f"rank's threads get {d.util_pct:.0f}% of their time")
            advice = ["the ranks' threads together want more cores than the host has: "
                      "torch.set_num_threads(cores ÷ ranks on the host) in each rank, "
                      f"now {s.host.cpu_threads or 'unknown'} — {adv.gain_text(lost)}"]
            return verdict(finding_id, "warning", title, evidence, advice,
                           bottleneck="host_overhead", lost_pct=lost)
    if busy:
        finding_id = "cpu_contention"
        process = s.host.process_cpu_pct
        share = (f"; this process had {min(100.0, process / cores):.0f}% of the machine"
                 if process is not None and cores else "")
        evidence["process_share_pct"] = (min(100.0, process / cores)
                                         if process is not None and cores else None)
        title = (f"Other processes take the CPU: it is {system_cpu:.0f}% busy while this run's "
                 f"threads get {d.util_pct:.0f}% of their time{share}")
        advice = [
            "run where the cores are free, or use fewer threads than the cores left "
            f"(torch.set_num_threads; now {s.host.cpu_threads or 'unknown'}) — "
            f"{adv.gain_text(lost)}"
        ]
    elif d.kind == "cpu":
        threads = s.host.cpu_threads
        title = f"The CPU threads are busy only {d.util_pct:.0f}% of the time"
        advice = [
            f"the ops are too small to spread over {threads or 'the'} threads: a larger batch"
            f"{batch_text}; check torch.get_num_threads() against the cores"
        ]
    else:
        title = (
            f"The {_DEVICE_WORDS.get(d.kind or '', 'device')} is busy only "
            f"{d.util_pct:.0f}% of the time, "
            "with no data wait to explain it"
        )
        advice = [
            f"the host does not enqueue work fast enough: a larger batch{batch_text} gives "
            "each launch more work; torch.compile(mode='reduce-overhead') or CUDA graphs cut "
            "launch cost; remove per-step syncs (.item(), .cpu(), printing tensors) — "
            f"{adv.gain_text(lost)}"
        ]
    # Contention is the machine's, not the training's: it names no bottleneck, so the same
    # script gets the same verdict whatever else ran beside it.
    return verdict(finding_id, "warning", title, evidence, advice,
                   bottleneck=None if finding_id == "cpu_contention" else "host_overhead",
                   lost_pct=lost)


def _highest(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def memory(ctx: Context) -> Outcome:
    """Memory near full: a risk of running out, and no room for a larger batch."""
    d = ctx.summary.device
    readings = ctx.system_values("memory_used_pct")
    peak = _highest(d.memory_used_pct_max, max(readings) if readings else None,
                    d.memory_used_pct)
    if peak is None:
        return Outcome(skipped=f"no memory reading for the {d.kind or 'device'}")
    if peak < ctx.t.memory_used_risk_pct:
        return Outcome(checked=f"memory {peak:.0f}% used at most")
    evidence: dict[str, Any] = {
        "memory_used_pct": d.memory_used_pct, "memory_used_pct_max": peak,
        "memory_used_gb": d.memory_used_gb, "memory_total_gb": d.memory_total_gb,
        "kind": d.kind, "process_rss_gb_max": None, "process_pct": None}
    if d.kind == "cpu":
        # host memory: this process's share of it says whose the pressure is
        rss, total = ctx.host_rows["rss_gb"], ctx.host_rows["memory_total_gb"]
        rss_max = float(np.nanmax(rss)) if np.isfinite(rss).any() else None
        total_gb = (float(np.nanmax(total)) if np.isfinite(total).any()
                    else d.memory_total_gb)
        mine = 100.0 * rss_max / total_gb if rss_max is not None and total_gb else None
        evidence.update(process_rss_gb_max=rss_max, process_pct=mine)
        if mine is not None and rss_max is not None and mine < 0.5 * peak:
            return verdict(
                "memory_full", "warning",
                f"Host memory {peak:.0f}% used, by other processes: this one held at most "
                f"{rss_max:.2f} GB ({mine:.0f}% of {total_gb:.0f} GB)", evidence,
                ["the pressure is the machine's, not this run's: free memory held by other "
                 "processes (or run where it is free) so nothing swaps; nothing in the "
                 "training needs to change for it"])
    which = "Host memory (the CPU's)" if d.kind == "cpu" else "Device memory"
    advice = ["activation checkpointing (torch.utils.checkpoint) on the largest blocks",
              "halve the micro-batch and accumulate two micro-batches per step to keep the "
              "batch"]
    if d.kind == "cuda":
        advice.append("bf16 autocast; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                      "against fragmentation")
    else:
        advice.append("bf16 autocast halves the activations' memory")
    return verdict("memory_full", "warning", f"{which} {peak:.0f}% used: close to running out",
                   evidence, advice, bottleneck="memory_capacity")


POWER_REASONS = ("sw_power_cap", "hw_power_brake_slowdown", "board_limit")
HEAT_REASONS = ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown")


def thermal(ctx: Context) -> Outcome:
    """Clocks held back: throttle reasons active, or the temperature close to slowdown."""
    d, t = ctx.summary.device, ctx.t
    temps = ctx.system_values("temperature_c")
    temp = _highest(d.temperature_c_max, max(temps) if temps else None, d.temperature_c)
    slowdown = d.slowdown_temperature_c
    if temp is None and d.throttle_pct is None:
        return Outcome(skipped=f"no temperature or throttle reading for the {d.kind or 'device'}")
    margin = slowdown - temp if slowdown is not None and temp is not None else None
    reasons = d.throttle_reasons or {}
    evidence = {"temperature_c_max": temp, "slowdown_temperature_c": slowdown,
                "margin_c": margin, "throttle_pct": d.throttle_pct, "throttle_reasons": reasons,
                "sm_clock_mhz": d.sm_clock_mhz, "sm_clock_max_mhz": d.sm_clock_max_mhz,
                "power_w": d.power_w, "power_limit_w": d.power_limit_w}
    throttled = d.throttle_pct is not None and d.throttle_pct >= t.throttle_warning_pct
    hot = margin is not None and margin <= t.thermal_margin_c
    if not (throttled or hot):
        parts = [f"{temp:.0f} °C" if temp is not None else None,
                 f"{margin:.0f} °C below slowdown" if margin is not None else None,
                 f"throttled {d.throttle_pct:.0f}% of the time"
                 if d.throttle_pct is not None else None]
        return Outcome(checked=", ".join(p for p in parts if p))
    if throttled:
        top = sorted(reasons.items(), key=lambda kv: -kv[1])[:3]
        named = f" ({', '.join(f'{k} {v:.0f}%' for k, v in top)})" if top else ""
        title = f"Clocks throttled {d.throttle_pct:.0f}% of the time{named}"
    else:
        title = f"Temperature {temp:.0f} °C, {margin:.0f} °C from the slowdown threshold"
    advice = []
    if any(reasons.get(r) for r in POWER_REASONS):
        power = (f" ({d.power_w:.0f} W of {d.power_limit_w:.0f} W)"
                 if d.power_w is not None and d.power_limit_w is not None else "")
        advice.append(f"the power limit holds the clocks back{power}: nvidia-smi -q -d POWER; "
                      "a higher limit (nvidia-smi -pl) where the cooling and the host allow")
    if hot or any(reasons.get(r) for r in HEAT_REASONS) or not advice:
        advice.append("check cooling and airflow (nvidia-smi -q -d PERFORMANCE lists the "
                      "active throttle reasons)")
    return verdict("thermal", "warning", title, evidence, advice, bottleneck="thermal",
                   lost_pct=d.throttle_pct)
