"""The DataLoader tuner on the console: a progress bar while it searches, then what it tried,
the verdict and the ``DataLoader(...)`` line to paste."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from trainpace.tune.search import Progress as ProgressCallback
from trainpace.tune.tuning import TARGET_WAIT_PCT, Trial, TuneResult
from trainpace.units import UNKNOWN, format_bytes, format_duration, format_seconds


def _pct(value: float | None) -> str:
    return UNKNOWN if value is None else f"{value:.1f}%"


def _gb(value: float | None) -> str:
    return UNKNOWN if value is None else f"{value:.2f}"


def trials_table(result: TuneResult) -> Table:
    """One row per trial, in the order tried; the recommended one marked."""
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for name, justify in (("", "left"), ("workers", "right"), ("prefetch", "right"),
                          ("pin", "left"), ("batches/s", "right"), ("wait/batch", "right"),
                          ("wait", "right"), ("worker CPU/batch", "right"),
                          ("memory GB", "right"), ("start", "right"), ("measured", "right")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for trial in result.trials:
        mark, style = _mark(trial, result)
        s = trial.setting
        table.add_row(
            mark, str(s.num_workers),
            UNKNOWN if s.prefetch_factor is None else str(s.prefetch_factor),
            "yes" if s.pin_memory else "no", f"{trial.batches_per_s:.1f}",
            format_seconds(trial.wait_s_per_batch), _pct(trial.wait_pct),
            format_seconds(trial.worker_cpu_s_per_batch),
            _gb(trial.memory_gb), format_seconds(trial.startup_s),
            f"{trial.batches}" + ("" if trial.complete else " (cut)"), style=style)
    return table


def _mark(trial: Trial, result: TuneResult) -> tuple[str, str]:
    if trial.setting == result.recommended and trial.wait_pct == result.wait_pct:
        return "→", "bold green" if result.reachable is not False else "bold yellow"
    if trial.wait_pct is not None and trial.wait_pct < TARGET_WAIT_PCT:
        return "", "green"
    return "", ""


def tune_renderable(result: TuneResult) -> RenderableType:
    """The tuner's report as one rich renderable, all but the line to paste (which
    :func:`print_tune` prints last, unwrapped, whatever the width)."""
    p = result.probe
    on = {None: "", "cpu": ", CPU work"}.get(result.step_device, f", {result.step_device}: "
                                                                  "a sleep")
    step = (f"a {format_duration(result.step_s)} step ({result.step_source}{on})"
            if result.step_s is not None else "no step time: the fastest loading")
    head = Text.assemble(
        ("tune-loader ", "bold"), f"batch {result.batch_size} · {step} · "
        f"{result.cores} usable cores · loading is {result.bound or 'unknown'}-bound\n",
        f"one sample {format_duration(p.sample_s)} in this process "
        f"(CPU {format_duration(p.sample_cpu_s)}, waiting {format_duration(p.sample_wait_s)}); "
        f"collate {format_duration(p.collate_s)}; one batch {format_duration(p.batch_s)}, "
        f"{format_bytes(p.batch_bytes)}")
    colour = {True: "green", False: "yellow", None: "cyan"}[result.reachable]
    parts: list[RenderableType] = [head, Text(""), trials_table(result), Text(""),
                                   Text(result.verdict, style=colour)]
    parts.extend(Text(f"  • {line}") for line in result.advice)
    parts.append(Text(""))
    parts.append(Text(f"searched {len(result.trials)} settings in "
                      f"{format_duration(result.elapsed_s)} (budget "
                      f"{format_duration(result.budget_s)}, memory budget "
                      f"{result.memory_budget_gb:.1f} GB)", style="dim"))
    return Group(*parts)


def print_tune(result: TuneResult, stream: TextIO | None = None) -> None:
    """Print the tuner's report (stdout by default)."""
    out = stream if stream is not None else sys.stdout
    console = Console(file=out, highlight=False)
    if not console.is_terminal:  # a file or a pipe: the table's full width, nothing cut
        console = Console(file=out, highlight=False, width=132)
    console.print(tune_renderable(result))
    console.print(Text(result.code, style="bold"), soft_wrap=True)


@contextmanager
def tune_progress(stream: TextIO | None = None, *,
                  force_terminal: bool | None = None) -> Iterator[ProgressCallback]:
    """A progress callback for :func:`trainpace.tune_loader`: a bar over the time budget on a
    terminal, one plain line per setting tried otherwise."""
    out = stream if stream is not None else sys.stderr
    console = Console(file=out, highlight=False, force_terminal=force_terminal)
    if not console.is_terminal:
        def plain(message: str, spent: float, budget: float) -> None:
            print(f"trainpace tune-loader: {spent:5.1f}/{budget:g} s  {message}", file=out)
        yield plain
        return
    bar = Progress(TextColumn("[bold]tune-loader[/]"), BarColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"), console=console, transient=True)
    task = bar.add_task("", total=1.0)
    with bar:
        def update(message: str, spent: float, budget: float) -> None:
            bar.update(task, completed=min(spent / budget, 1.0) if budget else 1.0,
                       description=message)
        yield update
