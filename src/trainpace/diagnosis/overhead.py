"""Host overhead: kernels launched faster than the host can issue them, a saturated host CPU,
and the framework's own work between the user's hooks (Lightning, the HF Trainer).
"""

from __future__ import annotations

from trainpace.diagnosis._context import Context, Outcome, Verdict
from trainpace.summary import Finding
from trainpace.units import format_duration as duration
from trainpace.units import number_or_none


def host_overhead(ctx: Context) -> Outcome:
    """Launch-bound kernels (from a trace) and a saturated host CPU."""
    s, t = ctx.summary, ctx.t
    k, h = s.kernels, s.host
    verdicts: list[Verdict] = []
    # Many short kernels make a step launch-bound only when the device waits for them: a
    # long launch-to-start lag means the host is ahead and the queue is deep.
    queue_deep = k.launch_lag_us is not None and k.launch_lag_us > t.launch_lag_starved_us
    if (k.short_pct is not None and k.short_pct >= t.short_kernel_warning_pct
            and not queue_deep):
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
    if saturated and h.system_cpu_pct is not None:
        cores = ctx.cpu_count
        # one of several ranks on the host: the job's ranks are its own, not others
        job = ctx.measured_mean("job_cpu_pct")
        mine = job if job is not None else h.process_cpu_pct
        share = min(100.0, mine / cores) if mine is not None and cores else None
        others = max(0.0, h.system_cpu_pct - share) if share is not None else None
        evidence = {"system_cpu_pct": h.system_cpu_pct, "process_cpu_pct": h.process_cpu_pct,
                    "cpu_count": cores, "process_share_pct": share, "others_pct": others}
        if job is not None:
            evidence["job_cpu_pct"] = job
        whose = ("this job's ranks on this host and their workers" if job is not None
                 else "this run and its workers")
        if others is not None and others >= t.cpu_others_pct:
            # the machine's, not the run's: no bottleneck in the user's code is named
            verdicts.append(Verdict(Finding(
                id="host_cpu", severity="warning",
                title=f"The host CPUs are {h.system_cpu_pct:.0f}% busy, {others:.0f}% of them "
                      f"with other processes ({whose}: {share:.0f}%)",
                evidence=evidence,
                advice=["other processes take the cores that feed the device: run where the "
                        "cores are free; nothing in the training needs to change for it"]),
                None, None))
        else:
            verdicts.append(Verdict(Finding(
                id="host_cpu", severity="warning",
                title=f"The host CPUs are {h.system_cpu_pct:.0f}% busy",
                evidence=evidence,
                advice=["this run keeps the CPU busy (its DataLoader workers, tokenization, "
                        "the loop): fewer workers doing cheaper work, or move preprocessing "
                        "offline"]),
                "host_overhead", None))
    py = h.python_pct
    if py is not None and py >= t.python_overhead_warning_pct:
        verdicts.append(Verdict(Finding(
            id="python_overhead", severity="warning",
            title=f"Python between operators takes {py:.0f}% of the step",
            evidence={"python_pct": py, "source": "trace"},
            advice=["torch.compile fuses the step's ops and removes the Python between them; "
                    "a larger batch makes each op longer against the same Python; move "
                    "per-step Python (logging, metrics, .item()) out of the step or to every "
                    "N steps"]),
            "host_overhead", py))
    if verdicts:
        return Outcome(verdicts=tuple(verdicts))
    if k.short_pct is None and h.system_cpu_pct is None and h.python_pct is None:
        return Outcome(skipped="no kernel statistics (profiler trace) and no host CPU reading")
    deep = (f" but the launch queue is deep (median launch-to-start lag "
            f"{k.launch_lag_us:.0f} µs): not launch-bound" if queue_deep else "")
    parts = [f"{k.short_pct:.0f}% short kernels{deep}" if k.short_pct is not None else None,
             f"host CPU {h.system_cpu_pct:.0f}%" if h.system_cpu_pct is not None else None,
             f"Python {h.python_pct:.0f}% of the step" if h.python_pct is not None else None]
    return Outcome(checked=", ".join(p for p in parts if p))


# ---- the framework's own work (Lightning, the HF Trainer) --------------------------------

_FRAMEWORK_ADVICE = {
    "lightning": "Lightning's work between your hooks (its logging of self.log values, the "
                 "progress bar, the SIGTERM flag it broadcasts before each batch under DDP): "
                 "log less often (Trainer(log_every_n_steps=...)), enable_progress_bar=False, "
                 "or make each step longer (a larger batch) so the same work is a smaller share",
    "huggingface": "the Trainer's work between on_step_end and the next batch (its loss "
                   "logging and the progress bar): raise logging_steps, disable_tqdm=True, or "
                   "make each step longer (a larger batch) so the same work is a smaller share",
}


def framework_work(ctx: Context) -> Outcome:
    """The framework's own work per step (Lightning, the HF Trainer): part of each step and of
    the throughput, measured by the integration as each iteration's time outside the user's
    hooks and the loader (meta.json's ``framework``)."""
    facts = ctx.meta.get("framework")
    if not isinstance(facts, dict):
        return Outcome(skipped="no framework integration ran the loop (meta.json framework)")
    name = str(facts.get("name") or "the framework")
    pct = number_or_none(facts.get("work_pct"))
    per_step_s = number_or_none(facts.get("work_s_per_step"))
    if pct is None or per_step_s is None:
        return Outcome(skipped=f"{name}: no step past the warm-up to measure its own work on")
    text = f"framework work per step: {duration(per_step_s)}, {pct:.0f}%"
    if pct < ctx.t.framework_work_info_pct:
        return Outcome(checked=text)
    warning = pct >= ctx.t.framework_work_warning_pct
    return Outcome(verdicts=(Verdict(Finding(
        id="framework_work", severity="warning" if warning else "info",
        title=f"Framework work per step: {duration(per_step_s)}, {pct:.0f}% of the step "
              f"({name}'s own work between your hooks and the loader)",
        evidence={"framework": name, "work_s_per_step": per_step_s, "work_pct": pct,
                  "step_s_mean": number_or_none(facts.get("step_s_mean")),
                  "steps": facts.get("steps")},
        advice=[_FRAMEWORK_ADVICE.get(name, "the framework's work between your hooks: log "
                                            "less often, or make each step longer")]),
        "host_overhead" if warning else None, pct if warning else None),))
