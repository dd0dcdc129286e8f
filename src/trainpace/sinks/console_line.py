"""One console line per window, e.g.
``step 300 | 1,234 samples/s | 45.6k tok/s | step 8.1 ms (p90 9.0) | data wait 3.1% | loss 2.31``.

Under DDP rank 0 prints the job's window (:func:`trainpace.dist.job_window.job_window`),
labelled so: ``job, 2 ranks | step 300 | 2,468 samples/s | ...`` (``1 of 2 ranks`` when a rank
was late or gone).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from trainpace.runlog import Record
from trainpace.units import format_compact, format_duration


def format_window(figures: dict[str, Any]) -> str:
    """The console line for one window's figures (only what was measured)."""
    parts = [f"step {figures.get('last_step')}"]
    ranks, world = figures.get("ranks"), figures.get("world_size")
    if ranks is not None:
        parts.insert(0, f"job, {ranks} ranks" if ranks == world
                     else f"job, {ranks} of {world} ranks")
    if not figures.get("measured_steps"):
        parts.append(f"warm-up ({figures.get('warmup_steps')} steps so far)")
    samples = figures.get("samples_per_s")
    if samples is not None:
        parts.append(f"{samples:,.0f} samples/s" if samples >= 10 else f"{samples:.2f} samples/s")
    tokens = figures.get("tokens_per_s")
    if tokens is not None:
        parts.append(f"{format_compact(tokens)} tok/s")
    median, p90 = figures.get("step_s_median"), figures.get("step_s_p90")
    if median is not None and p90 is not None:
        parts.append(f"step {format_duration(median)} (p90 {format_duration(p90)})")
    wait = figures.get("wait_pct")
    if wait is not None:
        parts.append(f"data wait {wait:.1f}%")
    util = figures.get("device_util_pct")
    if util is not None:
        parts.append(f"{figures.get('device_kind') or 'device'} busy {util:.0f}%")
    loss = figures.get("loss")
    if loss is not None:
        parts.append(f"loss {loss:.4g}")
    eta = figures.get("eta_to_target_s")
    if figures.get("time_to_target_s") is not None:
        parts.append(f"target reached at {format_duration(figures['time_to_target_s'])}")
    elif eta is not None:
        parts.append(f"target in ~{format_duration(eta)}")
    return " | ".join(parts)


class ConsoleSink:
    """Prints :func:`format_window` for each window record to ``stream`` (stderr by default)."""

    reads_steps = False  # the window figures only (see trainpace.sinks.base.Sink)
    shows_job = True  # under DDP: the job's line at rank 0 (see trainpace.meter.outputs)

    def __init__(self, stream: TextIO | None = None, *, own_rank: int | None = None) -> None:
        """``own_rank``: print that rank's own windows, labelled ``rank {r}``, on its own
        process (``trainpace run --all-ranks``), instead of the job's at rank 0."""
        self._stream = stream
        self._label = f"rank {own_rank} | " if own_rank is not None else ""
        if own_rank is not None:
            self.shows_job = False

    def log(self, record: Record) -> None:
        """Print the window line; other records are not for the console."""
        if record.kind != "window":
            return
        stream = self._stream if self._stream is not None else sys.stderr
        _write_line(self._label + format_window(dict(record.data["window"])), stream)

    def close(self) -> None:
        """Nothing to release (the stream is not ours)."""


def _write_line(line: str, stream: TextIO) -> None:
    """``line`` on a line of its own. A tqdm progress bar (HF Trainer's, Lightning's) keeps its
    line open with ``\r`` redraws: printed plainly, the window line would continue it. When
    the loop has tqdm loaded, its ``write`` clears the bars on ``stream``, prints the line and
    redraws them (tqdm is never imported here: a loop without it has no bar to step around)."""
    tqdm = sys.modules.get("tqdm")
    bar = getattr(tqdm, "tqdm", None)
    if bar is not None and getattr(bar, "_instances", None):  # a bar is being drawn
        bar.write(line, file=stream)
        stream.flush()
        return
    print(line, file=stream, flush=True)

