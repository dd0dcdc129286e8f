"""The HTML report of one run: the five signs, the diagnosis with evidence, and four plots.

Plots: the step-time breakdown over steps (data wait / host-to-device / compute / other,
stacked), throughput over time, device and bandwidth utilization over time, and the loss
against wall time with the target line. Built with the helpers of :mod:`trainpace.report.html`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from trainpace._version import __version__
from trainpace.report._signs import evidence_text, headline, signs
from trainpace.report.html import (
    SEVERITY_COLOR,
    HLine,
    Series,
    badge,
    bullets,
    esc,
    line_chart,
    page,
    paragraph,
    section,
    stacked_chart,
    table,
)
from trainpace.stats import ema
from trainpace.summary import Diagnosis, Summary

Records = Sequence[Mapping[str, Any]]
THROUGHPUT_POINTS = 120  # throughput is averaged over about this many windows of steps


def _num(record: Mapping[str, Any], key: str) -> float | None:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


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


def breakdown_chart(steps: Records) -> str:
    """Step time over steps, stacked: data wait, host-to-device, compute, other."""
    usable = [r for r in steps if _num(r, "step_s") is not None]
    xs = [float(r.get("step") or i) for i, r in enumerate(usable, start=1)]
    wait = [_num(r, "wait_s") or 0.0 for r in usable]
    h2d = [_num(r, "h2d_s") or 0.0 for r in usable]
    compute = [_num(r, "compute_s") for r in usable]
    layers = [Series("data wait", xs, wait, "#e08a1e")]
    if any(h2d):
        layers.append(Series("host-to-device", xs, h2d, "#8a5cc2"))
    rest = [max(0.0, (_num(r, "step_s") or 0.0) - w - h) for r, w, h in zip(usable, wait, h2d,
                                                                               strict=True)]
    if all(c is not None for c in compute) and usable:
        known = [c or 0.0 for c in compute]
        layers.append(Series("compute", xs, known, "#3b6fd4"))
        layers.append(Series("other", xs, [max(0.0, r - c) for r, c in zip(rest, known,
                                                                            strict=True)],
                             "#9aa0a6"))
    else:
        layers.append(Series("compute and other", xs, rest, "#3b6fd4"))
    return stacked_chart(xs, layers, title="Step time breakdown", x_label="step",
                         y_label="seconds")


def throughput_points(steps: Records) -> tuple[list[float], list[float | None], str, int]:
    """(wall times, rates, unit, steps per window): samples/s, or steps/s when samples are
    unknown, over consecutive windows of steps (about :data:`THROUGHPUT_POINTS` of them)."""
    usable = [r for r in steps if _num(r, "step_s") and _num(r, "t_s") is not None]
    size = max(1, len(usable) // THROUGHPUT_POINTS)
    use_samples = bool(usable) and all(_num(r, "samples") is not None for r in usable)
    xs: list[float] = []
    ys: list[float | None] = []
    for lo in range(0, len(usable), size):
        chunk = usable[lo:lo + size]
        seconds = sum(_num(r, "step_s") or 0.0 for r in chunk)
        work = sum(_num(r, "samples") or 0.0 for r in chunk) if use_samples else len(chunk)
        xs.append(_num(chunk[-1], "t_s") or 0.0)
        ys.append(work / seconds if seconds > 0 else None)
    return xs, ys, "samples/s" if use_samples else "steps/s", size


def throughput_chart(steps: Records) -> str:
    """Throughput over wall time (see :func:`throughput_points`)."""
    xs, ys, unit, size = throughput_points(steps)
    return line_chart([Series(unit, xs, ys)], title=f"Throughput ({unit}, {size}-step windows)",
                      x_label="wall time (s)", y_label=unit)


def utilization_chart(system: Records) -> str:
    """Device busy %, memory-bandwidth % and memory used % over wall time."""
    rows = [r for r in system if _num(r, "t_s") is not None]
    xs = [_num(r, "t_s") or 0.0 for r in rows]
    series = [Series(label, xs, [_num(r, key) for r in rows], color)
              for key, label, color in (("device_util_pct", "device busy", "#3b6fd4"),
                                        ("bandwidth_util_pct", "memory bandwidth", "#e08a1e"),
                                        ("memory_used_pct", "memory used", "#9aa0a6"))
              if any(_num(r, key) is not None for r in rows)]
    return line_chart(series, title="Device and bandwidth utilization", x_label="wall time (s)",
                      y_label="%", y_range=(0.0, 105.0))


def loss_chart(steps: Records, summary: Summary, smoothing: float = 0.9) -> str:
    """The loss (raw and smoothed as the target check smooths it) and the target line."""
    points = [(_num(r, "t_s"), _num(r, "loss")) for r in steps]
    kept = [(t, v) for t, v in points if t is not None and v is not None]
    xs = [t for t, _ in kept]
    raw: list[float | None] = [v for _, v in kept]
    target = summary.time.target
    hlines = []
    if target is not None and target.name == "loss":
        hlines.append(HLine(target.value, f"target {target.value:g}"))
    series = [Series("loss", xs, raw, "#b8c4dc")]
    if kept:
        series.append(Series("smoothed", xs, list(ema([v for _, v in kept], smoothing)),
                             "#3b6fd4"))
    return line_chart(series, title="Loss against wall time", x_label="wall time (s)",
                      y_label="loss", hlines=hlines, from_zero=False)


def run_page(
    summary: Summary,
    *,
    steps: Records | None = None,
    system: Records | None = None,
    meta: Mapping[str, Any] | None = None,
    source: str | None = None,
) -> str:
    """The whole HTML page for one run (a string; :func:`~trainpace.report.html.write_page`)."""
    meta = meta or {}
    config = meta.get("config") if isinstance(meta.get("config"), Mapping) else {}
    smoothing = config.get("smoothing") if isinstance(config, Mapping) else None
    device = " ".join(str(x) for x in (summary.device.kind, summary.device.name) if x)
    subtitle = " · ".join(x for x in (source, device, f"trainpace {__version__}") if x)
    plots = [breakdown_chart(steps or []), throughput_chart(steps or []),
             utilization_chart(system or []),
             loss_chart(steps or [], summary, float(smoothing) if smoothing else 0.9)]
    return page(
        f"trainpace report · {summary.run_id or 'run'}",
        section("Vital signs", signs_html(summary)),
        section("Diagnosis", diagnosis_html(summary.diagnosis)),
        section("Over the run", *(f'<div class="plot">{plot}</div>' for plot in plots)),
        subtitle=subtitle,
    )
