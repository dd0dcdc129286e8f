"""``trainpace analyze TRACE...``: breakdowns and findings from PyTorch profiler traces."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import RenderableType

    from trainpace.trace.result import RankAnalysis, TraceAnalysis

HELP = ("analyze PyTorch profiler traces (Kineto JSON or .json.gz, one per rank): where the "
        "time went, why the device idled, which kernels, and the findings")


def _positive(kind: type[float] | type[int]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The verb's arguments."""
    parser.add_argument("traces", nargs="+", metavar="TRACE",
                        help="trace files (.json, .json.gz) or folders of them, one per rank")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object: traces, per-rank breakdowns, findings")
    parser.add_argument("--html", metavar="FILE",
                        help="also write a self-contained HTML page with plots to FILE")
    parser.add_argument("--gap-us", type=_positive(float), default=1000.0, metavar="US",
                        help="list device-idle gaps at least this long, in µs (default 1000)")
    parser.add_argument("--top", type=_positive(int), default=10, metavar="N",
                        help="kernels listed per rank (default 10)")
    parser.add_argument("--workers", type=_positive(int), default=None, metavar="N",
                        help="processes reading traces (default: one per trace, within the "
                        "CPUs and the memory available)")


def run(args: argparse.Namespace) -> int:
    """Analyze, then render the JSON, the console report and/or the HTML page."""
    from trainpace.cli._output import print_json
    from trainpace.trace import analyze_traces

    analysis = analyze_traces(args.traces, gap_threshold_us=args.gap_us, top=args.top,
                              workers=args.workers)
    if args.html:
        from trainpace.report.html import write_page
        from trainpace.report.trace_html import trace_page

        path = write_page(args.html, trace_page(analysis))
        print(f"trainpace analyze: wrote {path}", file=sys.stderr)
    if args.json:
        print_json(analysis.to_dict())
    else:
        from rich.console import Console

        console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 110)
        console.print(analysis_renderable(analysis))
    return 0


# ---- console ------------------------------------------------------------------------------


def _us(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 1e6:
        return f"{value / 1e6:.2f} s"
    if value >= 1e3:
        return f"{value / 1e3:.1f} ms"
    return f"{value:.0f} µs"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}%"


def _ranks_table(analysis: TraceAnalysis) -> RenderableType:
    from rich.table import Table

    table = Table(title="Where the device time went (HTA's temporal breakdown) and the steps",
                  title_justify="left", title_style="bold")
    for header in ("rank", "window", "idle", "compute", "non-compute", "comm hidden",
                   "steps", "step (median)", "DataLoader exposed", "GPU util"):
        table.add_column(header, justify="left" if header == "rank" else "right")
    for r in analysis.ranks:
        s = r.steps
        table.add_row(
            str(r.rank), _us(r.window_us), _pct(r.idle_pct), _pct(r.compute_pct),
            _pct(r.non_compute_pct), _pct(r.comm_comp_overlap_pct), str(s.count or "–"),
            _us(s.duration_us_median), _pct(s.dataloader_pct), _pct(s.gpu_util_pct),
        )
    return table


def _rank_details(r: RankAnalysis) -> list[RenderableType]:
    from rich.table import Table
    from rich.text import Text

    parts: list[RenderableType] = []
    if r.idle is not None:
        i = r.idle
        parts.append(Text.assemble(
            ("idle causes ", "bold"),
            f"(per stream, HTA): host wait {_us(i.host_wait_us)} · kernel wait "
            f"{_us(i.kernel_wait_us)} · other {_us(i.other_us)}"))
        if i.gaps:
            gaps = Table(title=f"Device-idle gaps ≥ {_us(i.gap_threshold_us)}: {i.gaps_count}, "
                         f"{_us(i.gaps_total_us)} ({_pct(i.gaps_pct)} of the window)",
                         title_justify="left")
            for header in ("at", "length", "step", "host was in", "top host ops"):
                gaps.add_column(header, justify="right" if header in ("at", "length") else "left")
            for g in i.gaps[:5]:
                ops = ", ".join(str(o["name"])[:40] for o in g.top_ops[:2]) or "–"
                gaps.add_row(_us(g.start_us), _us(g.duration_us), g.step or "–",
                             g.cause.replace("_", " "), ops)
            parts.append(gaps)
    k = r.kernels
    if k is not None:
        parts.append(Text.assemble(
            ("launch ", "bold"),
            f"{k.per_step:.0f} kernels per step · " if k.per_step is not None else "",
            f"median {_us(k.median_us)} · {_pct(k.short_pct)} under "
            f"{k.short_threshold_us:g} µs · launch lag median {_us(k.launch_lag_us)}"))
        cats = Table(title="Kernels by category", title_justify="left")
        for header in ("category", "count", "time", "share"):
            cats.add_column(header, justify="left" if header == "category" else "right")
        for c in k.categories:
            cats.add_row(c.category, str(c.count), _us(c.total_us), _pct(c.pct))
        top = Table(title=f"Top {len(k.top)} kernels", title_justify="left")
        for header in ("kernel", "category", "count", "time", "mean", "share"):
            top.add_column(header, justify="left" if header in ("kernel", "category") else "right")
        for row in k.top:
            name = row.name if len(row.name) <= 60 else row.name[:59] + "…"
            top.add_row(name, row.category, str(row.count), _us(row.total_us), _us(row.mean_us),
                        _pct(row.pct))
        parts += [cats, top]
    return parts


def analysis_renderable(analysis: TraceAnalysis) -> RenderableType:
    """The console report of an analysis."""
    from rich.console import Group
    from rich.text import Text

    from trainpace.report.console import diagnosis_renderable

    first = analysis.ranks[0]
    device = f" · {first.device_name}" if first.device_name else ""
    parts: list[RenderableType] = [
        Text(f"trainpace analyze · {len(analysis.ranks)} trace(s){device}", style="bold"),
        _ranks_table(analysis),
    ]
    shown = analysis.ranks[:1]
    slow = analysis.cross_rank.slowest_rank
    shown += [r for r in analysis.ranks if r.rank == slow and r is not first]
    for r in shown:
        parts.append(Text(f"rank {r.rank} · {r.path}", style="bold underline"))
        parts.extend(_rank_details(r))
    cross = analysis.cross_rank
    if cross.step_skew_pct is not None:
        parts.append(Text(f"ranks: the slowest (rank {cross.slowest_rank}) is "
                          f"{cross.step_skew_pct:.1f}% over the median rank's step"))
    notes = [*analysis.notes, *cross.notes,
             *(f"rank {r.rank}: {n}" for r in analysis.ranks for n in r.notes)]
    parts += [Text(f"note: {n}", style="dim") for n in notes]
    parts.append(diagnosis_renderable(analysis.summary.diagnosis))
    return Group(*parts)
