"""What the writer side knows of the run, and the summary made from it.

The steps as columns, the goal the run is timed to, the warm-up found so far and the
sampler's headline readings. The writer thread owns it while the run goes on; ``finish()``
after the writer has stopped.
"""

from __future__ import annotations

import dataclasses
import socket
from collections import deque
from typing import Any

import numpy as np
import torch

from trainpace.config import MeterConfig
from trainpace.measure.contention import HOST_COLUMNS, host_values, slowed_by_others
from trainpace.measure.cost import cost_of_run, measured_span
from trainpace.measure.summarize import Goal, TargetTracker, summarize, warmup_steps
from trainpace.measure.vitals import DeviceVitals
from trainpace.meter.meta import device_name, usable_cpus
from trainpace.series import StepSeries
from trainpace.summary import Device, Summary

# Sampler readings kept in memory for the diagnosis (about 3 hours at 10 Hz); all of them
# are in system.jsonl.
SYSTEM_ROWS_KEPT = 100_000
SYSTEM_ROW_KEYS = ("t_s", "device_util_pct", "memory_used_pct", "temperature_c",
                   "bandwidth_util_pct")
ENERGY_KEYS = ("index", "energy_mj", "power_w")  # of each GPU: the cost's energy
# the host readings the diagnosis reads over time (CPU contention, the loading's CPU demand)
SYSTEM_HOST_KEYS = ("system_cpu_pct", "process_cpu_pct", "main_cpu_pct", "main_demand_pct",
                    "workers_demand_pct", "job_cpu_pct")
# Window ends kept for the summary (steps.window_ends): an epoch each; beyond, not known.
WINDOW_ENDS_KEPT = 10_000


class RunState:
    """The run's steps and goal on the writer side; builds the summary."""

    def __init__(self, config: MeterConfig, device: torch.device, run_id: str, *,
                 cpu_count: int | None = None) -> None:
        self.config = config
        self.device = device
        self.run_id = run_id
        self.series = StepSeries()
        self.goal: Goal | None = (
            Goal(name="loss", value=float(config.target_loss), smoothing=config.smoothing)
            if config.target_loss is not None else None
        )
        # Follows the goal window by window (rebuilt when the goal changes).
        self.tracker = TargetTracker(self.goal) if self.goal is not None else None
        self.system_rows: deque[dict[str, Any]] = deque(maxlen=SYSTEM_ROWS_KEPT)
        # the same rows' CPU readings as columns, for the steps other processes slowed
        self._cpu_rows: dict[str, deque[float]] = {
            key: deque(maxlen=SYSTEM_ROWS_KEPT) for key in HOST_COLUMNS}
        self._cpu_count = cpu_count if cpu_count is not None else usable_cpus()
        self.loader: dict[str, Any] | None = None
        # the steps at which a window ended early (a loader ran out), in order; None once
        # there were more than WINDOW_ENDS_KEPT
        self.window_ends: list[int] | None = []
        self._warmup_count = 0
        self._warmup_at_steps = 0
        self._host = socket.gethostname()

    def follow(self, goal: Goal) -> None:
        """A new goal, followed from the run's first step."""
        self.goal = goal
        self.tracker = TargetTracker(goal)
        self.tracker.add(self.series)

    def window_ended(self, step: int) -> None:
        """A window ended early at ``step`` (a metered loader ran out): the loop's later
        window boundaries count from it, and the diagnosis places them so."""
        ends = self.window_ends
        if ends is None or (ends and ends[-1] >= step):
            return
        if len(ends) >= WINDOW_ENDS_KEPT:
            self.window_ends = None
        else:
            ends.append(step)

    def keep_system_rows(self, rows: list[dict[str, Any]]) -> None:
        kept = [_kept(row) for row in rows]
        self.system_rows.extend(kept)
        # a reading or two at a time: plain floats, no arrays (the diagnosis makes those)
        for values in map(host_values, kept):
            if values is not None:
                for column, value in zip(self._cpu_rows.values(), values, strict=True):
                    column.append(value)

    def slowed(self) -> np.ndarray | None:
        """Per step so far: did other processes take the CPU then (None: no readings)?"""
        columns = {name: np.fromiter(values, dtype=np.float64, count=len(values))
                   for name, values in self._cpu_rows.items()}
        return slowed_by_others(self.series.column("step_s"), self.series.column("t_s"),
                                columns, self._cpu_count)

    def warmup(self, *, final: bool = False) -> int:
        """Warm-up steps of the steps so far, the steps other processes slowed not counted
        as warm-up. Auto warm-up is found again each time the run doubles (and at the end):
        its cost stays negligible however long the run."""
        n = len(self.series)
        if final or n >= 2 * self._warmup_at_steps:
            slowed = self.slowed() if self.config.warmup == "auto" else None
            self._warmup_count = warmup_steps(self.series.column("step_s"), self.config.warmup,
                                              slowed)
            self._warmup_at_steps = n
        return self._warmup_count

    def summary(self, *, final: bool, end_s: float, t0: float | None, clock: str,
                tokens_counted: str | None, vitals: DeviceVitals | None) -> Summary:
        """The summary of the steps so far (``final``: of the run, its wall time to ``end_s``)."""
        slowed = self.slowed()
        summary = summarize(
            self.series,
            warmup=self.config.warmup,
            excluded=self.warmup(final=final),
            slowed=slowed,
            goal=self.goal,
            progress=self.tracker.progress() if self.tracker is not None else None,
            run_id=self.run_id,
            wall_s=(end_s - t0) if final and t0 is not None else None,
            clock=clock,
            tokens_counted=tokens_counted,
            loader=self.loader,
            host=self._host,
            window_ends=None if self.window_ends is None else list(self.window_ends),
        )
        if vitals is None:
            return self.costed(dataclasses.replace(
                summary, device=Device(kind=self.device.type, name=device_name(self.device))),
                self.series.column("t_s"))
        # Device figures over the measured steps: from the end of warm-up to the last step.
        t_s = self.series.column("t_s")
        t_start_s, t_end_s = measured_span(t_s, summary.steps.warmup)
        if not len(t_s):
            t_end_s = end_s - (t0 or end_s)
        device, bandwidth, flops, host = vitals.sections(
            t_start_s=t_start_s, t_end_s=t_end_s, step_s=summary.time.step_s_median,
            samples_per_s=summary.throughput.samples_per_s)
        summary = dataclasses.replace(summary, device=device, bandwidth=bandwidth, flops=flops,
                                      host=host)
        return self.costed(summary, t_s)

    def costed(self, summary: Summary, t_s: Any) -> Summary:
        """``summary`` with its cost section: the Meter's prices, the energy measured over the
        measured steps (``t_s``: the steps' ends) from the kept sampler rows."""
        config = self.config
        return dataclasses.replace(summary, cost=cost_of_run(
            summary, t_s, list(self.system_rows), price_per_hour=config.price_per_hour,
            grid_g_per_kwh=config.grid_g_per_kwh, rated_power_w=config.rated_power_w))


def _kept(row: dict[str, Any]) -> dict[str, Any]:
    """What the diagnosis and the energy figure read of a sampler row (kept for hours)."""
    kept = {key: row.get(key) for key in SYSTEM_ROW_KEYS}
    host = row.get("host") or {}
    kept.update({key: host.get(key) for key in SYSTEM_HOST_KEYS})
    gpus = row.get("gpus")
    if gpus:
        kept["gpus"] = [{key: gpu.get(key) for key in ENERGY_KEYS} for gpu in gpus]
    if row.get("rapl"):
        kept["rapl"] = row["rapl"]
    return kept

