"""Energy over the measured steps, from the sampler's rows: counters first, power samples next.

Sources, best first (the one used is always named):

- ``nvml_total_energy``: NVML's total-energy counter of each metered GPU (mJ since the driver
  loaded), differenced between the readings that bracket the measured steps. A counter that
  goes down was reset (a driver reload): the interval counts the new value, the energy since
  the reset, and the reset is counted.
- ``nvml_power_samples``: NVML's power readings integrated over time (trapezoids).
- ``rapl``: the CPU packages' and their DRAM's RAPL counters (µJ), with their wrap-around.
  They count the whole package, whatever else runs on it.

The figure for the measured steps is the mean power over the readings' span times the measured
time, so readings taken once a second (``system.jsonl``) serve as well as the live ones: a
counter's difference does not depend on how often it is read.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NVML_COUNTER = "nvml_total_energy"
NVML_POWER = "nvml_power_samples"
RAPL = "rapl"
NO_SOURCE = ("no energy source: no NVML energy counter or power readings (no NVIDIA GPU "
             "metered) and no readable RAPL counters (/sys/class/powercap)")


@dataclass(frozen=True, kw_only=True)
class EnergyReading:
    """Mean power over the readings that bracket a time span, and where it came from."""

    power_w_mean: float | None = None
    source: str | None = None
    span_s: float | None = None  # the readings' own span (the mean power's base)
    devices: int = 0  # GPUs (or RAPL zones) summed
    resets: int = 0  # counter resets seen (NVML)
    missing: str | None = None  # why there is no figure: the sources looked for

    def energy_j(self, seconds: float | None) -> float | None:
        """Energy over ``seconds`` at the mean power; None when either is unknown."""
        if self.power_w_mean is None or seconds is None:
            return None
        return self.power_w_mean * seconds


def energy_between(rows: Sequence[Mapping[str, Any]], t_start_s: float, t_end_s: float
                   ) -> EnergyReading:
    """Mean power from the best source in ``rows`` (sampler rows: ``t_s``, ``gpus``, ``rapl``)
    over the readings from the last one at or before ``t_start_s`` to the first one at or
    after ``t_end_s`` (the nearest inside when none brackets it)."""
    if not any(_has_source(row) for row in rows):
        return EnergyReading(missing=NO_SOURCE)
    span = _bracket(rows, t_start_s, t_end_s)
    if len(span) < 2:
        return EnergyReading(missing="fewer than two sampler readings over the measured steps")
    for reading in (_gpu_counter(span), _gpu_power(span), _rapl(span)):
        if reading is not None:
            return reading
    return EnergyReading(missing=NO_SOURCE)


def _has_source(row: Mapping[str, Any]) -> bool:
    if row.get("rapl"):
        return True
    return any(isinstance(gpu.get("energy_mj"), (int, float))
               or isinstance(gpu.get("power_w"), (int, float)) for gpu in row.get("gpus") or ())


def _bracket(rows: Sequence[Mapping[str, Any]], a: float, b: float) -> list[Mapping[str, Any]]:
    ordered = [row for row in rows if isinstance(row.get("t_s"), (int, float))]
    first = 0
    for i, row in enumerate(ordered):
        if row["t_s"] <= a:
            first = i
    last = len(ordered) - 1
    for i in range(len(ordered) - 1, -1, -1):
        if ordered[i]["t_s"] >= b:
            last = i
    return ordered[first:last + 1]


def _series(span: Iterable[Mapping[str, Any]], key: str) -> dict[Any, list[tuple[float, float]]]:
    """Per GPU index: (t_s, value) where the reading has ``key``."""
    out: dict[Any, list[tuple[float, float]]] = {}
    for row in span:
        for gpu in row.get("gpus") or ():
            value = gpu.get(key)
            if isinstance(value, (int, float)):
                out.setdefault(gpu.get("index"), []).append((float(row["t_s"]), float(value)))
    return out


def _gpu_counter(span: Sequence[Mapping[str, Any]]) -> EnergyReading | None:
    per_gpu = _series(span, "energy_mj")
    total_w, resets, span_s = 0.0, 0, None
    for points in per_gpu.values():
        if len(points) < 2 or points[-1][0] <= points[0][0]:
            return None  # one GPU without a usable counter: the next source, for all alike
        energy_mj = 0.0
        for (_, before), (_, after) in itertools.pairwise(points):
            if after >= before:
                energy_mj += after - before
            else:  # reset: the counter restarted from zero
                energy_mj += after
                resets += 1
        seconds = points[-1][0] - points[0][0]
        total_w += energy_mj / 1e3 / seconds
        span_s = seconds if span_s is None else max(span_s, seconds)
    if not per_gpu:
        return None
    return EnergyReading(power_w_mean=total_w, source=NVML_COUNTER, span_s=span_s,
                         devices=len(per_gpu), resets=resets)


def _gpu_power(span: Sequence[Mapping[str, Any]]) -> EnergyReading | None:
    per_gpu = _series(span, "power_w")
    total_w, span_s = 0.0, None
    for points in per_gpu.values():
        seconds = points[-1][0] - points[0][0] if len(points) >= 2 else 0.0
        if seconds <= 0:
            return None
        joules = sum((t1 - t0) * (p0 + p1) / 2
                     for (t0, p0), (t1, p1) in itertools.pairwise(points))
        total_w += joules / seconds
        span_s = seconds if span_s is None else max(span_s, seconds)
    if not per_gpu:
        return None
    return EnergyReading(power_w_mean=total_w, source=NVML_POWER, span_s=span_s,
                         devices=len(per_gpu))


def _rapl(span: Sequence[Mapping[str, Any]]) -> EnergyReading | None:
    zones: dict[str, list[tuple[float, int, int]]] = {}
    for row in span:
        for zone, value in (row.get("rapl") or {}).items():
            if isinstance(value, (list, tuple)) and len(value) == 2:
                zones.setdefault(zone, []).append((float(row["t_s"]), int(value[0]),
                                                   int(value[1])))
    total_w, span_s = 0.0, None
    for points in zones.values():
        seconds = points[-1][0] - points[0][0] if len(points) >= 2 else 0.0
        if seconds <= 0:
            return None
        energy_uj = 0
        for (_, before, _), (_, after, wrap) in itertools.pairwise(points):
            delta = after - before
            energy_uj += delta if delta >= 0 else delta + wrap  # the counter wrapped
        total_w += energy_uj / 1e6 / seconds
        span_s = seconds if span_s is None else max(span_s, seconds)
    if not zones:
        return None
    return EnergyReading(power_w_mean=total_w, source=RAPL, span_s=span_s, devices=len(zones))
