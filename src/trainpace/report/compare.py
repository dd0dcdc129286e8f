"""Render a comparison of two runs (:func:`trainpace.comparison.compare_runs` computes it)."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from trainpace.comparison import Comparison
from trainpace.report._signs import money, num, pct, secs
from trainpace.report._text import cleaned
from trainpace.report.goodput import LABELS


def comparison_renderable(comparison: Comparison) -> Group:
    """A table of both runs' figures and the verdict line."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("")
    for run in comparison.runs:
        table.add_column(f"{run.label}: {run.run_id or run.path}", justify="right")
    rows: list[tuple[str, list[str]]] = [
        ("samples/s", [num(r.samples_per_s) for r in comparison.runs]),
        ("tokens/s", [num(r.tokens_per_s) for r in comparison.runs]),
        ("step median", [secs(r.step_s_median) for r in comparison.runs]),
        ("batch size", [num(r.batch_size) for r in comparison.runs]),
        ("wall time", [secs(r.wall_s) for r in comparison.runs]),
    ]
    if comparison.target is not None:
        rows += [
            ("steps to target", [num(r.steps_to_target) if r.reached_target else "not reached"
                                 for r in comparison.runs]),
            ("samples to target", [num(r.samples_to_target) if r.reached_target else "—"
                                   for r in comparison.runs]),
            ("time to target", [secs(r.time_to_target_s) if r.reached_target else "not reached"
                                for r in comparison.runs]),
        ]
    if any(r.usd_per_million_samples is not None for r in comparison.runs):
        rows += [
            ("$ per M tokens", [money(r.usd_per_million_tokens) for r in comparison.runs]),
            ("$ per M samples", [money(r.usd_per_million_samples) for r in comparison.runs]),
            ("$ to target", [money(r.usd_to_target) for r in comparison.runs]),
            ("power", [num(r.power_w_mean, "W") for r in comparison.runs]),
        ]
    for name, values in rows:
        if any(value != "—" for value in values):
            table.add_row(name, *values)
    by = comparison.by.replace("_", " ")
    verdict = Text.assemble(
        ("winner: ", "bold"),
        (comparison.winner or "none", "bold green" if comparison.winner else "bold"),
        f" (by {by}) — {comparison.reason}",
    )
    notes = [Text(f"note: {note}", style="dim") for run in comparison.runs
             for note in run.notes]
    if comparison.goodput is not None:
        return Group(table, verdict, goodput_table(comparison.goodput), *notes)
    if comparison.savings is not None:
        notes.insert(0, Text(comparison.savings["text"], style="bold"))
    return Group(table, verdict, *notes)


def goodput_table(compared: dict[str, Any]) -> Group:
    """The two jobs' goodput and each category's time and share, A and B side by side."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for title in ("where the jobs' time went", "A", "B", "B − A"):
        table.add_column(title, justify="left" if title.startswith("where") else "right")
    pa, pb = compared["pct"]
    table.add_row("goodput", pct(pa), pct(pb),
                  f"{pb - pa:+.1f} pts" if pa is not None and pb is not None else "—")
    wa, wb = compared["wall_s"]
    table.add_row("wall time", secs(wa), secs(wb), _delta(wa, wb))
    for name, figures in compared["categories"].items():
        (sa, sb), (ca, cb) = figures["s"], figures["pct"]
        if sa is None and sb is None:
            continue
        label = LABELS.get(name, name)
        table.add_row(label, f"{secs(sa)} ({pct(ca)})", f"{secs(sb)} ({pct(cb)})",
                      _delta(sa, sb))
    la, lb = compared["lost_steps"]
    if la or lb:
        table.add_row("lost steps", num(la), num(lb), "—")
    return Group(table, Text(compared["text"], style="bold"))


def _delta(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "—"
    return ("+" if b >= a else "−") + secs(abs(b - a))


def print_comparison(comparison: Comparison, *, file: TextIO | None = None,
                     width: int | None = None) -> None:
    """Print the comparison to ``file`` (stdout by default)."""
    stream = file if file is not None else sys.stdout
    Console(file=stream, width=width or (None if stream.isatty() else 100),
            highlight=False, markup=False).print(comparison_renderable(cleaned(comparison)))
