"""Slow phases: stretches of steps much slower than the steady median, warm-up included.

A phase is named with when it ran (steps and seconds), how much slower it was, its share
of the wall time, and its cause from the signs recorded then: the data wait in the step
records; the sampler's host rows (the machine's busy CPU against this process's share of it:
other processes taking the cores), memory, and the GPU's throttle flags. A warm-up that
excludes a third of the run, or far more than compile warm-up needs, is a finding too: the
steady figures then describe a small part of the run.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainpace.diagnosis import advice as adv
from trainpace.diagnosis._context import (
    Context,
    Outcome,
    Verdict,
    finite_or,
    selection,
    severity_for,
)
from trainpace.diagnosis.host_signs import HostSigns, host_signs
from trainpace.diagnosis.thresholds import Thresholds
from trainpace.measure.contention import slowed_by_others
from trainpace.stats import median
from trainpace.summary import Bottleneck, Finding
from trainpace.units import format_duration as duration
from trainpace.units import number_or_none

# How late after a window's end or middle the Meter's idle writer looks for its steps, in
# windows (meter/pipeline.py): on a device clock it looks every POLL_SHARE (0.75) of the loop's
# time per half window, so within this much of it; on the host clock an eighth of a window
# past it (LOOK_PAST_HAND_OVER of a half window) at the loop's recent pace, within this much
# while the pace holds.
WRITER_LOOK_WINDOWS = 0.375


@dataclass(frozen=True)
class Phase:
    """One slow phase: positions ``first..last`` (inclusive) among the timed steps."""

    first: int
    last: int
    start_step: int
    stop_step: int
    start_s: float
    stop_s: float
    slowdown: float
    wall_pct: float
    extra_s: float
    cause: str
    signs: HostSigns | None
    wait_share_pct: float | None
    # the step of trainpace's window boundary (a window's end or middle) before the phase,
    # when it began within trainpace_boundary_steps and the writer's look period of it (its
    # writer's work lands on the steps that follow)
    after_handover: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_step": self.start_step, "stop_step": self.stop_step,
            "start_s": self.start_s, "stop_s": self.stop_s, "slowdown": self.slowdown,
            "wall_pct": self.wall_pct, "cause": self.cause, "extra_s": self.extra_s,
            "wait_share_pct": self.wait_share_pct, "after_handover": self.after_handover,
            "signs": self.signs.to_dict() if self.signs is not None else None,
        }


@dataclass(frozen=True)
class Timeline:
    """Every timed step (warm-up included): the input of the phase search."""

    step: np.ndarray
    step_s: np.ndarray
    wait_s: np.ndarray
    end_s: np.ndarray
    steady_s: float
    steady_wait_s: float
    wall_s: float


def timeline(ctx: Context) -> Timeline | None:
    """The timed steps and the steady reference, or None without enough of them."""
    steps = ctx.all_steps
    if steps is None:
        return None
    step_s = steps.column("step_s")
    end = steps.column("t_s")
    mask = np.isfinite(step_s) & np.isfinite(end)
    if int(np.count_nonzero(mask)) < ctx.t.outlier_min_steps:
        return None
    keep = selection(mask)
    del mask
    measured = ctx.times.step_s
    # the steady span: the measured steps other processes did not slow, when enough are left
    slowed = slowed_by_others(measured, ctx.times.t_s, ctx.host_rows, ctx.cpu_count)
    if slowed is not None and np.count_nonzero(~slowed) >= ctx.t.slow_phase_min_steps:
        measured = measured[~slowed]
    reference = measured if measured.size >= ctx.t.slow_phase_min_steps else step_s[keep]
    steady = median(reference)
    if not steady or not math.isfinite(steady):
        return None
    wait = finite_or(steps.column("wait_s")[keep], 0.0)
    wall = ctx.summary.time.wall_s or float(np.nanmax(end))
    return Timeline(steps.step[keep], step_s[keep], wait, end[keep], steady,
                    median(ctx.times.wait_s) or 0.0, wall)


def own_first_step_s(ctx: Context, line: Timeline) -> float:
    """trainpace's own work in the run's first step, in seconds: the FLOP count (its cost is
    meta.json's ``vitals.flop_count.ops_cpu_s``, the counted ops' CPU time under counting),
    bounded by how much longer than a steady step the first step took (0 when not recorded)."""
    vitals = ctx.meta.get("vitals")
    count = vitals.get("flop_count") if isinstance(vitals, Mapping) else None
    cost = number_or_none(count.get("ops_cpu_s")) if isinstance(count, Mapping) else None
    if not cost or line.step.size == 0 or int(line.step[0]) != 1:
        return 0.0
    return max(0.0, min(cost, float(line.step_s[0]) - line.steady_s))


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) of each run of True."""
    edges = np.diff(np.concatenate(([0], flags.astype(np.int8), [0])))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    return list(zip(starts.tolist(), stops.tolist(), strict=True))


def _merged(runs: list[tuple[int, int]], flags: np.ndarray, t: Thresholds) -> list[tuple[int, int]]:
    """Runs of slow steps joined across short gaps (a fast step or two inside a slow phase,
    as a contended machine gives), kept where the slow steps are enough and most."""
    merged: list[list[int]] = []
    for first, last in runs:
        if merged:
            prev = merged[-1]
            gap = first - prev[1] - 1
            if gap <= max(2, 0.25 * (prev[1] - prev[0] + 1)):
                prev[1] = last
                continue
        merged.append([first, last])
    out = []
    for first, last in merged:
        slow = int(flags[first:last + 1].sum())
        if slow >= t.slow_phase_min_steps and slow >= 0.6 * (last - first + 1):
            out.append((first, last))
    return out


def _handover_before(ctx: Context, start_step: int) -> int | None:
    """The last boundary of trainpace's before ``start_step`` (each window's end, and
    ``max(window // 2, 1)`` steps into it, where the Meter's loop checks its
    writer and, on a device clock, hands its steps over), when ``start_step`` is at most
    ``trainpace_boundary_steps`` plus ``WRITER_LOOK_WINDOWS`` of a window after it (the
    writer takes a window's steps, and begins its work on them, at its next look); None
    without a known window, before the first boundary or further from one. A loader that ran
    out ended its window early, and the windows after it count from there
    (``steps.window_ends``; where those are not known, from the run's start)."""
    window = ctx.window_steps
    if window is None:
        return None
    closed = start_step - 1  # the steps closed before the phase began
    ends = ctx.window_ends or []
    origin = ends[bisect.bisect_right(ends, closed) - 1] if ends and ends[0] <= closed else 0
    window_start = origin + (closed - origin) // window * window
    # the Meter's trainpace.config.half_window, not imported: analysis loads no settings
    halfway = window_start + max(window // 2, 1)
    handover = halfway if closed >= halfway else window_start
    look_steps = int(window * WRITER_LOOK_WINDOWS)
    if handover == 0 or start_step - handover > ctx.t.trainpace_boundary_steps + look_steps:
        return None
    return handover


def _cause(ctx: Context, line: Timeline, phase: tuple[int, int], signs: HostSigns | None,
           steady: HostSigns | None, extra_s: float, wait_extra_s: float,
           handover: int | None) -> str:
    t = ctx.t
    if extra_s > 0 and wait_extra_s >= 0.5 * extra_s:
        return "data_wait"
    if signs is not None and signs.contended(t, steady):
        return "cpu_contention"
    if signs is not None and (signs.throttled_pct or 0.0) >= t.throttle_warning_pct and (
            steady is None or (signs.throttled_pct or 0.0) > (steady.throttled_pct or 0.0)):
        return "throttling"
    if signs is not None and (signs.memory_used_pct_max or 0.0) >= t.memory_used_risk_pct:
        return "memory_pressure"
    if phase[0] == 0 and extra_s > 0 and own_first_step_s(ctx, line) >= 0.5 * extra_s:
        return "trainpace_first_step"
    if phase[0] == 0 and phase[1] - phase[0] + 1 <= t.compile_warmup_steps:
        return "warmup"
    # right after a boundary, and no more than trainpace's work there costs: trainpace's
    if handover is not None and extra_s <= t.trainpace_boundary_max_s:
        return "trainpace_boundary"
    return "unknown"


def find_phases(ctx: Context) -> list[Phase]:
    """The slow phases of the run, in time order (see the module docstring)."""
    line = timeline(ctx)
    if line is None:
        return []
    t = ctx.t
    flags = line.step_s > t.slow_phase_factor * line.steady_s
    found = _merged(_runs(flags), flags, t)
    spans = [(float(line.end_s[a] - line.step_s[a]), float(line.end_s[b])) for a, b in found]
    inside = np.zeros(line.step_s.size, dtype=bool)
    for a, b in found:
        inside[a:b + 1] = True
    # the steady baseline: the stretches of steps outside every phase
    outside = [(float(line.end_s[a] - line.step_s[a]), float(line.end_s[b]))
               for a, b in _runs(~inside)]
    steady = host_signs(ctx, outside) if found else None
    phases = []
    for (a, b), (start, stop) in zip(found, spans, strict=True):
        count = b - a + 1
        slow = line.step_s[a:b + 1]
        extra = float(slow.sum()) - count * line.steady_s
        wall_pct = 100.0 * (stop - start) / line.wall_s if line.wall_s > 0 else 0.0
        if wall_pct < t.slow_phase_min_wall_pct:
            continue
        wait_extra = float(line.wait_s[a:b + 1].sum()) - count * line.steady_wait_s
        signs = host_signs(ctx, [(start, stop)])
        handover = _handover_before(ctx, int(line.step[a]))
        phases.append(Phase(
            first=a, last=b, start_step=int(line.step[a]), stop_step=int(line.step[b]),
            # (a phase has steps: its median is never None)
            start_s=start, stop_s=stop, slowdown=(median(slow) or 0.0) / line.steady_s,
            wall_pct=wall_pct, extra_s=extra,
            cause=_cause(ctx, line, (a, b), signs, steady, extra, wait_extra, handover),
            signs=signs,
            wait_share_pct=100.0 * wait_extra / extra if extra > 0 else None,
            after_handover=handover,
        ))
    return phases


_CAUSE_TEXT = {
    "data_wait": "the extra time is in the data wait: the loader fell behind",
    "cpu_contention": "other processes took the CPU",
    "throttling": "the device's clocks were throttled",
    "memory_pressure": "memory was nearly full",
    "warmup": "compile, allocator and cache warm-up (the first steps)",
    "trainpace_first_step": "trainpace's own first-step work (counting the step's FLOPs), "
                            "not the training's",
    "trainpace_boundary": "trainpace's own work after one of its window boundaries (its "
                          "writer's window record; under DDP the ranks' exchange), not the "
                          "training's",
    "unknown": "none of the recorded signs (data wait, host CPU, memory, throttling) "
               "explains it",
}
# The bottleneck a phase's cause names. Other processes taking the CPU name none: that is the
# machine's slowness, not the training's, and the same script must get the same verdict
# whether or not something else ran beside it (the finding still says what the phase cost).
_CATEGORY: dict[str, Bottleneck] = {"data_wait": "data_loading", "throttling": "thermal",
             "memory_pressure": "memory_capacity"}
_ADVICE = {
    "data_wait": "the loader is slower during it (a cold file cache, workers starting): "
                 "persistent_workers=True and a deeper prefetch queue; warm the cache first",
    "cpu_contention": "run where the cores are free (or nice the other processes); the "
                      "phase is in the whole measured run's figures and the wall time, the "
                      "steady span's throughput leaves it out",
    "throttling": "check cooling and the power limit (nvidia-smi -q -d PERFORMANCE)",
    "memory_pressure": "free host memory (fewer workers, smaller prefetch) so nothing swaps",
    "warmup": "expected once per run; torch.compile caches (TORCHINDUCTOR_CACHE_DIR) "
              "shorten it on the next run",
    "trainpace_first_step": "once per run, and left out of the figures with the warm-up; "
                            "nothing in the training needs to change for it",
    "trainpace_boundary": "nothing in the training needs to change for it; a larger window "
                          "makes trainpace's window work rarer",
    "unknown": "look at what else ran on the machine then; a profiler trace of those steps "
               "(Meter(profile_steps=...)) shows where the time went",
}


def _describe(p: Phase) -> str:
    where = (f"steps {p.start_step}–{p.stop_step} ({p.start_s:.1f}–{p.stop_s:.1f} s, "
             f"{p.wall_pct:.0f}% of the wall time) ran {p.slowdown:.1f}× slower than the "
             "steady step")
    cause = _CAUSE_TEXT[p.cause]
    if p.cause == "cpu_contention" and p.signs is not None:
        cause += f" ({p.signs.text()})"
    if p.cause == "trainpace_boundary" or (p.cause == "unknown" and p.after_handover):
        cause += (f"; it began {p.start_step - (p.after_handover or 0)} steps after "
                  f"trainpace's window boundary at step {p.after_handover}")
        if p.cause == "unknown":
            cause += (f", but its extra time ({duration(p.extra_s)}) is more than trainpace's "
                      "work there costs")
    return f"{where}: {cause}"


def slow_phases(ctx: Context) -> Outcome:
    """Stretches of steps much slower than the steady median, warm-up included."""
    if ctx.steps is None:
        return Outcome(skipped="no per-step records (steps.jsonl) for the slow-phase check")
    line = timeline(ctx)
    if line is None:
        return Outcome(skipped=f"fewer than {ctx.t.outlier_min_steps} timed steps for the "
                       "slow-phase check")
    phases = find_phases(ctx)
    verdicts = []
    if phases:
        verdicts.append(_phase_verdict(ctx, line, phases))
    long = _long_warmup(ctx, line)
    if long is not None:
        verdicts.append(long)
    if verdicts:
        return Outcome(verdicts=tuple(verdicts))
    return Outcome(checked=f"no phase over {ctx.t.slow_phase_factor:g}× the steady step "
                   f"({duration(line.steady_s)}) in {line.step_s.size} steps")


def _phase_verdict(ctx: Context, line: Timeline, phases: list[Phase]) -> Verdict:
    t = ctx.t
    counted = [p for p in phases
               if p.cause not in ("warmup", "trainpace_first_step", "trainpace_boundary")]
    total_pct = sum(p.wall_pct for p in counted)
    severity = severity_for(total_pct, t.slow_phase_warning_pct, t.slow_phase_critical_pct)
    worst = max(phases, key=lambda p: p.extra_s)
    lost_pct = 100.0 * sum(max(p.extra_s, 0.0) for p in counted) / line.wall_s
    count = f"{len(phases)} slow phases" if len(phases) > 1 else "A slow phase"
    title = f"{count}: {_describe(worst)}"
    trace = adv.setting(ctx.made_by, "profile_steps", "START:STOP")
    advice = [_describe(p) + " — "
              + _ADVICE[p.cause].replace("Meter(profile_steps=...)", trace)
              for p in phases[:5]]
    if lost_pct > 0:
        advice.append(f"without the slow phases the run would take less wall time — "
                      f"{adv.gain_text(lost_pct)}")
    evidence = {
        "steady_step_s": line.steady_s, "wall_s": line.wall_s, "slow_wall_pct": total_pct,
        "lost_pct": lost_pct, "phases": [p.to_dict() for p in phases],
    }
    category = _CATEGORY.get(worst.cause) if severity != "info" else None
    return Verdict(Finding(id="slow_phase", severity=severity, title=title, evidence=evidence,
                           advice=advice), category, lost_pct)


def _long_warmup(ctx: Context, line: Timeline) -> Verdict | None:
    """The excluded warm-up as a warning when it is a third of the run or far longer than
    compile warm-up (its first steps, then steady steps) would take."""
    t, s = ctx.t, ctx.summary
    warmup = s.steps.warmup
    if warmup <= 0 or line.wall_s <= 0:
        return None
    in_warmup = line.step <= warmup
    warmup_s = s.time.warmup_s if s.time.warmup_s is not None else float(
        line.step_s[in_warmup].sum())
    own_s = own_first_step_s(ctx, line)  # trainpace's, not the user's warm-up
    compile_n = min(warmup, t.compile_warmup_steps)
    compile_s = float(line.step_s[line.step <= compile_n].sum()) - own_s + max(
        0, warmup - compile_n) * line.steady_s
    wall_pct = 100.0 * (warmup_s - own_s) / line.wall_s
    too_long = wall_pct > t.warmup_long_pct
    far_longer = (0 < compile_s < (warmup_s - own_s) / 2.0  # 0: first steps' records missing
                  and wall_pct >= t.slow_phase_warning_pct)
    if not (too_long or far_longer):
        own_pct = 100.0 * own_s / line.wall_s
        if own_pct < t.slow_phase_warning_pct:
            return None
        # the warm-up is long only by trainpace's own work: said as trainpace's
        return Verdict(Finding(
            id="trainpace_first_step", severity="info",
            title=f"trainpace's own first-step work (counting the step's FLOPs) took "
                  f"{duration(own_s)}, {own_pct:.0f}% of the wall time",
            evidence={"trainpace_first_step_s": own_s, "wall_pct": own_pct,
                      "warmup_steps": warmup, "warmup_s": warmup_s},
            advice=["trainpace's cost, once per run, not the training's; the first step is "
                    "left out of the figures with the warm-up"]), None, None)
    why = (f"{wall_pct:.0f}% of the wall time" if too_long else
           f"{(warmup_s - own_s) / compile_s:.1f}× what compile warm-up ({compile_n} steps) "
           "and steady steps would take")
    if own_s > 0:
        why += f", besides trainpace's own first-step work ({duration(own_s)})"
    measured_s = number_or_none(s.time.measured_s)
    covered = (f"the figures cover the other {s.steps.measured} steps"
               + (f" ({duration(measured_s)})" if measured_s is not None else ""))
    return Verdict(Finding(
        id="long_warmup", severity="warning",
        title=f"Warm-up excluded {warmup} steps ({duration(warmup_s)}): {why}",
        evidence={"warmup_steps": warmup, "warmup_s": warmup_s, "wall_pct": wall_pct,
                  "compile_warmup_s": compile_s, "steady_step_s": line.steady_s,
                  "trainpace_first_step_s": own_s,
                  "measured_steps": s.steps.measured, "warmup_mode": s.steps.warmup_mode},
        advice=[f"{covered}; a slow phase inside the warm-up is named by slow_phase with its "
                f"cause; {adv.setting(ctx.made_by, 'warmup', t.compile_warmup_steps)} excludes "
                "compile warm-up only"]), None, None)


def outside_steps(ctx: Context) -> Outcome:
    """Time between steps (evaluation, checkpointing, logging): its own figure, never a stall."""
    time_ = ctx.summary.time
    pct = number_or_none(getattr(time_, "outside_steps_pct", None))
    seconds = number_or_none(getattr(time_, "outside_steps_s", None))
    if pct is None and ctx.all_steps is not None:
        outside = ctx.all_steps.column("outside_s")
        known = np.isfinite(outside)
        if known.any() and time_.wall_s:
            seconds = float(outside[known].sum())
            pct = 100.0 * seconds / time_.wall_s
    if pct is None:
        return Outcome(skipped="no figure for the time between steps (time.outside_steps_pct)")
    text = f"{pct:.1f}% of the wall time outside training steps"
    if pct < ctx.t.outside_steps_info_pct:
        return Outcome(checked=text)
    return Outcome(verdicts=(Verdict(Finding(
        id="outside_steps", severity="info",
        title=f"{pct:.0f}% of the wall time ({duration(seconds or 0.0)}) was spent outside "
              "training steps",
        evidence={"outside_steps_s": seconds, "outside_steps_pct": pct},
        advice=["evaluation, checkpointing or logging between steps: kept out of the "
                "throughput, counted in the wall time; evaluate or save less often, or "
                "asynchronously, if it is more than intended"]), None, None),))
