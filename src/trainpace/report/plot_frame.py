"""The plot area of an SVG chart and its pieces: the scales (:class:`Frame`), round ticks,
axes, legend, shaded bands, and the notes a chart writes about what it cannot show.

Every piece of text goes through :func:`trainpace.report.html.esc`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainpace.report.html import esc, tick_label


@dataclass(frozen=True)
class Band:
    """A shaded x-range with a label: warm-up, a slow phase."""

    x0: float
    x1: float
    label: str
    color: str = "#e0a526"


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


@dataclass(frozen=True)
class Frame:
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


def svg_open(frame: Frame, title: str) -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {frame.width} {frame.height}" '
            f'role="img" aria-label="{esc(title)}">',
            f'<text class="chart-title" x="{frame.left}" y="16">{esc(title)}</text>']


def axes_svg(frame: Frame, x_label: str, y_label: str) -> list[str]:
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
    parts.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{base + 34}" text-anchor="middle">'
                 f'{esc(x_label)}</text>')
    mid = (frame.top + base) / 2
    parts.append(f'<text x="12" y="{mid:.1f}" text-anchor="middle" '
                 f'transform="rotate(-90 12 {mid:.1f})">{esc(y_label)}</text>')
    return parts


def legend_svg(frame: Frame, names: Sequence[tuple[str, str]]) -> list[str]:
    parts: list[str] = []
    x = float(frame.width - frame.right)
    for name, color in reversed(names):
        width = 14 + 6.5 * len(name)
        x -= width + 10
        parts.append(f'<rect x="{x:.1f}" y="8" width="10" height="10" fill="{esc(color)}"/>'
                     f'<text x="{x + 14:.1f}" y="17">{esc(name)}</text>')
    return parts


def bands_svg(frame: Frame, bands: Sequence[Band]) -> list[str]:
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


def note_svg(frame: Frame, text: str, color: str = "#5f6775", kind: str = "note") -> str:
    """A line of text inside the plot, top right: how many points the scale cut (their
    markers are at the top edge, beside it)."""
    return (f'<text class="{kind}" x="{frame.width - frame.right - 4}" y="{frame.top + 11}" '
            f'text-anchor="end" style="fill:{color}">{esc(text)}</text>')


NOTE_ROW = 16  # the height of the line under the x axis that says what a chart cannot show


def note_below_svg(frame: Frame, text: str) -> str:
    """What the chart cannot show, and why: a line of its own under the x axis's label, where
    no line, legend or label of the plot can run through it."""
    return (f'<text class="note" x="{frame.left}" y="{frame.height - 4}" '
            f'style="fill:#5f6775">{esc(text)}</text>')
