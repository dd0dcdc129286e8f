"""TensorBoard: one scalar per vital sign per window, units in the tag names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainpace.errors import MissingDependencyError
from trainpace.runlog import Record

# window figure -> (tag, multiplier); the tag carries the unit.
SCALARS: dict[str, tuple[str, float]] = {
    "samples_per_s": ("throughput/samples_per_s", 1.0),
    "tokens_per_s": ("throughput/tokens_per_s", 1.0),
    "step_s_median": ("time/step_median_ms", 1e3),
    "step_s_p90": ("time/step_p90_ms", 1e3),
    "wait_pct": ("data/wait_pct", 1.0),
    "device_util_pct": ("device/util_pct", 1.0),
    "memory_used_pct": ("device/memory_used_pct", 1.0),
    "temperature_c": ("device/temperature_c", 1.0),
    "bandwidth_util_pct": ("bandwidth/util_pct", 1.0),
    "loss": ("train/loss", 1.0),
    "eta_to_target_s": ("time/eta_to_target_s", 1.0),
}


class TensorBoardSink:
    """Writes window figures as scalars into an event file under ``logdir``."""

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
        step = figures.get("last_step") or record.step
        for key, (tag, scale) in SCALARS.items():
            value = figures.get(key)
            if value is not None:
                self._writer.add_scalar(tag, float(value) * scale, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()
