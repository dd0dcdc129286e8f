"""Step time that drifts over the run (first quarter against last), and its cause from the
signs recorded then: the data wait, other processes on the CPU, heat, growing inputs, this
process's memory.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from trainpace.diagnosis import advice as adv
from trainpace.diagnosis._context import Context, Outcome, verdict
from trainpace.diagnosis.anomalies import too_few_steps
from trainpace.diagnosis.host_signs import step_signs
from trainpace.stats import median
from trainpace.summary import Severity
from trainpace.units import format_duration as duration


def _grown_pct(ctx: Context, head: np.ndarray, tail: np.ndarray) -> float | None:
    """How much the work per step (tokens, else samples) grew, first quarter to last."""
    steps = ctx.all_steps
    if steps is None:
        return None
    for name in ("tokens", "samples"):
        work = steps.column(name)[ctx.times.index]
        first, last = median(work[head]), median(work[tail])
        if first is not None and last is not None and math.isfinite(first + last) and first > 0:
            return 100.0 * (last / first - 1.0)
    return None


MEMORY_GROWTH = 1.2  # the process's memory grew by a fifth: something is kept across steps
MEMORY_GROWTH_MIN_GB = 0.05  # ... and by more than the sampler's noise


def _drift_cause(ctx: Context, head: np.ndarray, tail: np.ndarray, drift_pct: float,
                 grown: float | None, wait_growth_s: float, step_growth_s: float,
                 evidence: dict[str, Any]) -> tuple[str, str]:
    """(cause, the advice) of a step time that grew: from the signs recorded in the first
    and last quarters; a cause the signs do not show is said as unknown, with them."""
    before, after = step_signs(ctx, head), step_signs(ctx, tail)
    evidence["first_quarter_signs"] = before.to_dict() if before is not None else None
    evidence["last_quarter_signs"] = after.to_dict() if after is not None else None
    if wait_growth_s >= 0.5 * step_growth_s:
        return "data_wait", ("the growth is in the data wait: the loader slows down (a cache "
                             "filling, files growing, workers leaking memory)")
    if after is not None and after.contended(ctx.t, before):
        was = f"; in the first quarter {before.text()}" if before is not None else ""
        return "cpu_contention", (
            f"the machine's, not the step's: other processes took the CPU in the last "
            f"quarter ({after.text()}{was}) — compare on a quiet machine; nothing in the "
            "code needs to change for it")
    temps = ctx.system_values("temperature_c")
    if len(temps) >= 2 and temps[-1] - temps[0] >= 10:
        return "thermal", (f"the device warmed from {temps[0]:.0f} to {temps[-1]:.0f} °C: "
                           "check clocks and throttling")
    if grown is not None and grown >= 0.5 * drift_pct:
        return "inputs", (f"the inputs grew: the work per step (tokens, else samples) rose "
                          f"{grown:.0f}% from the first quarter to the last, the step time "
                          f"{drift_pct:.0f}% — the step is as fast per unit of work")
    rss_before = before.rss_gb if before is not None else None
    rss_after = after.rss_gb if after is not None else None
    if (rss_before is not None and rss_after is not None
            and rss_after >= MEMORY_GROWTH * rss_before
            and rss_after - rss_before >= MEMORY_GROWTH_MIN_GB):
        return "memory_growth", (
            f"this process's memory grew from {rss_before:.2f} to {rss_after:.2f} GB as the "
            "step slowed: tensors kept across steps (summing losses without .item() or "
            ".detach() keeps their graphs alive)")
    seen = [f"the data wait did not grow ({duration(max(wait_growth_s, 0.0))} of "
            f"{duration(step_growth_s)})"]
    if after is not None:
        # contended alone, not against the first quarter: then "no more than before" is
        # what cleared it; else the readings' own reason, in words that agree with them
        seen.append(f"in the last quarter {after.text()}: no more contention than in the first"
                    if after.contended(ctx.t) else
                    f"in the last quarter {after.uncontended_text(ctx.t)}")
        if rss_after is not None:
            seen.append(f"this process's memory {rss_after:.2f} GB"
                        + (f" (from {rss_before:.2f})" if rss_before is not None else ""))
    else:
        seen.append("no host readings (system.jsonl) to tell the machine's part")
    if grown is not None:
        seen.append(f"the work per step changed {grown:+.0f}%")
    return "unknown", ("the recorded signs do not tell the cause: " + "; ".join(seen)
                       + " — a profiler trace of early and late steps "
                       f"({adv.setting(ctx.made_by, 'profile_steps', 'START:STOP')}) shows "
                       "where the time went")


def drift(ctx: Context) -> Outcome:
    """Step time that grows (or falls) over the run: first quarter against last quarter."""
    t, times = ctx.t, ctx.times
    n = len(times)
    short = too_few_steps(ctx, t.drift_min_steps, "drift")
    if short is not None:
        return short
    med = median(times.step_s) or 0.0
    keep = np.flatnonzero(times.step_s <= t.stall_factor * med)
    quarter = max(1, len(keep) // 4)
    head, tail = keep[:quarter], keep[-quarter:]
    first = median(times.step_s[head]) or 0.0
    last = median(times.step_s[tail]) or 0.0
    if first <= 0:
        return Outcome(skipped="the first steps have no duration")
    drift_pct = 100.0 * (last / first - 1.0)
    wait_first = median(times.wait_s[head]) or 0.0
    wait_last = median(times.wait_s[tail]) or 0.0
    grown = _grown_pct(ctx, head, tail)
    evidence: dict[str, Any] = {
        "measured_steps": n,
        "first_quarter_step_s": first,
        "last_quarter_step_s": last,
        "drift_pct": drift_pct,
        "first_quarter_wait_s": wait_first,
        "last_quarter_wait_s": wait_last,
        "work_grown_pct": grown,
    }
    span = f"from {duration(first)} to {duration(last)} over {n} steps"
    if drift_pct >= t.drift_warning_pct:
        cause, text = _drift_cause(ctx, head, tail, drift_pct, grown, wait_last - wait_first,
                                   last - first, evidence)
        evidence["cause"] = cause
        # the machine's slowness (others took the CPU) is said, but is not the user's bug
        severity: Severity = "info" if cause == "cpu_contention" else "warning"
        return verdict("drift", severity, f"Step time drifts up {drift_pct:.0f}% {span}",
                       evidence, [text])
    if drift_pct <= -t.drift_warning_pct:
        return verdict(
            "drift",
            "info",
            f"Step time falls {-drift_pct:.0f}% {span}: warm-up may reach into the measured steps",
            evidence,
            [
                "exclude more warm-up, e.g. "
                f"{adv.setting(ctx.made_by, 'warmup', ctx.summary.steps.warmup + n // 4)}, "
                "or run longer so the steady window dominates"
            ],
        )
    return Outcome(checked=f"step time steady ({round(drift_pct):+d}% {span})")
