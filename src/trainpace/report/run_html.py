"""The HTML report of one run: the five signs, the job's goodput and timeline (when it was
read), the diagnosis with evidence, and four plots.

Plots: the step-time breakdown over steps (data wait / host-to-device / compute and other /
time outside the steps, stacked), throughput over time, device and bandwidth utilization over
time, and the loss against wall time with the target line. Warm-up and the slow phases the
diagnosis names (finding ``slow_phase``) are shaded on every plot. The steps are read as
columns (:class:`~trainpace.series.StepSeries`), so a run of millions of steps renders in
about a second; the plots keep each pixel's extremes (:mod:`trainpace.report.plots`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trainpace._version import __version__
from trainpace.report._signs import evidence_text, headline, signs
from trainpace.report._text import cleaned
from trainpace.report.downsample import CHUNK_POINTS, window_means
from trainpace.report.goodput import goodput_html
from trainpace.report.html import (
    SEVERITY_COLOR,
    badge,
    bullets,
    esc,
    page,
    paragraph,
    section,
    table,
)
from trainpace.report.plot_frame import Band
from trainpace.report.plots import HLine, Layer, Series, line_chart, stacked_chart
from trainpace.series import StepSeries
from trainpace.stats import ema_array
from trainpace.summary import Diagnosis, Summary
from trainpace.units import number_or_none

Records = Sequence[Mapping[str, Any]]
Steps = StepSeries | Records
THROUGHPUT_POINTS = 120  # throughput is averaged over about this many windows of steps
UTILIZATION_POINTS = 60  # the utilization plot's means across the run, at most
READINGS_PER_MEAN = 10  # and at least this many sampler readings in each
WARMUP_COLOR = "#9aa0a6"
PHASE_COLOR = "#e0a526"


def _series(steps: Steps | None) -> StepSeries:
    if isinstance(steps, StepSeries):
        return steps
    return StepSeries.from_records(steps or [])

def signs_html(summary: Summary) -> str:
    """The five signs as a table with status dots."""
    rows = []
    for sign in signs(summary):
        color = SEVERITY_COLOR[sign.status]
        dot = f'<span class="dot" style="background:{color}"></span>{esc(sign.status)}'
        rows.append([dot, sign.name, sign.value, " · ".join(sign.details)])
    return table(["status", "sign", "value", "details"], rows, numeric=[2], raw=[0])


def diagnosis_html(diagnosis: Diagnosis) -> str:
    """The bottleneck, each finding (evidence, advice), and what was and was not checked."""
    if diagnosis.bottleneck is None:
        return paragraph("Not diagnosed yet.", muted=True)
    lead, findings, checks = headline(diagnosis)
    line = lead.title if lead is not None else checks.title if checks is not None else ""
    parts = [f"<p><strong>Bottleneck:</strong> {esc(diagnosis.bottleneck.replace('_', ' '))}"
             + (f" — {esc(line)}" if line else "") + "</p>"]
    for f in findings:
        color = SEVERITY_COLOR[f.severity]
        evidence = evidence_text(f.evidence, limit=20)
        parts.append(
            f'<div class="finding" style="border-color:{color}"><h3>{badge(f.severity, color)} '
            f"{esc(f.title)}</h3>"
            + (f'<div class="evidence">{esc(" · ".join(evidence))}</div>' if evidence else "")
            + (bullets(f.advice) if f.advice else "") + "</div>"
        )
    if checks is not None:
        checked = checks.evidence.get("checked") or []
        not_checked = checks.evidence.get("not_checked") or []
        if checked:
            parts.append("<h3>Checked</h3>" + bullets(checked))
        if not_checked:
            parts.append("<h3>Not checked (source missing)</h3>" + bullets(not_checked))
    return "".join(parts)


def slow_phases(summary: Summary) -> list[Mapping[str, Any]]:
    """The phases of the ``slow_phase`` finding's evidence (empty when there is none)."""
    phases: list[Mapping[str, Any]] = []
    for finding in summary.diagnosis.findings:
        found = finding.evidence.get("phases") if finding.id == "slow_phase" else None
        if isinstance(found, list):
            phases += [p for p in found if isinstance(p, Mapping)]
    return phases


def _phase_label(phase: Mapping[str, Any]) -> str:
    slowdown = number_or_none(phase.get("slowdown"))
    cause = phase.get("cause")
    return "slow phase" + (f" {slowdown:.1f}×" if slowdown is not None else "") + (
        f": {str(cause).replace('_', ' ')}" if cause else "")


def step_bands(summary: Summary, series: StepSeries) -> list[Band]:
    """Warm-up and the slow phases over step numbers."""
    bands = []
    warmup = summary.steps.warmup
    if warmup and len(series):
        first = float(series.column("step")[0])
        bands.append(Band(first, float(warmup), f"warm-up ({warmup} steps)", WARMUP_COLOR))
    for phase in slow_phases(summary):
        lo, hi = number_or_none(phase.get("start_step")), number_or_none(phase.get("stop_step"))
        if lo is not None and hi is not None:
            bands.append(Band(lo, hi, _phase_label(phase), PHASE_COLOR))
    return bands


def time_bands(summary: Summary, series: StepSeries) -> list[Band]:
    """Warm-up and the slow phases over wall time."""
    bands = []
    warmup = summary.steps.warmup
    if 0 < warmup <= len(series):
        t_end = float(series.column("t_s")[warmup - 1])
        bands.append(Band(0.0, t_end, f"warm-up ({warmup} steps)", WARMUP_COLOR))
    for phase in slow_phases(summary):
        lo, hi = number_or_none(phase.get("start_s")), number_or_none(phase.get("stop_s"))
        if lo is not None and hi is not None:
            bands.append(Band(lo, hi, _phase_label(phase), PHASE_COLOR))
    return bands


def _kept(values: np.ndarray, usable: np.ndarray | None) -> np.ndarray:
    """``values`` at the usable points: the column itself (a view) when every point is."""
    return values if usable is None else values[usable]


def _usable(mask: np.ndarray) -> np.ndarray | None:
    """``mask``, or None when it keeps every point (the columns are then used as they are)."""
    return None if bool(mask.all()) else mask


def _any_known_nonzero(values: np.ndarray) -> bool:
    """Whether some value is nonzero once NaN counts as 0 (a chunk at a time)."""
    return any(bool(np.nan_to_num(values[lo:lo + CHUNK_POINTS]).any())
               for lo in range(0, values.size, CHUNK_POINTS))


def breakdown_chart(steps: Steps, bands: Sequence[Band] = ()) -> str:
    """Step time over steps, stacked: data wait, host-to-device, compute and other, and the
    time outside the steps (evaluation, checkpoints) when it was recorded. The y-range is
    robust: a stall is marked at the top rather than squashing the rest.

    The layers are views of the columns computed a chunk at a time (:class:`Layer`): a run
    of millions of steps is drawn without a full-length array per layer."""
    series = _series(steps)
    usable = _usable(np.isfinite(series.column("step_s")))
    step_s, xs, wait, h2d, outside = (_kept(series.column(name), usable) for name in
                                      ("step_s", "step", "wait_s", "h2d_s", "outside_s"))

    def compute(lo: int, hi: int) -> np.ndarray:
        rest: np.ndarray = np.maximum(0.0, step_s[lo:hi] - np.nan_to_num(wait[lo:hi])
                                      - np.nan_to_num(h2d[lo:hi]))
        return rest

    layers = [Layer("data wait", lambda lo, hi: wait[lo:hi], "#e08a1e")]
    if _any_known_nonzero(h2d):
        layers.append(Layer("host-to-device", lambda lo, hi: h2d[lo:hi], "#8a5cc2"))
    layers.append(Layer("compute and other", compute, "#3b6fd4"))
    if _any_known_nonzero(outside):
        layers.append(Layer("outside the steps", lambda lo, hi: outside[lo:hi], "#9aa0a6"))
    return stacked_chart(xs, layers, title="Step time breakdown", x_label="step",
                         y_label="seconds", bands=bands, robust=True, value_format="{:.4g} s")


def throughput_points(steps: Steps) -> tuple[list[float], list[float | None], str, int]:
    """(wall times, rates, unit, steps per window): samples/s, or steps/s when samples are
    unknown, over consecutive windows of steps (about :data:`THROUGHPUT_POINTS` of them)."""
    series = _series(steps)
    step_s, t_s = series.column("step_s"), series.column("t_s")
    usable = _usable(np.isfinite(step_s) & (step_s > 0) & np.isfinite(t_s))
    step_s, t_s = _kept(step_s, usable), _kept(t_s, usable)
    samples = _kept(series.column("samples"), usable)
    n = step_s.size
    if not n:
        return [], [], "samples/s", 1
    size = max(1, n // THROUGHPUT_POINTS)
    use_samples = bool(np.isfinite(samples).all())
    starts = np.arange(0, n, size)
    seconds = np.add.reduceat(step_s, starts)
    work = np.add.reduceat(samples, starts) if use_samples else np.diff(np.append(starts, n))
    ends = np.minimum(starts + size, n) - 1
    rates = [float(w / s) if s > 0 else None for w, s in zip(work, seconds, strict=True)]
    return t_s[ends].tolist(), rates, "samples/s" if use_samples else "steps/s", size


def throughput_chart(steps: Steps, bands: Sequence[Band] = ()) -> str:
    """Throughput over wall time (see :func:`throughput_points`)."""
    xs, ys, unit, size = throughput_points(steps)
    return line_chart([Series(unit, xs, ys)], title=f"Throughput ({unit}, {size}-step windows)",
                      x_label="wall time (s)", y_label=unit, bands=bands)


def utilization_window_s(xs: Sequence[float]) -> float:
    """The wall time each point of the utilization plot averages: at least READINGS_PER_MEAN
    sampler readings, at most UTILIZATION_POINTS points across the run, rounded up to 1, 2 or
    5 × 10^k s; 0 (the readings as they are) for a run of few readings."""
    x = np.sort(np.asarray(xs, dtype=np.float64))
    if x.size < 2 * READINGS_PER_MEAN:
        return 0.0
    interval = float(np.median(np.diff(x)))
    wanted = max(READINGS_PER_MEAN * interval, float(x[-1] - x[0]) / UTILIZATION_POINTS)
    if not wanted > 0:
        return 0.0
    power = 10.0 ** np.floor(np.log10(wanted))
    return float(next(step * power for step in (1, 2, 5, 10) if step * power >= wanted))


def utilization_chart(system: Records, summary: Summary | None = None,
                      bands: Sequence[Band] = ()) -> str:
    """Device busy %, memory-bandwidth % and memory used % over wall time.

    Each point is the time-weighted mean of the sampler's readings over a window of wall time
    (:func:`utilization_window_s`, said in the title), not a reading: one reading covers a
    short interval, and a steady loop's readings swing with where its bursts of work and its
    waits fall in each (7% to 58% a second apart on a steady CPU loop). A mean over a window
    is the summary's own arithmetic over a shorter span, shows a real change at the window's
    scale and keeps no lag (an exponential smoothing would drag a drop into the next points).

    The bandwidth line is the sampler's reading (NVML/DCGM) when there is one; else the run's
    estimate (bytes moved per step / step time / peak) is drawn as a level line, and when
    neither exists a line under the chart says what is missing.
    """
    rows = [r for r in system if number_or_none(r.get("t_s")) is not None]
    xs = [number_or_none(r.get("t_s")) or 0.0 for r in rows]
    window_s = utilization_window_s(xs)
    series = []
    for key, label, color in (("device_util_pct", "device busy", "#3b6fd4"),
                              ("bandwidth_util_pct", "memory bandwidth", "#e08a1e"),
                              ("memory_used_pct", "memory used", "#9aa0a6")):
        ys = [number_or_none(r.get(key)) for r in rows]
        if any(y is not None for y in ys):
            series.append(Series(label, *window_means(xs, ys, window_s), color))
    note = None
    hlines = []
    sampled = any(s.name == "memory bandwidth" for s in series)
    bandwidth = summary.bandwidth if summary is not None else None
    if not sampled and bandwidth is not None and bandwidth.util_pct is not None:
        hlines.append(HLine(bandwidth.util_pct, f"memory bandwidth {bandwidth.util_pct:.0f}% "
                            f"(run mean, {bandwidth.source or 'estimate'})", "#e08a1e"))
    elif not sampled:
        note = _no_bandwidth_line(summary)
    mean = f" (mean per {window_s:g} s)" if window_s else ""
    return line_chart(series, title=f"Device and bandwidth utilization{mean}",
                      x_label="wall time (s)", y_label="%", y_range=(0.0, 105.0), hlines=hlines,
                      bands=bands, note=note)


def _no_bandwidth_line(summary: Summary | None) -> str:
    """Why there is no bandwidth line: what of a reading or an estimate is missing."""
    peak = summary.bandwidth.peak_gb_s if summary is not None else None
    moved = summary.flops.bytes_per_step if summary is not None else None
    if peak is not None and moved is None:
        missing = f"no count of the bytes a step moves to set against the {peak:g} GB/s peak"
    elif peak is None and moved is not None:
        missing = "no peak bandwidth known for this device to set the bytes moved against"
    elif peak is None:
        missing = "no count of the bytes a step moves and no peak bandwidth known"
    else:
        missing = "no step time to turn the bytes moved into a rate"
    return f"no bandwidth line: no NVML/DCGM reading, and {missing}"


def loss_chart(steps: Steps, summary: Summary, smoothing: float = 0.9,
               bands: Sequence[Band] = ()) -> str:
    """The loss (raw and smoothed as the target check smooths it) and the target line."""
    series = _series(steps)
    t_s, loss = series.column("t_s"), series.column("loss")
    kept = _usable(np.isfinite(t_s) & np.isfinite(loss))
    xs, raw = _kept(t_s, kept), _kept(loss, kept)
    target = summary.time.target
    hlines = []
    if target is not None and target.name == "loss":
        hlines.append(HLine(target.value, f"target {target.value:g}"))
    lines = [Series("loss", xs, raw, "#b8c4dc")]
    if raw.size:
        lines.append(Series("smoothed", xs, ema_array(raw, smoothing), "#3b6fd4"))
    return line_chart(lines, title="Loss against wall time", x_label="wall time (s)",
                      y_label="loss", hlines=hlines, from_zero=False, bands=bands, robust=True)


def run_page(
    summary: Summary,
    *,
    series: Steps | None = None,
    system: Records | None = None,
    meta: Mapping[str, Any] | None = None,
    source: str | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The whole HTML page for one run (a string; :func:`~trainpace.report.html.write_page`).

    ``notes``: what the reader left out or found missing (bad lines, missing steps), shown
    above the plots.
    """
    summary = cleaned(summary)  # NaN read as unknown, names without control characters
    steps = _series(series)
    meta = meta or {}
    config = meta.get("config") if isinstance(meta.get("config"), Mapping) else {}
    smoothing = config.get("smoothing") if isinstance(config, Mapping) else None
    device = " ".join(str(x) for x in (summary.device.kind, summary.device.name) if x)
    subtitle = " · ".join(x for x in (source, device, f"trainpace {__version__}") if x)
    by_time = time_bands(summary, steps)
    plots = [breakdown_chart(steps, step_bands(summary, steps)),
             throughput_chart(steps, by_time),
             utilization_chart(system or [], summary, by_time),
             loss_chart(steps, summary, float(smoothing) if smoothing else 0.9, by_time)]
    extra = [section("Notes", bullets(list(notes)))] if notes else []
    job = ([section("The job: goodput", goodput_html(summary.goodput))]
           if summary.goodput.pct is not None else [])
    return page(
        f"trainpace report · {summary.run_id or 'run'}",
        section("Vital signs", signs_html(summary)),
        *job,
        section("Diagnosis", diagnosis_html(summary.diagnosis)),
        *extra,
        section("Over the run", *(f'<div class="plot">{plot}</div>' for plot in plots)),
        subtitle=subtitle,
    )
