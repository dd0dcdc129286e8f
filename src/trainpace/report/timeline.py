"""A job's timeline: its runs as lanes over a shared time axis, what each did as bands."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainpace.report.html import empty_chart, esc, tick_label
from trainpace.report.plot_frame import Band, Frame, nice_ticks, svg_open


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
    frame = Frame(width, height, min(x0 for x0, _ in spans), max(x1 for _, x1 in spans),
                   0.0, 1.0, left=int(label_w), bottom=38 + legend_h)
    parts = svg_open(frame, title)
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
