"""Inline SVG line and stacked charts that stay readable on a run of millions of steps.

- **Downsampled by extremes** (:mod:`trainpace.report.downsample`): each pixel keeps its
  lowest and highest point, so a one-step spike in a million steps is still drawn; a stacked
  chart's layers are computed a chunk at a time too (:class:`Layer`), so a run of 1e6 steps
  is drawn with its total (8 MB) and chunk-sized temporaries, not a full-length copy per layer.
- **A robust y-range** (``robust=True``): the scale stops at 1.5× the 95th percentile, so one
  2 s stall cannot squash a 30 ms step into a strip; the points above are drawn at the top
  edge with a marker (its tooltip gives the value), and the chart says how many there are.
- **Bands**: shaded x-ranges with a label (warm-up, a slow phase).

The plot area, its axes, legend and bands are :mod:`trainpace.report.plot_frame`'s; every
piece of text goes through :func:`trainpace.report.html.esc`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from trainpace.report.downsample import (
    CHUNK_POINTS,
    Values,
    as_array,
    count_above,
    extreme_indices,
    extremes,
    robust_top,
)
from trainpace.report.html import PALETTE, empty_chart, esc, tick_label
from trainpace.report.plot_frame import (
    NOTE_ROW,
    Band,
    Frame,
    axes_svg,
    bands_svg,
    legend_svg,
    note_below_svg,
    note_svg,
    svg_open,
)

CLIP_COLOR = "#c8423b"


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


def _clip_marks(frame: Frame, xs: np.ndarray, ys: np.ndarray, top: float, what: str,
                fmt: str) -> list[str]:
    """A marker at the top edge for each point above the scale, its value in the tooltip."""
    above = np.flatnonzero(ys > top)
    y = frame.top - 1
    return [f'<path class="clipped" d="M{frame.x(xs[i]):.1f} {y}l-4 -6h8z" fill="{CLIP_COLOR}">'
            f"<title>{esc(f'{what} at {tick_label(float(xs[i]))}: ' + fmt.format(ys[i]))}"
            "</title></path>" for i in above]


def _clip_note(frame: Frame, count: int, peak: float, fmt: str) -> str:
    text = (f"{count} point{'s' if count != 1 else ''} above the scale (up to "
            f"{fmt.format(peak)}) marked ▼ at the top")
    return note_svg(frame, text, CLIP_COLOR, "clip-note")


def _bounds(values: np.ndarray, *, from_zero: bool) -> tuple[float, float]:
    lo, hi = float(values.min()), float(values.max())
    if from_zero:
        lo = min(lo, 0.0)
    if hi - lo <= 1e-9 * max(abs(lo), abs(hi)):  # flat (to rounding): centre it, not its noise
        pad = 0.1 * (abs(lo) or 1.0)
        return lo - (0.0 if from_zero and lo == 0.0 else pad), hi + pad
    return lo, hi + 0.05 * (hi - lo)


def _polylines(frame: Frame, xs: np.ndarray, ys: np.ndarray, color: str, name: str) -> str:
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
    below = NOTE_ROW if note and top is None else 0  # a row of its own for the note
    frame = Frame(width, height + below, float(all_x.min()), float(all_x.max()), y_lo, y_hi,
                   bottom=Frame.bottom + below)
    parts = svg_open(frame, title) + axes_svg(frame, x_label, y_label) + bands_svg(frame, bands)
    colors = []
    for i, (s, xs, ys) in enumerate(prepared):
        color = s.color or PALETTE[i % len(PALETTE)]
        colors.append((s.name, color))
        parts.append(_polylines(frame, xs, ys, color, s.name))
        if top is not None:
            parts += _clip_marks(frame, xs, ys, top, s.name, value_format)
    if top is not None:
        above = sum(count_above(as_array(s.ys), top) for s in series)
        parts.append(_clip_note(frame, above, float(all_y.max()), value_format))
    elif note:
        parts.append(note_below_svg(frame, note))
    for h in hlines:
        y = frame.y(h.y)
        parts.append(f'<line x1="{frame.left}" x2="{width - frame.right}" y1="{y:.1f}" '
                     f'y2="{y:.1f}" stroke="{esc(h.color)}" stroke-dasharray="6 4"/>'
                     f'<text x="{width - frame.right - 4}" y="{y - 4:.1f}" text-anchor="end" '
                     f'style="fill:{esc(h.color)}">{esc(h.label)}</text>')
    parts += [*legend_svg(frame, colors), "</svg>"]
    return "".join(parts)


def _layer(layer: Series | Layer) -> Layer:
    if isinstance(layer, Layer):
        return layer
    values = as_array(layer.ys)
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
    x = as_array(xs)
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
    frame = Frame(width, height, float(x.min()), float(x.max()), y_lo,
                   top if top is not None else y_hi)
    parts = svg_open(frame, title) + axes_svg(frame, x_label, y_label)
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
    parts += bands_svg(frame, bands)
    if top is not None:
        parts += _clip_marks(frame, x, total, top, "total", value_format)
        parts.append(_clip_note(frame, above, float(total.max()), value_format))
    parts += [*legend_svg(frame, colors), "</svg>"]
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
