"""The console report: the five signs with status colours, the bottleneck, the findings.

:func:`print_report` is what the Meter (at ``finish()``), ``trainpace demo`` and
``trainpace report RUN`` call; it writes to the stream it is given (stderr by default, so a
``--json`` stdout stays one object). :func:`report_renderable` returns the same report as a
rich renderable for callers that own a :class:`rich.console.Console`.
"""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from trainpace.report._signs import evidence_text, headline, signs
from trainpace.report._text import cleaned, safe_text
from trainpace.report.goodput import goodput_renderable
from trainpace.summary import Diagnosis, Finding, Summary

STATUS_STYLE: dict[str, tuple[str, str]] = {
    "ok": ("●", "green"),
    "info": ("◆", "cyan"),
    "warning": ("▲", "yellow"),
    "critical": ("■", "bold red"),
    "not measured": ("○", "dim"),
}
SEVERITY_STYLE: dict[str, str] = {"info": "cyan", "warning": "yellow", "critical": "bold red"}


def legend() -> Text:
    """What the status marks mean (one line under the signs table)."""
    text = Text()
    for i, (status, (mark, style)) in enumerate(STATUS_STYLE.items()):
        text.append("   " if i else "")
        text.append(mark, style=style)
        text.append(f" {status}", style="dim")
    return text


def signs_table(summary: Summary, *, one_line: bool = False) -> Table:
    """The five vital signs: status mark, sign, headline value, details (``one_line``: each
    sign kept to one line, its details cut with an ellipsis, as the live panel needs)."""
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False, expand=False)
    table.add_column("", no_wrap=True)
    table.add_column("sign", no_wrap=True)
    table.add_column("value", no_wrap=True, justify="right")
    table.add_column("details")  # the one column that gives way to a narrow terminal
    for sign in signs(summary):
        mark, style = STATUS_STYLE[sign.status]
        dim = "dim" if sign.status == "not measured" else ""
        details = Text(" · ".join(sign.details), style=dim, no_wrap=True if one_line else None,
                       overflow="ellipsis" if one_line else None)
        table.add_row(
            Text(mark, style=style),
            Text(sign.name, style="bold" if sign.status != "not measured" else "dim"),
            Text(sign.value, style=style if sign.status in ("warning", "critical") else ""),
            details,
        )
    return table


def _hanging(rows: list[tuple[str, str, str]]) -> Table:
    """Rows of (mark, text, style) with the text wrapped under itself, not under the mark."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=3, justify="right", no_wrap=True)
    grid.add_column()
    for mark, text, style in rows:
        grid.add_row(Text(mark, style=style), Text(text, style=style))
    return grid


def _finding(finding: Finding) -> RenderableType:
    style = SEVERITY_STYLE[finding.severity]
    head = Text.assemble((f" {finding.severity.upper()} ", f"reverse {style}"), " ",
                         (finding.title, "bold"))
    rows = [("·", " · ".join(evidence_text(finding.evidence)), "dim")]
    rows = [r for r in rows if r[1]] + [("→", advice, "") for advice in finding.advice]
    return Group(head, _hanging(rows)) if rows else head


def _checks(finding: Finding) -> RenderableType:
    checked = finding.evidence.get("checked") or []
    not_checked = finding.evidence.get("not_checked") or []
    return _hanging([("✓", line, "dim") for line in checked]
                    + [("?", line, "dim") for line in not_checked])


def diagnosis_renderable(diagnosis: Diagnosis) -> RenderableType:
    """The bottleneck line, each finding with its evidence and advice, and what was checked."""
    if diagnosis.bottleneck is None:
        return Text("not diagnosed yet", style="dim")
    lead, ordered, checks = headline(diagnosis)
    style = SEVERITY_STYLE[lead.severity] if lead else "green"
    label = diagnosis.bottleneck.replace("_", " ")
    if checks is not None and checks.evidence.get("nothing_measured"):
        label, style = "not measured", "yellow"
    head = Text.assemble(("bottleneck: ", "bold"), (label, f"bold {style}"))
    summary_line = lead.title if lead is not None else checks.title if checks else None
    if summary_line:
        head.append(f" — {summary_line}")
    parts: list[RenderableType] = [head, *(_finding(f) for f in ordered)]
    if checks is not None:
        parts += [Text("checks", style="bold dim"), _checks(checks)]
    return Group(*parts)


def report_renderable(summary: Summary, *, title: str | None = None) -> RenderableType:
    """The whole report: a panel with the signs table, then the diagnosis."""
    device = " ".join(x for x in (summary.device.kind, summary.device.name) if x)
    heading = title or f"trainpace · {summary.run_id or 'run'}" + (f" · {device}" if device else "")
    job = [goodput_renderable(summary.goodput)] if summary.goodput.pct is not None else []
    return Group(
        Panel(Group(signs_table(summary), Text(""), legend()), title=Text(heading),
              title_align="left", expand=False),
        *job,
        diagnosis_renderable(summary.diagnosis),
    )


def print_report(
    summary: Summary,
    *,
    file: TextIO | None = None,
    title: str | None = None,
    width: int | None = None,
    color: bool | None = None,
) -> None:
    """Print a run's report to ``file`` (stderr by default).

    Args:
        summary: the run's summary, its diagnosis filled (``diagnose()``).
        file: where to write; colours only when it is a terminal, unless ``color`` says.
        title: the panel title (default: run id and device).
        width: the line width (default: the terminal's, or 100 when not a terminal).
        color: force colours on (True) or off (False).
    """
    stream = file if file is not None else sys.stderr
    summary = cleaned(summary)
    console = Console(
        markup=False,  # names from files are text, never markup (report._text)
        file=stream,
        width=width or (None if stream.isatty() else 100),
        force_terminal=color,
        no_color=color is False,
        highlight=False,
        soft_wrap=False,
    )
    console.print(report_renderable(summary, title=None if title is None else safe_text(title)))
