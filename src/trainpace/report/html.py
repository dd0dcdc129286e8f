"""Self-contained HTML pages with inline SVG plots: a page shell and plot helpers.

No script, no stylesheet or font from the network: one file that opens anywhere. Every piece of
text goes through :func:`esc`; the helpers take plain strings and numbers and escape them
themselves, so names from a run or a trace (model, kernel, host names) cannot inject markup.
Both the run report (``report/run_html.py``) and the trace report (``report/trace_html.py``)
are built from :func:`page`, :func:`section`, :func:`table`, :func:`line_chart`,
:func:`stacked_chart` and :func:`bar_chart`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trainpace.errors import OutputError

PALETTE = ("#3b6fd4", "#e08a1e", "#3a9b5c", "#c8423b", "#8a5cc2", "#5aa6b8", "#9c7a48")
SEVERITY_COLOR = {"ok": "#3a9b5c", "info": "#3b82c4", "warning": "#d68a00",
                  "critical": "#c8423b", "not measured": "#9aa0a6"}
MAX_POINTS = 1500  # a polyline longer than this is averaged into buckets

_CSS = """
body{font:14px/1.45 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
margin:0;background:#f6f7f9;color:#1d2330}
main{max-width:1040px;margin:0 auto;padding:24px}
header h1{font-size:22px;margin:0 0 4px}header p{margin:0;color:#5f6775}
section{background:#fff;border:1px solid #e1e4ea;border-radius:8px;padding:16px 20px;margin:16px 0}
section h2{font-size:16px;margin:0 0 12px}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:5px 8px;
border-bottom:1px solid #eef0f3;vertical-align:top}th{color:#5f6775;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td:first-child{white-space:nowrap}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px;
font-weight:600;text-transform:uppercase}
.dot{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:6px}
.finding{border-left:4px solid #ccc;padding:6px 12px;margin:10px 0}
.finding h3{font-size:15px;margin:0 0 6px}.evidence{color:#5f6775;font-size:13px}
.muted{color:#8a919e}ul{margin:6px 0;padding-left:20px}
svg{display:block;max-width:100%;height:auto}svg text{font-size:11px;fill:#5f6775}
.chart-title{font-size:13px;font-weight:600;fill:#1d2330}
.plot{margin:8px 0 20px}
"""


def esc(value: object) -> str:
    """Text made safe for HTML content and attributes."""
    return html.escape(str(value), quote=True)


def page(title: str, *sections: str, subtitle: str | None = None) -> str:
    """A complete HTML document: a header and the given (already built) sections."""
    sub = f"<p>{esc(subtitle)}</p>" if subtitle else ""
    body = "\n".join(sections)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
        f"<title>{esc(title)}</title><style>{_CSS}</style></head>"
        f"<body><main><header><h1>{esc(title)}</h1>{sub}</header>\n{body}\n</main></body></html>\n"
    )


def section(title: str, *parts: str) -> str:
    """A titled card holding already-built parts."""
    return f"<section><h2>{esc(title)}</h2>{''.join(parts)}</section>"


def paragraph(text: str, *, muted: bool = False) -> str:
    """An escaped paragraph."""
    attr = ' class="muted"' if muted else ""
    return f"<p{attr}>{esc(text)}</p>"


def bullets(items: Sequence[str]) -> str:
    """An escaped bullet list."""
    return "<ul>" + "".join(f"<li>{esc(item)}</li>" for item in items) + "</ul>"


def badge(text: str, color: str) -> str:
    """A coloured label (severity, status)."""
    return f'<span class="badge" style="background:{esc(color)}">{esc(text)}</span>'


def table(headers: Sequence[str], rows: Sequence[Sequence[object]],
          *, numeric: Sequence[int] = (), raw: Sequence[int] = ()) -> str:
    """A table; cells escaped except the columns listed in ``raw`` (already-built HTML)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            attr = ' class="num"' if i in numeric else ""
            cells.append(f"<td{attr}>{cell if i in raw else esc(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


@dataclass(frozen=True)
class Series:
    """One line (or one layer of a stacked chart): y over x; a None y breaks the line."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float | None]
    color: str | None = None


@dataclass(frozen=True)
class HLine:
    """A horizontal reference line (a target, a peak) with its label."""

    y: float
    label: str
    color: str = "#c8423b"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values (steps of 1, 2, 2.5 or 5 × 10^k) from lo to hi."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, count - 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(lo / step) * step
    ticks, value = [], first
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def tick_label(value: float) -> str:
    """A short axis label: ``0.25``, ``12``, ``3.4k``, ``1.2M``."""
    magnitude = abs(value)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def downsample(xs: Sequence[float], ys: Sequence[float | None],
               limit: int = MAX_POINTS) -> tuple[list[float], list[float | None]]:
    """Average consecutive points into at most ``limit`` buckets (a None bucket stays None)."""
    n = len(xs)
    if n <= limit:
        return list(xs), list(ys)
    out_x: list[float] = []
    out_y: list[float | None] = []
    for b in range(limit):
        lo, hi = b * n // limit, (b + 1) * n // limit
        known = [y for y in ys[lo:hi] if y is not None and math.isfinite(y)]
        out_x.append(sum(xs[lo:hi]) / (hi - lo))
        out_y.append(sum(known) / len(known) if known else None)
    return out_x, out_y


@dataclass(frozen=True)
class _Frame:
    """The plot area of a chart and its scales."""

    width: int
    height: int
    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float
    left: int = 58
    right: int = 16
    top: int = 30
    bottom: int = 38

    def x(self, value: float) -> float:
        span = self.x_hi - self.x_lo or 1.0
        return self.left + (value - self.x_lo) / span * (self.width - self.left - self.right)

    def y(self, value: float) -> float:
        span = self.y_hi - self.y_lo or 1.0
        return self.height - self.bottom - (value - self.y_lo) / span * (
            self.height - self.top - self.bottom)


def _svg_open(frame: _Frame, title: str) -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {frame.width} {frame.height}" '
            f'role="img" aria-label="{esc(title)}">',
            f'<text class="chart-title" x="{frame.left}" y="16">{esc(title)}</text>']


def _axes(frame: _Frame, x_label: str, y_label: str) -> list[str]:
    parts = []
    x0, x1 = frame.x(frame.x_lo), frame.x(frame.x_hi)
    for tick in nice_ticks(frame.y_lo, frame.y_hi):
        if frame.y_lo <= tick <= frame.y_hi:
            y = frame.y(tick)
            parts.append(f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                         'stroke="#eef0f3"/>')
            parts.append(f'<text x="{x0 - 6:.1f}" y="{y + 4:.1f}" text-anchor="end">'
                         f'{esc(tick_label(tick))}</text>')
    base = frame.height - frame.bottom
    for tick in nice_ticks(frame.x_lo, frame.x_hi, 7):
        if frame.x_lo <= tick <= frame.x_hi:
            x = frame.x(tick)
            parts.append(f'<text x="{x:.1f}" y="{base + 14}" text-anchor="middle">'
                         f'{esc(tick_label(tick))}</text>')
    parts.append(f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{base}" y2="{base}" stroke="#9aa0a6"/>')
    parts.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{frame.height - 4}" text-anchor="middle">'
                 f'{esc(x_label)}</text>')
    mid = (frame.top + base) / 2
    parts.append(f'<text x="12" y="{mid:.1f}" text-anchor="middle" '
                 f'transform="rotate(-90 12 {mid:.1f})">{esc(y_label)}</text>')
    return parts


def _legend(frame: _Frame, names: Sequence[tuple[str, str]]) -> list[str]:
    parts: list[str] = []
    x = float(frame.width - frame.right)
    for name, color in reversed(names):
        width = 14 + 6.5 * len(name)
        x -= width + 10
        parts.append(f'<rect x="{x:.1f}" y="8" width="10" height="10" fill="{esc(color)}"/>'
                     f'<text x="{x + 14:.1f}" y="17">{esc(name)}</text>')
    return parts


def empty_chart(title: str, reason: str, *, width: int = 720, height: int = 120) -> str:
    """A placeholder that says why there is nothing to plot."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{esc(title)}"><text class="chart-title" x="58" y="16">{esc(title)}'
            f'</text><rect x="58" y="28" width="{width - 74}" height="{height - 44}" fill="none" '
            f'stroke="#e1e4ea" stroke-dasharray="4 4"/><text x="{width / 2:.0f}" '
            f'y="{height / 2 + 8:.0f}" text-anchor="middle">{esc(reason)}</text></svg>')


def _finite(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _bounds(values: Sequence[float], *, from_zero: bool) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if from_zero:
        lo = min(lo, 0.0)
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    return lo, hi + 0.05 * (hi - lo)


def _polylines(frame: _Frame, xs: Sequence[float], ys: Sequence[float | None], color: str,
               name: str) -> str:
    runs: list[list[str]] = [[]]
    for x, y in zip(xs, ys, strict=True):
        if y is None or not math.isfinite(y):
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append(f"{frame.x(x):.1f},{frame.y(y):.1f}")
    lines = []
    for run in runs:
        if len(run) == 1:
            cx, cy = run[0].split(",")
            lines.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{esc(color)}"/>')
        elif run:
            lines.append(f'<polyline points="{" ".join(run)}"/>')
    return (f'<g fill="none" stroke="{esc(color)}" stroke-width="1.6"><title>{esc(name)}</title>'
            + "".join(lines) + "</g>")


def line_chart(series: Sequence[Series], *, title: str, x_label: str, y_label: str,
               hlines: Sequence[HLine] = (), y_range: tuple[float, float] | None = None,
               width: int = 720, height: int = 260, from_zero: bool = True) -> str:
    """Lines over a shared x axis, with optional reference lines; a placeholder when empty."""
    prepared = [(s, *downsample(s.xs, s.ys)) for s in series]
    all_x = [x for _, xs, ys in prepared for x, y in zip(xs, ys, strict=True) if y is not None]
    all_y = _finite([y for _, _, ys in prepared for y in ys]) + [h.y for h in hlines]
    if not all_x or not all_y:
        return empty_chart(title, "no data recorded for this plot")
    y_lo, y_hi = y_range or _bounds(all_y, from_zero=from_zero)
    frame = _Frame(width, height, min(all_x), max(all_x), y_lo, y_hi)
    parts = _svg_open(frame, title) + _axes(frame, x_label, y_label)
    colors = []
    for i, (s, xs, ys) in enumerate(prepared):
        color = s.color or PALETTE[i % len(PALETTE)]
        colors.append((s.name, color))
        parts.append(_polylines(frame, xs, ys, color, s.name))
    for h in hlines:
        y = frame.y(h.y)
        parts.append(f'<line x1="{frame.left}" x2="{width - frame.right}" y1="{y:.1f}" '
                     f'y2="{y:.1f}" stroke="{esc(h.color)}" stroke-dasharray="6 4"/>'
                     f'<text x="{width - frame.right - 4}" y="{y - 4:.1f}" text-anchor="end" '
                     f'style="fill:{esc(h.color)}">{esc(h.label)}</text>')
    parts += [*_legend(frame, colors), "</svg>"]
    return "".join(parts)


def stacked_chart(xs: Sequence[float], layers: Sequence[Series], *, title: str, x_label: str,
                  y_label: str, width: int = 720, height: int = 260) -> str:
    """Layers stacked bottom-up over ``xs`` (each layer's ``ys``; None counts as 0)."""
    if not xs or not layers:
        return empty_chart(title, "no data recorded for this plot")
    sampled = [downsample(xs, layer.ys) for layer in layers]
    grid_x = sampled[0][0]
    totals = [0.0] * len(grid_x)
    bands = []
    for _, ys in sampled:
        lower = list(totals)
        totals = [t + (y if y is not None and math.isfinite(y) else 0.0)
                  for t, y in zip(totals, ys, strict=True)]
        bands.append((lower, list(totals)))
    frame = _Frame(width, height, min(grid_x), max(grid_x), *_bounds(totals, from_zero=True))
    parts = _svg_open(frame, title) + _axes(frame, x_label, y_label)
    colors = []
    for i, (layer, (lower, upper)) in enumerate(zip(layers, bands, strict=True)):
        color = layer.color or PALETTE[i % len(PALETTE)]
        colors.append((layer.name, color))
        top = [f"{frame.x(x):.1f},{frame.y(y):.1f}" for x, y in zip(grid_x, upper, strict=True)]
        bottom = [f"{frame.x(x):.1f},{frame.y(y):.1f}"
                  for x, y in zip(reversed(grid_x), reversed(lower), strict=True)]
        parts.append(f'<polygon points="{" ".join(top + bottom)}" fill="{esc(color)}">'
                     f"<title>{esc(layer.name)}</title></polygon>")
    parts += [*_legend(frame, colors), "</svg>"]
    return "".join(parts)


def bar_chart(labels: Sequence[str], values: Sequence[float], *, title: str, unit: str = "",
              width: int = 720, color: str = PALETTE[0]) -> str:
    """Horizontal bars, one per label, longest scale first as given; values ≥ 0."""
    if not labels:
        return empty_chart(title, "nothing to show")
    row, label_w = 22, min(260, 12 + 6.5 * max(len(label) for label in labels))
    height = 30 + row * len(labels) + 8
    top = max(max(values), 1e-12)
    usable = width - label_w - 90
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'role="img" aria-label="{esc(title)}">'
             f'<text class="chart-title" x="4" y="16">{esc(title)}</text>']
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = 28 + i * row
        bar = max(0.0, value) / top * usable
        shown = label if len(label) <= 40 else label[:39] + "…"
        parts.append(f'<text x="{label_w - 6:.0f}" y="{y + 14}" text-anchor="end">'
                     f'<title>{esc(label)}</title>{esc(shown)}</text>'
                     f'<rect x="{label_w:.0f}" y="{y + 3}" width="{bar:.1f}" height="{row - 6}" '
                     f'fill="{esc(color)}"/><text x="{label_w + bar + 6:.1f}" y="{y + 14}">'
                     f'{esc(tick_label(value) + unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def write_page(path: str | Path, document: str) -> Path:
    """Write a page as UTF-8; returns the path written."""
    target = Path(path)
    try:
        target.write_text(document, encoding="utf-8")
    except OSError as exc:
        raise OutputError(
            f"{target}: cannot write the page ({exc.strerror or exc}); pass a path in a "
            "folder that exists and is writable"
        ) from exc
    return target
