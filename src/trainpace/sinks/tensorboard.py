"""TensorBoard: one scalar per vital sign per window, the tags of :mod:`trainpace.sinks.names`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainpace.errors import MissingDependencyError
from trainpace.runlog import Record
from trainpace.sinks.names import window_scalars, window_step


class TensorBoardSink:
    """Writes window figures as scalars into an event file under ``logdir``."""

    reads_steps = False  # the window figures only (see trainpace.sinks.base.Sink)
    shows_job = True  # under DDP: the job's figures, at rank 0 (see trainpace.meter.outputs)

    def __init__(self, logdir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise MissingDependencyError("TensorBoard logging", "tensorboard") from exc
        self.logdir = logdir
        self._writer: Any = SummaryWriter(log_dir=str(logdir))

    def log(self, record: Record) -> None:
        """Add the measured figures of a window (None is not a point: nothing is written)."""
        if record.kind != "window":
            return
        figures = record.data["window"]
        step = window_step(figures, record.step)
        for tag, value in window_scalars(figures).items():
            self._writer.add_scalar(tag, value, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()
