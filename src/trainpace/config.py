"""The Meter's settings: one frozen dataclass, validated when it is made."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trainpace.errors import ConfigError

WarmupSetting = int | Literal["auto"]


@dataclass(frozen=True, kw_only=True)
class MeterConfig:
    """Settings of a :class:`trainpace.Meter`. Every check names the key and the bad value."""

    out: Path | None = None
    """Run folder to write (meta.json, steps.jsonl, system.jsonl, summary.json); None: none."""
    window: int = 100
    """Steps per tumbling window: the console line, the TensorBoard points and file flushes."""
    warmup: WarmupSetting = "auto"
    """Steps excluded from the steady figures: a count, or "auto" (until step time is steady)."""
    target_loss: float | None = None
    """Loss to time the run to (first time the smoothed loss is at or below it)."""
    smoothing: float = 0.9
    """EMA weight of the past for the value timed to a target (0: the raw value)."""
    samples: Callable[[Any], int] | None = None
    """Override: the number of samples in a batch."""
    tokens: Callable[[Any], int] | None = None
    """Override: the number of tokens in a batch."""
    device: str | None = None
    """Device whose clock times the steps: "cpu", "cuda[:i]", "mps"; None picks the accelerator."""
    tensorboard: Path | None = None
    """Folder for TensorBoard event files (needs the 'tensorboard' extra); None: off."""
    console: bool = True
    """Print one line per window (to stderr)."""
    report: bool = True
    """Print the report at finish (to stderr)."""
    sample_interval_s: float = 0.1
    """Background sampler period (device and host readings)."""
    count_flops: bool = True
    """Count FLOPs and bytes of one (warm-up) step, for MFU and the roofline."""
    flops_per_step: float | None = None
    """Override: FLOPs of one optimizer step (skips counting)."""
    profile_steps: tuple[int, int] | None = None
    """Capture a torch.profiler trace of steps [start, stop) and analyze it at the end."""
    run_id: str | None = None
    """Name of the run; defaults to the run folder's name or a timestamp."""

    def __post_init__(self) -> None:
        if not is_int_at_least(self.window, 1):
            raise ConfigError("window", self.window, "must be an integer >= 1")
        if self.warmup != "auto" and not is_int_at_least(self.warmup, 0):
            raise ConfigError("warmup", self.warmup, 'must be "auto" or an integer >= 0')
        if self.target_loss is not None and not _finite(self.target_loss):
            raise ConfigError("target_loss", self.target_loss, "must be a finite number")
        if not _finite(self.smoothing) or not 0.0 <= self.smoothing < 1.0:
            raise ConfigError("smoothing", self.smoothing, "must be in [0, 1)")
        for key in ("samples", "tokens"):
            value = getattr(self, key)
            if value is not None and not callable(value):
                raise ConfigError(key, value, "must be a callable taking a batch, or None")
        if self.device is not None and not _device_ok(self.device):
            raise ConfigError("device", self.device, 'must be "cpu", "cuda", "cuda:N" or "mps"')
        if not _finite(self.sample_interval_s) or self.sample_interval_s <= 0:
            raise ConfigError("sample_interval_s", self.sample_interval_s, "must be > 0")
        if self.flops_per_step is not None and (
            not _finite(self.flops_per_step) or self.flops_per_step <= 0
        ):
            raise ConfigError("flops_per_step", self.flops_per_step, "must be > 0")
        if self.profile_steps is not None and not _step_range(self.profile_steps):
            constraint = "must be (start, stop) with 1 <= start < stop"
            raise ConfigError("profile_steps", self.profile_steps, constraint)


def is_int_at_least(value: object, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _step_range(value: object) -> bool:
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and all(is_int_at_least(v, 1) for v in value)
        and value[0] < value[1]
    )


def _finite(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def _device_ok(device: object) -> bool:
    if not isinstance(device, str):
        return False
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda", "mps"):
        return False
    return index == "" or (kind == "cuda" and index.isdigit())
