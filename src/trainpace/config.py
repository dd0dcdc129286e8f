"""The Meter's settings: one frozen dataclass, validated when it is made.

Each setting is written here once: its name, type, default and meaning. The Meter takes them
as keywords (:meth:`MeterConfig.of`); its signature, its docstring's list of settings and the
``config`` section of ``meta.json`` are made from these fields.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trainpace.errors import ConfigError
from trainpace.jsonsafe import json_safe

WarmupSetting = int | Literal["auto"]


def half_window(window: int) -> int:
    """The steps into a window of ``window`` steps at which its middle comes (the Meter's first
    hand-over in it): half of them, at least one."""
    return max(window // 2, 1)


@dataclass(frozen=True, kw_only=True)
class MeterConfig:
    """Settings of a :class:`trainpace.Meter`. Every check names the key and the bad value."""

    out: Path | None = None
    """Run folder to write (meta.json, steps.jsonl, system.jsonl, summary.json); None: none.
    An existing run is never overwritten: a restart of the same command whose run there did not
    finish continues the job (the earlier run moved into ``runs/<run_id>/``); anything else goes
    to ``out-2``, ``out-3``... instead (``TRAINPACE_JOB=continue|new`` overrides)."""
    window: int = 100
    """Steps per tumbling window: the console line, the TensorBoard points and file flushes."""
    warmup: WarmupSetting = "auto"
    """Steps excluded from the steady figures: a count, or "auto" (until step time is steady)."""
    target_loss: float | None = None
    """Loss to time the run to (first time the smoothed loss is at or below it)."""
    smoothing: float = 0.9
    """EMA weight of the past for the value timed to a target (0: the raw value)."""
    samples: Callable[[Any], int] | None = None
    """Override: ``batch -> int``, the number of samples in a batch."""
    tokens: Callable[[Any], int] | None = None
    """Override: ``batch -> int``, the number of tokens in a batch."""
    device: str | None = None
    """Device whose clock times the steps: "cpu", "cuda[:i]", "mps"; None picks the accelerator."""
    tensorboard: Path | None = None
    """Folder for TensorBoard event files (needs the 'tensorboard' extra); None: off."""
    wandb: Any = None
    """W&B: True (the active run, else a new one) or a run object (``wandb.init()``); None: off
    (these four are checked by :func:`trainpace.sinks.options.check_options`)."""
    mlflow: bool | str | None = None
    """MLflow: True (the active run, else a new one) or a tracking URI; None: off."""
    prometheus: int | None = None
    """Prometheus: the port of an exporter to serve the window figures on; None: off."""
    prometheus_host: str | None = None
    """The address the Prometheus exporter listens on (default 127.0.0.1)."""
    rank_figures: bool = False
    """Under DDP, the dashboards (and the framework loggers) show the job's figures, from rank
    0; True: each rank's own figures too, under ``trainpace/rank{r}/`` (Prometheus: its
    ``rank`` label)."""
    console: bool = True
    """Print one line per window (to ``stream``, default stderr)."""
    report: bool = True
    """Print the report at finish (to ``stream``, default stderr)."""
    sample_interval_s: float | None = None
    """Background sampler period (device and host readings); None: 0.1 s where a GPU is read,
    1 s where the host alone is (see :func:`~trainpace.measure.vitals.default_interval_s`)."""
    count_flops: bool = True
    """Count FLOPs and bytes of one (warm-up) step, for MFU and the roofline."""
    flops_per_step: float | None = None
    """Override: FLOPs of one optimizer step (they replace the counted FLOPs; bytes are still
    counted for the roofline)."""
    profile_steps: tuple[int, int] | None = None
    """Capture a torch.profiler trace of steps [start, stop) and analyze it at the end."""
    peaks: Mapping[str, Any] | None = None
    """Your device's peaks, over the spec table and measured ceilings:
    ``{"bandwidth_gb_s": 900, "tflops": {"bf16": 120}}``."""
    dtype: str | None = None
    """The dtype whose peak MFU is measured against (default: the one that carried most of the
    counted FLOPs)."""
    run_id: str | None = None
    """Name of the run; defaults to the run folder's name or a timestamp."""
    price_per_hour: float | None = None
    """Price of one device-hour (any currency; reported as USD): the run's cost, per million
    samples and tokens, and to the target (times the devices of a distributed run)."""
    grid_g_per_kwh: float | None = None
    """Grid carbon intensity (gCO2 per kWh) for the CO2 figure; never guessed."""
    rated_power_w: float | None = None
    """A device's rated power, used for energy only where no counter or power reading exists
    (the figures are then labelled an estimate)."""
    tune_loader_s: float | None = None
    """At finish, when the data wait is a finding and the loop's DataLoader is known: measure
    its settings for up to this many seconds (:func:`trainpace.tune_loader`) and put what was
    measured into the finding's advice. None: say the tuner's command instead."""
    checkpoints: bool = False
    """Time ``torch.save``/``torch.load`` and ``torch.distributed.checkpoint``'s save/load into
    the job's ledger (``job.jsonl`` in ``out``): they are replaced while the run lasts and
    restored at finish (``trainpace run`` always does this)."""
    sink_timeout_s: float = 5.0
    """At finish, the most time each sink (``sinks=``, TensorBoard, console...) gets to take
    its last records; a sink still busy then is abandoned with a warning."""

    def __post_init__(self) -> None:
        _normalize(self)
        for key in ("out", "tensorboard"):
            folder = getattr(self, key)
            if folder is not None and folder.exists() and not folder.is_dir():
                raise ConfigError(key, str(folder), "must be a folder, but it is a file")
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
        if self.sample_interval_s is not None and (
                not _finite(self.sample_interval_s) or self.sample_interval_s <= 0):
            raise ConfigError("sample_interval_s", self.sample_interval_s, "must be > 0")
        if self.flops_per_step is not None and (
            not _finite(self.flops_per_step) or self.flops_per_step <= 0
        ):
            raise ConfigError("flops_per_step", self.flops_per_step, "must be > 0")
        if self.profile_steps is not None and not _step_range(self.profile_steps):
            constraint = "must be (start, stop) with 1 <= start < stop"
            raise ConfigError("profile_steps", self.profile_steps, constraint)
        if self.peaks is not None:
            from trainpace.devices.specs import override_peaks

            override_peaks(self.peaks)  # a bad override fails here, not mid-training
        if self.dtype is not None:
            from trainpace.devices.specs import canonical_dtype

            canonical_dtype(self.dtype)
        if self.run_id is not None and not isinstance(self.run_id, str):
            raise ConfigError("run_id", self.run_id, "must be a string or None")
        if self.tune_loader_s is not None and (not _finite(self.tune_loader_s)
                                               or self.tune_loader_s <= 0):
            raise ConfigError("tune_loader_s", self.tune_loader_s, "must be a number > 0, or None")
        for key in ("price_per_hour", "grid_g_per_kwh", "rated_power_w"):
            value = getattr(self, key)
            if value is not None and (not _finite(value) or value < 0):
                raise ConfigError(key, value, "must be a finite number >= 0, or None")
        if not isinstance(self.checkpoints, bool):
            raise ConfigError("checkpoints", self.checkpoints, "must be True or False")
        if not _finite(self.sink_timeout_s) or self.sink_timeout_s < 0:
            raise ConfigError("sink_timeout_s", self.sink_timeout_s, "must be a number >= 0")

    @classmethod
    def of(cls, **settings: Any) -> MeterConfig:
        """The config of the keywords a Meter was given; one it does not know is named."""
        known = {field.name for field in dataclasses.fields(cls)}
        for key in settings:
            if key not in known:
                raise ConfigError(key, settings[key], "is not a Meter setting; the settings "
                                  f"are {', '.join(sorted(known))}")
        return cls(**settings)

    def meta(self) -> dict[str, Any]:
        """The settings as ``meta.json`` records them (JSON values; a callable by its name)."""
        return {field.name: json_safe(getattr(self, field.name))
                for field in dataclasses.fields(self)}


def _normalize(config: MeterConfig) -> None:
    """Accept the spellings a user writes (a str path, a list, a torch.device) as their type."""
    for key in ("out", "tensorboard"):
        value = getattr(config, key)
        if isinstance(value, (str, os.PathLike)):
            # Resolved once, now: a script that changes directory later (Hydra, os.chdir)
            # still writes where it asked.
            object.__setattr__(config, key, Path(os.path.abspath(value)))
        elif value is not None and not isinstance(value, Path):
            raise ConfigError(key, value, "must be a folder path (str or Path) or None")
    if isinstance(config.profile_steps, list):
        object.__setattr__(config, "profile_steps", tuple(config.profile_steps))
    if config.device is not None and not isinstance(config.device, str):
        object.__setattr__(config, "device", str(config.device))  # a torch.device


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
