"""The console report of ``trainpace analyze``: a trace analysis as rich renderables.

A trace with device work gets the device view (HTA's temporal breakdown, idle causes, kernels);
a trace without (a CPU run) gets the host view (data loading, operators, Python between them,
the operators by self time) and no device or GPU figure at all.
"""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from trainpace.report._text import cleaned
from trainpace.report.console import diagnosis_renderable
from trainpace.trace.findings import HostBreakdown, RankAnalysis, TraceAnalysis
from trainpace.units import UNKNOWN, format_duration

NAME_WIDTH = 60


def us_text(value: float | None) -> str:
    """A time in µs, in the unit that reads best."""
    return UNKNOWN if value is None else format_duration(value / 1e6)


def pct_text(value: float | None) -> str:
    return UNKNOWN if value is None else f"{value:.1f}%"


def _short(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else name[:NAME_WIDTH - 1] + "…"


def _table(title: str, headers: tuple[str, ...], left: int = 1) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold")
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i < left else "right")
    return table


# ---- device traces ----------------------------------------------------------------------


def device_ranks_table(ranks: list[RankAnalysis]) -> Table:
    """Per rank: HTA's temporal breakdown and torch-tb-profiler's step figures."""
    table = _table("Where the device time went (HTA's temporal breakdown) and the steps",
                   ("rank", "window", "idle", "compute", "non-compute", "comm hidden",
                    "steps", "step (median)", "DataLoader exposed", "GPU util"))
    for r in ranks:
        s = r.steps
        table.add_row(
            str(r.rank), us_text(r.window_us), pct_text(r.idle_pct), pct_text(r.compute_pct),
            pct_text(r.non_compute_pct), pct_text(r.comm_comp_overlap_pct), str(s.count or UNKNOWN),
            us_text(s.duration_us_median), pct_text(s.dataloader_pct), pct_text(s.gpu_util_pct),
        )
    return table


def _device_details(r: RankAnalysis) -> list[RenderableType]:
    parts: list[RenderableType] = []
    if r.idle is not None:
        i = r.idle
        parts.append(Text.assemble(
            ("idle causes ", "bold"),
            f"(per stream, HTA): host wait {us_text(i.host_wait_us)} · kernel wait "
            f"{us_text(i.kernel_wait_us)} · other {us_text(i.other_us)}"))
        if i.gaps:
            gaps = _table(f"Device-idle gaps ≥ {us_text(i.gap_threshold_us)}: {i.gaps_count}, "
                          f"{us_text(i.gaps_total_us)} ({pct_text(i.gaps_pct)} of the window)",
                          ("at", "length", "step", "host was in", "top host ops"), left=0)
            for column in gaps.columns[2:]:
                column.justify = "left"
            for g in i.gaps[:5]:
                ops = ", ".join(str(o["name"])[:40] for o in g.top_ops[:2]) or UNKNOWN
                gaps.add_row(us_text(g.start_us), us_text(g.duration_us), g.step or UNKNOWN,
                             g.cause.replace("_", " "), ops)
            parts.append(gaps)
    k = r.kernels
    if k is not None:
        parts.append(Text.assemble(
            ("launch ", "bold"),
            f"{k.per_step:.0f} kernels per step · " if k.per_step is not None else "",
            f"median {us_text(k.median_us)} · {pct_text(k.short_pct)} under "
            f"{k.short_threshold_us:g} µs · launch lag median {us_text(k.launch_lag_us)}"))
        cats = _table("Kernels by category", ("category", "count", "time", "share"))
        for c in k.categories:
            cats.add_row(c.category, str(c.count), us_text(c.total_us), pct_text(c.pct))
        top = _table(f"Top {len(k.top)} kernels",
                     ("kernel", "category", "count", "time", "mean", "share"), left=2)
        for row in k.top:
            top.add_row(_short(row.name), row.category, str(row.count), us_text(row.total_us),
                        us_text(row.mean_us), pct_text(row.pct))
        parts += [cats, top]
    return parts


# ---- CPU traces -------------------------------------------------------------------------


def host_ranks_table(ranks: list[RankAnalysis]) -> Table:
    """Per rank of a CPU trace: the steps and where their host time went."""
    table = _table("Where the host time went in the profiled steps (no device events: a CPU "
                   "trace)", ("rank", "steps", "step (median)", "host time", "data loading",
                              "operators", "Python between ops"))
    for r in ranks:
        h = r.host
        table.add_row(
            str(r.rank), str(r.steps.count or UNKNOWN), us_text(r.steps.duration_us_median),
            us_text(h.window_us if h else None), pct_text(h.dataloader_pct if h else None),
            pct_text(h.operators_pct if h else None), pct_text(h.python_pct if h else None))
    return table


def host_operators_table(h: HostBreakdown) -> Table:
    """The operators with the most self time."""
    table = _table(f"Top {len(h.top)} operators by self time (of {h.operator_events} operator "
                   f"events, {h.threads} thread(s))",
                   ("operator", "count", "self", "self share", "total", "in data loading"))
    for row in h.top:
        table.add_row(_short(row.name), str(row.count), us_text(row.self_us),
                      pct_text(row.self_pct), us_text(row.total_us),
                      us_text(row.in_dataloader_us) if row.in_dataloader_us else UNKNOWN)
    return table


def _host_details(r: RankAnalysis) -> list[RenderableType]:
    h = r.host
    if h is None:
        return []
    return [
        Text.assemble(
            ("host time ", "bold"),
            f"({h.window}, {us_text(h.window_us)}): data loading {us_text(h.dataloader_us)} "
            f"({pct_text(h.dataloader_pct)}) · operators {us_text(h.operators_us)} "
            f"({pct_text(h.operators_pct)}) · Python between operators "
            f"{us_text(h.python_us)} ({pct_text(h.python_pct)})"),
        host_operators_table(h),
    ]


# ---- the whole report -------------------------------------------------------------------


def analysis_renderable(analysis: TraceAnalysis) -> RenderableType:
    """The console report of an analysis."""
    first = analysis.ranks[0]
    device = f" · {first.device_name}" if first.device_name else ""
    device_ranks = [r for r in analysis.ranks if r.host is None]
    host_ranks = [r for r in analysis.ranks if r.host is not None]
    parts: list[RenderableType] = [
        Text(f"trainpace analyze · {len(analysis.ranks)} trace(s){device}", style="bold")]
    if device_ranks:
        parts.append(device_ranks_table(device_ranks))
    if host_ranks:
        parts.append(host_ranks_table(host_ranks))
    shown = analysis.ranks[:1]
    slow = analysis.cross_rank.slowest_rank
    shown += [r for r in analysis.ranks if r.rank == slow and r is not first]
    for r in shown:
        parts.append(Text(f"rank {r.rank} · {r.path}", style="bold underline"))
        parts.extend(_host_details(r) if r.host is not None else _device_details(r))
    cross = analysis.cross_rank
    if cross.step_skew_pct is not None:
        parts.append(Text(f"ranks: the slowest (rank {cross.slowest_rank}) is "
                          f"{cross.step_skew_pct:.1f}% over the median rank's step"))
    notes = [*analysis.notes, *cross.notes,
             *(f"rank {r.rank}: {n}" for r in analysis.ranks for n in r.notes)]
    parts += [Text(f"note: {n}", style="dim") for n in notes]
    parts.append(diagnosis_renderable(analysis.summary.diagnosis))
    return Group(*parts)


def print_analysis(analysis: TraceAnalysis, stream: TextIO | None = None,
                   width: int | None = None) -> None:
    """Print the console report (to stdout by default; 110 columns when not a terminal)."""
    out = stream if stream is not None else sys.stdout
    console = Console(file=out, width=width if width is not None
                      else None if out.isatty() else 110, markup=False)
    console.print(analysis_renderable(cleaned(analysis)))
