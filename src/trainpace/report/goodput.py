"""The job's goodput as a report shows it: a table of the categories (console and HTML) and the
job's timeline (runs as lanes, categories as bands)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from trainpace.report.html import esc, paragraph, table
from trainpace.report.plot_frame import Band
from trainpace.report.timeline import Lane, timeline_chart
from trainpace.summary_goodput import GOODPUT_CATEGORIES, Goodput
from trainpace.units import format_seconds

LABELS = {
    "training": "training (kept steps)",
    "startup": "startup",
    "warmup_excess": "warm-up excess",
    "data_wait": "data wait",
    "evaluation": "evaluation",
    "checkpoint_save": "checkpoint save",
    "checkpoint_load": "checkpoint load",
    "lost_progress": "lost progress",
    "restart_gap": "restart gap",
    "teardown": "teardown",
    "other": "other",
}
COLORS = {
    "training": "#3a9b5c",
    "startup": "#8a5cc2",
    "warmup_excess": "#9aa0a6",
    "data_wait": "#e08a1e",
    "evaluation": "#5aa6b8",
    "checkpoint_save": "#3b6fd4",
    "checkpoint_load": "#1f3f8a",
    "lost_progress": "#c8423b",
    "restart_gap": "#d9dce1",
    "teardown": "#9c7a48",
    "other": "#e1e4ea",
}
_EVENTS = frozenset(LABELS[name] for name in ("evaluation", "checkpoint_save", "checkpoint_load"))


def headline(goodput: Goodput) -> str:
    """``goodput 29.0% of 1m02s (2 runs: 1 finished, 1 killed)``."""
    statuses: dict[str, int] = {}
    for run in goodput.runs:
        statuses[run.status or "unknown"] = statuses.get(run.status or "unknown", 0) + 1
    runs = len(goodput.runs)
    said = ", ".join(f"{n} {status}" for status, n in statuses.items())
    pct = f"{goodput.pct:.1f}%" if goodput.pct is not None else "—"
    return (f"goodput {pct} of {format_seconds(goodput.wall_s)} "
            f"({runs} run{'s' if runs != 1 else ''}: {said})")


def rows(goodput: Goodput) -> list[tuple[str, str, str, str]]:
    """(category, seconds, share of the wall time, source or why it is not measured), the
    productive time first, then each category in the order a job meets them."""
    out = [(LABELS["training"], format_seconds(goodput.productive_s), _pct(goodput.pct),
            "steps.jsonl: the kept steps' time less their data wait and warm-up excess")]
    c = goodput.categories
    for name in GOODPUT_CATEGORIES:
        seconds = getattr(c, f"{name}_s")
        label = LABELS[name]
        if name == "lost_progress" and c.lost_steps:
            label += f" ({c.lost_steps} steps)"
        why = goodput.missing.get(name)
        source = (f"not measured: {why}" if why is not None
                  else goodput.other or "" if name == "other" else goodput.sources.get(name, ""))
        out.append((label, format_seconds(seconds), _pct(goodput.shares_pct.get(name)), source))
    return out


def _pct(value: float | None) -> str:
    return f"{value:.1f}%" if value is not None else "—"


def goodput_renderable(goodput: Goodput) -> RenderableType:
    """The console's goodput block: the headline and the categories' table."""
    grid = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    grid.add_column("where the job's time went", no_wrap=True)
    grid.add_column("time", justify="right", no_wrap=True)
    grid.add_column("share", justify="right", no_wrap=True)
    grid.add_column("source")
    for label, seconds, share, source in rows(goodput):
        unmeasured = source.startswith("not measured")
        grid.add_row(Text(label, style="dim" if unmeasured else ""), seconds, share,
                     Text(source, style="dim"))
    return Group(Text(headline(goodput), style="bold"), grid)


def timeline(goodput: Goodput) -> str:
    """The job as lanes (one per run), its categories as bands, over seconds from its start."""
    lanes = []
    for run in goodput.runs:
        bands = [Band(float(b["start_s"]), float(b["end_s"]),
                      LABELS.get(str(b["category"]), str(b["category"])),
                      COLORS.get(str(b["category"]), "#9aa0a6"))
                 for b in run.bands if b.get("start_s") is not None and b.get("end_s") is not None]
        # the timed events are drawn over the part of the run they interrupted
        bands.sort(key=lambda band: band.label in _EVENTS)
        lanes.append(Lane(f"run {run.run} · {run.status}", bands))
    shown = {b.label for lane in lanes for b in lane.bands}
    legend = [(LABELS[name], COLORS[name]) for name in LABELS if LABELS[name] in shown]
    return timeline_chart(lanes, title="The job over time", x_label="seconds from the job's start",
                          legend=legend)


def goodput_html(goodput: Goodput) -> str:
    """The job's section of the HTML page: the headline, the table, notes, the timeline."""
    parts = [f"<p><strong>{esc(headline(goodput))}</strong></p>",
             table(["where the job's time went", "time", "share", "source"],
                   [list(row) for row in rows(goodput)], numeric=[1, 2])]
    if goodput.notes:
        parts.append(paragraph("; ".join(goodput.notes), muted=True))
    parts.append(f'<div class="plot">{timeline(goodput)}</div>')
    return "".join(parts)
