"""The live view of ``trainpace run``: the run so far, while the script's own output scrolls.

:class:`LiveView` is a sink. On a terminal it keeps a panel at the bottom (rich ``Live``): the
five signs so far (the Meter's refreshed summary), this window's line, the bottleneck so far
(the diagnosis of that summary) and the ETA to the target; the script's prints go above it.
Not on a terminal it prints one line per window. It renders only what it is handed.

The panel keeps one line per row whatever the terminal's width (details cut with an ellipsis;
the report at the end has them all), so it fits in an 80×24 terminal: a panel taller than the
terminal is cropped by rich from the bottom, which would hide the bottleneck and the target.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.text import Text

from trainpace.diagnosis import diagnose
from trainpace.report._signs import headline
from trainpace.report._text import cleaned, safe_text
from trainpace.report.console import signs_table
from trainpace.runlog import Record
from trainpace.sinks.console_line import format_window
from trainpace.summary import Summary
from trainpace.units import format_duration

# Steps kept for the diagnosis so far (its anomaly rules look at recent steps).
STEPS_KEPT = 5000
# The diagnosis so far is made again at most this often (it runs on the writer thread).
DIAGNOSE_EVERY_S = 2.0
_UNCOUNTED = ("samples_per_s", "tokens_per_s", "wait_s_per_step", "wait_pct")


class LiveView:
    """A sink that shows the run so far.

    Args:
        stream: where to draw (default: stderr).
        terminal: draw the live panel (True) or print lines (False); default: whether
            ``stream`` is a terminal.
        title: the panel's title (the script's name).
        redirect_stdout: route ``sys.stdout`` above the panel too (when stdout is the same
            terminal); ``sys.stderr`` is always routed above it on a terminal.
        counts_known: says whether samples, tokens and data wait are measured (False: a
            script with no DataLoader; they are shown as unknown, not as zero).
        clock: seconds, for the elapsed time and the diagnosis pace.
    """

    def __init__(self, stream: TextIO | None = None, *, terminal: bool | None = None,
                 title: str = "", redirect_stdout: bool = False,
                 counts_known: Callable[[], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self.terminal = self._stream.isatty() if terminal is None else terminal
        # the panel shows the summary: the Meter refreshes it from the first window on
        self.shows_summary = self.terminal
        self._title = title
        self._redirect_stdout = redirect_stdout
        self._counts_known = counts_known
        self._clock = clock
        self._started_s = clock()
        self._window: dict[str, Any] | None = None
        self._summary: Summary | None = None
        self._steps: deque[Mapping[str, Any]] = deque(maxlen=STEPS_KEPT)
        self._bottleneck: tuple[str, str | None] | None = None
        self._diagnosed_s = -DIAGNOSE_EVERY_S
        self._fresh_summary = False
        self._live: Live | None = None

    def start(self) -> None:
        """Show the panel (on a terminal); the script's output goes above it from now on."""
        if not self.terminal or self._live is not None:
            return
        console = Console(file=self._stream, force_terminal=True, highlight=False,
                          markup=False)  # names are text, never markup (report._text)
        self._live = Live(self.renderable(), console=console, auto_refresh=False,
                          transient=True, redirect_stdout=self._redirect_stdout,
                          redirect_stderr=True)
        self._live.start()

    def log(self, record: Record) -> None:
        """A window redraws the panel (or prints its line); a summary is kept for the next."""
        if record.kind == "summary":
            # The Meter refreshes the summary right after a window's record: drawn again.
            self._summary = cleaned(Summary.from_dict(record.data))
            self._fresh_summary = True
        elif record.kind == "window":
            self._window = self._known(dict(record.data["window"]))
            self._steps.extend(record.data.get("steps") or ())
            if not self.terminal:
                print(format_window(self._window), file=self._stream, flush=True)
                return
        else:
            return
        if not self.terminal:
            return
        self._rediagnose()
        if self._live is not None:
            self._live.update(self.renderable(), refresh=True)

    def close(self) -> None:
        """Take the panel away (the report comes next); idempotent."""
        live, self._live = self._live, None
        if live is not None:
            live.stop()

    # -- drawing --------------------------------------------------------------------------

    def renderable(self) -> RenderableType:
        """The panel as it is now."""
        window = self._window
        step = window.get("last_step") if window else None
        head = f"trainpace run · {self._title}" if self._title else "trainpace run"
        if step is not None:
            head += f" · step {step:,}"
        head += f" · {format_duration(max(0.0, self._clock() - self._started_s))}"
        parts: list[RenderableType] = []
        summary = self._shown_summary()
        if summary is not None:
            parts.append(signs_table(summary, one_line=True))
        else:
            parts.append(Text("waiting for the first window of steps…", style="dim"))
        if window is not None:
            parts.append(Text.assemble(("this window  ", "bold"), format_window(window)))
        parts.append(self._bottleneck_text())
        parts.append(self._target_text())
        for part in parts:
            if isinstance(part, Text):
                _one_line(part)
        return Panel(Group(*parts), title=Text(safe_text(head)), title_align="left",
                     border_style="blue")

    def _bottleneck_text(self) -> Text:
        if self._bottleneck is None:
            return Text.assemble(("bottleneck so far  ", "bold"), ("not diagnosed yet", "dim"))
        name, why = self._bottleneck
        return Text.assemble(("bottleneck so far  ", "bold"), (name.replace("_", " "), "yellow"
                             if name != "none" else "green"), (f" — {why}" if why else "", ""))

    def _target_text(self) -> Text:
        window = self._window or {}
        label = ("target  ", "bold")
        reached = window.get("time_to_target_s")
        if reached is not None:
            return Text.assemble(label, f"reached at {format_duration(reached)}")
        eta = window.get("eta_to_target_s")
        if eta is not None:
            return Text.assemble(label, f"ETA ~{format_duration(eta)} at the recent trend")
        summary = self._summary
        if summary is not None and summary.time.target is not None:
            return Text.assemble(label, ("no ETA yet: the loss is not moving toward the "
                                         "target", "dim"))
        return Text.assemble(label, ("none set (--target-loss X gives an ETA)", "dim"))

    # -- inside ---------------------------------------------------------------------------

    def _known(self, figures: dict[str, Any]) -> dict[str, Any]:
        """Counts that were not measured are unknown, not zero."""
        if self._counts_known is not None and not self._counts_known():
            for key in _UNCOUNTED:
                figures[key] = None
        return figures

    def _shown_summary(self) -> Summary | None:
        summary = self._summary
        if summary is None or self._counts_known is None or self._counts_known():
            return summary
        return dataclasses.replace(
            summary,
            throughput=dataclasses.replace(summary.throughput, samples_per_s=None,
                                           tokens_per_s=None),
            data=dataclasses.replace(summary.data, wait_s_per_step=None, wait_pct=None))

    def _rediagnose(self) -> None:
        now = self._clock()
        summary = self._shown_summary()
        if summary is None or not self._fresh_summary or now - self._diagnosed_s < DIAGNOSE_EVERY_S:
            return
        self._fresh_summary = False
        self._diagnosed_s = now
        diagnosis = diagnose(summary, steps=list(self._steps))
        lead, _, _ = headline(diagnosis)
        self._bottleneck = (diagnosis.bottleneck or "none", lead.title if lead else None)


def _one_line(text: Text) -> Text:
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text
