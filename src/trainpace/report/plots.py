"""Inline SVG line and stacked charts that stay readable on a run of millions of steps.

- **Downsampled by extremes**: a series longer than the plot has pixels keeps, per pixel
  bucket, its lowest and its highest point (:func:`extremes`), so a one-step spike in a
  million steps is still drawn, where an average would flatten it. The buckets are searched
  a chunk of :data:`CHUNK_POINTS` at a time, and a stacked chart's layers are computed a chunk
  at a time too (:class:`Layer`), so a run of 1e6 steps is drawn with its total (8 MB) and
  chunk-sized temporaries, not a full-length copy per layer and per step of the computation.
- **A robust y-range** (``robust=True``): the scale stops at 1.5× the 95th percentile, so one
  2 s stall cannot squash a 30 ms step into a strip; the points above are drawn at the top
  edge with a marker (its tooltip gives the value), and the chart says how many there are.
- **Bands**: shaded x-ranges with a label (warm-up, a slow phase).

Every piece of text goes through :func:`trainpace.report.html.esc`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from trainpace.report.html import PALETTE, empty_chart, esc, tick_label
from trainpace.stats import percentile

BUCKETS = 700  # pixel buckets of a 720-wide plot: two points (min, max) each
CHUNK_POINTS = 1 << 16  # points handled at a time: bounds the temporaries of a long series
ROBUST_PCT = 95.0
ROBUST_HEADROOM = 1.5
CLIP_COLOR = "#c8423b"

Values = Sequence[float | None] | np.ndarray


@dataclass(frozen=True)
class Series:
    """One line (or one layer of a stacked chart): y over x; a None or NaN y breaks the line."""

    name: str
    xs: Values
    ys: Values
    color: str | None = None


@dataclass(frozen=True)
class Layer:
    """One layer of a stacked chart as a function: ``values(lo, hi)`` gives its values at the
    points ``lo..hi-1`` (NaN counts as 0). The chart asks for a chunk at a time, so a layer
    derived from columns (compute = step − wait) never exists at full length."""

    name: str
    values: Callable[[int, int], np.ndarray]
    color: str | None = None


@dataclass(frozen=True)
class HLine:
    """A horizontal reference line (a target, a peak) with its label."""

    y: float
    label: str
    color: str = "#c8423b"


@dataclass(frozen=True)
class Band:
    """A shaded x-range with a label: warm-up, a slow phase."""

    x0: float
    x1: float
    label: str
    color: str = "#e0a526"


def _array(values: Values) -> np.ndarray:
    if isinstance(values, np.ndarray):
        return values.astype(np.float64, copy=False)
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64)


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


def extreme_indices(ys: np.ndarray, buckets: int = BUCKETS) -> np.ndarray:
    """Indices that keep, per bucket of consecutive points, the lowest and the highest
    finite one (in order); every index when there are few points. A bucket with no finite
    point keeps its first index (a NaN there breaks the line, as the data does).

    The buckets are searched a whole number of them at a time (about :data:`CHUNK_POINTS`
    points): each bucket's extremes depend on its own points only, so the result is the
    same as over the whole series at once, with chunk-sized temporaries."""
    n = len(ys)
    if n <= 2 * buckets:
        return np.arange(n)
    size = -(-n // buckets)
    rows = -(-n // size)
    per = max(1, CHUNK_POINTS // size)  # buckets per chunk
    kept = [_bucket_extremes(ys, r0, min(rows, r0 + per), size) for r0 in range(0, rows, per)]
    return np.concatenate(kept)


def _bucket_extremes(ys: np.ndarray, r0: int, r1: int, size: int) -> np.ndarray:
    """:func:`extreme_indices` of buckets ``r0..r1-1`` (``size`` points each; the last one of
    the series may be short), in order, a bucket's index once when its lowest is its highest."""
    n = len(ys)
    lo, hi = r0 * size, min(r1 * size, n)
    block = np.asarray(ys[lo:hi], dtype=np.float64)
    if block.size < (r1 - r0) * size:  # the series' last bucket, short: pad it with gaps
        block = np.concatenate((block, np.full((r1 - r0) * size - block.size, np.nan)))
    grid = block.reshape(r1 - r0, size)
    finite = np.isfinite(grid)
    base = lo + np.arange(r1 - r0) * size
    low = base + np.where(finite, grid, np.inf).argmin(axis=1)
    high = base + np.where(finite, grid, -np.inf).argmax(axis=1)
    empty = ~finite.any(axis=1)
    low[empty] = high[empty] = np.minimum(base[empty], n - 1)
    pairs = np.sort(np.stack([low, high], axis=1), axis=1).ravel()
    return pairs[np.concatenate(([True], pairs[1:] != pairs[:-1]))]


def extremes(xs: Values, ys: Values, buckets: int = BUCKETS) -> tuple[np.ndarray, np.ndarray]:
    """``(xs, ys)`` downsampled to each bucket's lowest and highest point
    (:func:`extreme_indices`)."""
    x, y = _array(xs), _array(ys)
    keep = extreme_indices(y, buckets)
    return x[keep], y[keep]


def robust_top(values: np.ndarray) -> float | None:
    """Where a robust scale stops: 1.5× the 95th percentile of the finite values, or None
    when the largest value is within that (nothing to clip)."""
    finite = values[np.isfinite(values)]
    if not finite.size:
        return None
    top = (percentile(finite, ROBUST_PCT) or 0.0) * ROBUST_HEADROOM
    return top if top > 0 and float(finite.max()) > top else None


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


def _bands(frame: _Frame, bands: Sequence[Band]) -> list[str]:
    parts = []
    top, bottom = frame.top, frame.height - frame.bottom
    for row, band in enumerate(bands):  # one label row per band: narrow bands side by side
        lo, hi = max(band.x0, frame.x_lo), min(band.x1, frame.x_hi)
        if hi < lo:
            continue
        x0, x1 = frame.x(lo), frame.x(hi)
        parts.append(f'<g class="band"><rect x="{x0:.1f}" y="{top}" width="{max(x1 - x0, 1.0):.1f}"'
                     f' height="{bottom - top}" fill="{esc(band.color)}" fill-opacity="0.16">'
                     f'<title>{esc(band.label)}</title></rect><text x="{x0 + 3:.1f}" '
                     f'y="{top + 11 + 12 * row}" style="fill:{esc(band.color)}">'
                     f"{esc(band.label)}</text></g>")
    return parts


def _clip_marks(frame: _Frame, xs: np.ndarray, ys: np.ndarray, top: float, what: str,
                fmt: str) -> list[str]:
    """A marker at the top edge for each point above the scale, its value in the tooltip."""
    above = np.flatnonzero(ys > top)
    y = frame.top - 1
    return [f'<path class="clipped" d="M{frame.x(xs[i]):.1f} {y}l-4 -6h8z" fill="{CLIP_COLOR}">'
            f"<title>{esc(f'{what} at {tick_label(float(xs[i]))}: ' + fmt.format(ys[i]))}"
            "</title></path>" for i in above]


def _clip_note(frame: _Frame, count: int, peak: float, fmt: str) -> str:
    text = (f"{count} point{'s' if count != 1 else ''} above the scale (up to "
            f"{fmt.format(peak)}) marked ▼ at the top")
    return _note(frame, text, CLIP_COLOR, "clip-note")


def _note(frame: _Frame, text: str, color: str = "#5f6775", kind: str = "note") -> str:
    """A line of text inside the plot, top right: what the chart cannot show, and why."""
    return (f'<text class="{kind}" x="{frame.width - frame.right - 4}" y="{frame.top + 11}" '
            f'text-anchor="end" style="fill:{color}">{esc(text)}</text>')


def _bounds(values: np.ndarray, *, from_zero: bool) -> tuple[float, float]:
    lo, hi = float(values.min()), float(values.max())
    if from_zero:
        lo = min(lo, 0.0)
    if hi - lo <= 1e-9 * max(abs(lo), abs(hi)):  # flat (to rounding): centre it, not its noise
        pad = 0.1 * (abs(lo) or 1.0)
        return lo - (0.0 if from_zero and lo == 0.0 else pad), hi + pad
    return lo, hi + 0.05 * (hi - lo)


def _polylines(frame: _Frame, xs: np.ndarray, ys: np.ndarray, color: str, name: str) -> str:
    runs: list[list[str]] = [[]]
    for x, y in zip(xs.tolist(), ys.tolist(), strict=True):
        if not math.isfinite(y):
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append(f"{frame.x(x):.1f},{frame.y(min(y, frame.y_hi)):.1f}")
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
               bands: Sequence[Band] = (), robust: bool = False, value_format: str = "{:.4g}",
               note: str | None = None, width: int = 720, height: int = 260,
               from_zero: bool = True) -> str:
    """Lines over a shared x axis, with optional reference lines and bands; a placeholder
    when there is nothing to draw. ``robust``: see the module docstring; ``note``: a line
    of text inside the plot (what it cannot show)."""
    prepared = [(s, *extremes(s.xs, s.ys)) for s in series]
    shown = [(x[np.isfinite(y)], y[np.isfinite(y)]) for _, x, y in prepared]
    all_x = np.concatenate([x for x, _ in shown]) if shown else np.empty(0)
    all_y = np.concatenate([y for _, y in shown]) if shown else np.empty(0)
    if not all_x.size:
        return empty_chart(title, "no data recorded for this plot")
    top = robust_top(all_y) if robust and y_range is None else None
    scale = np.concatenate([all_y[all_y <= top] if top is not None else all_y,
                            np.array([h.y for h in hlines])])
    y_lo, y_hi = y_range or _bounds(scale, from_zero=from_zero)
    if top is not None:
        y_hi = top
    frame = _Frame(width, height, float(all_x.min()), float(all_x.max()), y_lo, y_hi)
    parts = _svg_open(frame, title) + _axes(frame, x_label, y_label) + _bands(frame, bands)
    colors = []
    for i, (s, xs, ys) in enumerate(prepared):
        color = s.color or PALETTE[i % len(PALETTE)]
        colors.append((s.name, color))
        parts.append(_polylines(frame, xs, ys, color, s.name))
        if top is not None:
            parts += _clip_marks(frame, xs, ys, top, s.name, value_format)
    if top is not None:
        above = sum(_count_above(_array(s.ys), top) for s in series)
        parts.append(_clip_note(frame, above, float(all_y.max()), value_format))
    elif note:
        parts.append(_note(frame, note))
    for h in hlines:
        y = frame.y(h.y)
        parts.append(f'<line x1="{frame.left}" x2="{width - frame.right}" y1="{y:.1f}" '
                     f'y2="{y:.1f}" stroke="{esc(h.color)}" stroke-dasharray="6 4"/>'
                     f'<text x="{width - frame.right - 4}" y="{y - 4:.1f}" text-anchor="end" '
                     f'style="fill:{esc(h.color)}">{esc(h.label)}</text>')
    parts += [*_legend(frame, colors), "</svg>"]
    return "".join(parts)


def _count_above(values: np.ndarray, top: float) -> int:
    """How many finite values exceed ``top`` (a chunk at a time: no full-length mask)."""
    count = 0
    for lo in range(0, values.size, CHUNK_POINTS):
        part = values[lo:lo + CHUNK_POINTS]
        count += int(np.count_nonzero((part > top) & (part < np.inf)))
    return count


def _layer(layer: Series | Layer) -> Layer:
    if isinstance(layer, Layer):
        return layer
    values = _array(layer.ys)
    return Layer(layer.name, lambda lo, hi: values[lo:hi], layer.color)


def _stack(layers: Sequence[Layer], lo: int, hi: int) -> tuple[list[np.ndarray], np.ndarray]:
    """The layers' values at points ``lo..hi-1`` (NaN as 0) and their total: the layers added
    in order, as ``np.sum(values, axis=0)`` adds them."""
    values = [np.nan_to_num(np.asarray(layer.values(lo, hi), dtype=np.float64), nan=0.0)
              for layer in layers]
    return values, np.sum(values, axis=0)


def stacked_chart(xs: Values, layers: Sequence[Series | Layer], *, title: str, x_label: str,
                  y_label: str, bands: Sequence[Band] = (), robust: bool = False,
                  value_format: str = "{:.4g}", width: int = 720, height: int = 260) -> str:
    """Layers stacked bottom-up over ``xs`` (each layer's ``ys``, or its :class:`Layer`
    function; None or NaN counts as 0).

    Downsampled by the extremes of the stacked total (each kept point keeps its layers), so
    the slowest and fastest step of each pixel are both drawn. The layers are computed a chunk
    at a time, twice: once for the total, once for the values at the points kept.
    """
    x = _array(xs)
    if not x.size or not layers:
        return empty_chart(title, "no data recorded for this plot")
    chunked = [_layer(layer) for layer in layers]
    n = x.size
    total = np.empty(n)
    for lo in range(0, n, CHUNK_POINTS):
        total[lo:lo + CHUNK_POINTS] = _stack(chunked, lo, min(n, lo + CHUNK_POINTS))[1]
    top = robust_top(total) if robust else None
    above = int(np.count_nonzero(total > top)) if top is not None else 0
    keep = extreme_indices(total)
    x, total = x[keep], total[keep]
    values = _kept_values(chunked, keep, n)
    y_lo, y_hi = _bounds(total[total <= top] if top is not None else total, from_zero=True)
    frame = _Frame(width, height, float(x.min()), float(x.max()), y_lo,
                   top if top is not None else y_hi)
    parts = _svg_open(frame, title) + _axes(frame, x_label, y_label)
    colors = []
    lower = np.zeros_like(total)
    for i, (layer, v) in enumerate(zip(chunked, values, strict=True)):
        upper = lower + v
        color = layer.color or PALETTE[i % len(PALETTE)]
        colors.append((layer.name, color))
        edge_top = [f"{frame.x(a):.1f},{frame.y(min(b, frame.y_hi)):.1f}"
                    for a, b in zip(x.tolist(), upper.tolist(), strict=True)]
        edge_bottom = [f"{frame.x(a):.1f},{frame.y(min(b, frame.y_hi)):.1f}"
                       for a, b in zip(x[::-1].tolist(), lower[::-1].tolist(), strict=True)]
        parts.append(f'<polygon points="{" ".join(edge_top + edge_bottom)}" fill="{esc(color)}">'
                     f"<title>{esc(layer.name)}</title></polygon>")
        lower = upper
    parts += _bands(frame, bands)
    if top is not None:
        parts += _clip_marks(frame, x, total, top, "total", value_format)
        parts.append(_clip_note(frame, above, float(total.max()), value_format))
    parts += [*_legend(frame, colors), "</svg>"]
    return "".join(parts)


def _kept_values(layers: Sequence[Layer], keep: np.ndarray, n: int) -> list[np.ndarray]:
    """Each layer's values (NaN as 0) at the sorted indices ``keep``, a chunk at a time."""
    out: list[list[np.ndarray]] = [[] for _ in layers]
    bounds = np.searchsorted(keep, np.arange(0, n + CHUNK_POINTS, CHUNK_POINTS))
    for chunk, (a, b) in enumerate(itertools.pairwise(bounds.tolist())):
        if a == b:
            continue
        lo = chunk * CHUNK_POINTS
        values, _ = _stack(layers, lo, min(n, lo + CHUNK_POINTS))
        for kept, v in zip(out, values, strict=True):
            kept.append(v[keep[a:b] - lo])
    return [np.concatenate(k) if k else np.empty(0) for k in out]


@dataclass(frozen=True)
class Lane:
    """One row of a timeline (a run of a job) and its bands: (x0, x1, label, color) each;
    a later band is drawn over an earlier one (a save over the training it interrupted)."""

    label: str
    bands: Sequence[Band]


def timeline_chart(lanes: Sequence[Lane], *, title: str, x_label: str,
                   legend: Sequence[tuple[str, str]] = (), width: int = 720) -> str:
    """Lanes over a shared x axis, each a row of coloured bands (a band's tooltip names it and
    gives its span); a placeholder when there is no band."""
    spans = [(b.x0, b.x1) for lane in lanes for b in lane.bands if b.x1 >= b.x0]
    if not spans:
        return empty_chart(title, "no run to show")
    row, gap = 22, 6
    label_w = min(160, 16 + 6.5 * max(len(lane.label) for lane in lanes))
    keys, x, key_rows = [], 0.0, 1  # the legend, wrapped into rows under the axis
    for name, color in legend:
        size = 24 + 6.5 * len(name)
        if x + size > width - 8 and x:
            x, key_rows = 0.0, key_rows + 1
        keys.append((x, key_rows, name, color))
        x += size
    legend_h = 16 * key_rows if legend else 0
    height = 30 + 12 + len(lanes) * (row + gap) + 38 + legend_h
    frame = _Frame(width, height, min(x0 for x0, _ in spans), max(x1 for _, x1 in spans),
                   0.0, 1.0, left=int(label_w), bottom=38 + legend_h)
    parts = _svg_open(frame, title)
    base = frame.height - frame.bottom
    for tick in nice_ticks(frame.x_lo, frame.x_hi, 7):
        if frame.x_lo <= tick <= frame.x_hi:
            x = frame.x(tick)
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{frame.top + 12}" y2="{base}" '
                         f'stroke="#eef0f3"/><text x="{x:.1f}" y="{base + 14}" '
                         f'text-anchor="middle">{esc(tick_label(tick))}</text>')
    parts.append(f'<text x="{(frame.left + width - frame.right) / 2:.1f}" '
                 f'y="{base + 30}" text-anchor="middle">{esc(x_label)}</text>')
    for kx, krow, name, color in keys:
        ky = base + 30 + 16 * krow - 10
        parts.append(f'<rect x="{kx + 4:.1f}" y="{ky}" width="10" height="10" '
                     f'fill="{esc(color)}"/><text x="{kx + 18:.1f}" y="{ky + 9}">{esc(name)}'
                     "</text>")
    for i, lane in enumerate(lanes):
        y = frame.top + 12 + i * (row + gap)
        parts.append(f'<text x="{frame.left - 6}" y="{y + 15}" text-anchor="end">'
                     f"{esc(lane.label)}</text>")
        for band in lane.bands:
            x0, x1 = frame.x(band.x0), frame.x(band.x1)
            tip = (f"{band.label}: {tick_label(band.x0)}–{tick_label(band.x1)} "
                   f"({band.x1 - band.x0:.3g} s)")
            parts.append(f'<rect class="lane-band" x="{x0:.1f}" y="{y}" '
                         f'width="{max(x1 - x0, 1.0):.1f}" height="{row}" '
                         f'fill="{esc(band.color)}"><title>{esc(tip)}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)
