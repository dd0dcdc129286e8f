"""What a run costs, and what a faster one saves: arithmetic over measured figures.

Money comes only from a price the user gives (per device-hour, times the devices used: the
accelerators, or the hosts of a CPU job);
energy only from a measured source (:mod:`trainpace.measure.energy`), or from a rated power
the user gives, labelled an estimate; CO2 only from a grid intensity the user gives. Nothing is
guessed: a figure whose input is missing is None.

    $ per million tokens = price per device-hour x devices / 3600 / (tokens per second) x 1e6
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainpace.errors import ConfigError
from trainpace.measure.energy import EnergyReading, energy_between
from trainpace.summary import Cost, Summary

RATED_POWER = "rated_power"
J_PER_KWH = 3.6e6


def check_price(key: str, value: object) -> float | None:
    """A price or intensity as given by the user: None, or a finite number >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value) or value < 0:
        raise ConfigError(key, value, "must be a finite number >= 0")
    return float(value)


def priced_units(summary: Summary) -> int:
    """What a price per hour and a rated power are multiplied by: the accelerators (one per
    rank), or, on the CPU, the hosts (CPU processes share their host's cores and power)."""
    if summary.device.kind == "cpu":
        hosts = {entry.host for entry in summary.ranks if entry.host is not None}
        return max(1, len(hosts))
    return max(1, summary.world_size or 1)


def cost_of(summary: Summary, *, price_per_hour: float | None = None,
            grid_g_per_kwh: float | None = None, energy: EnergyReading | None = None,
            rated_power_w: float | None = None) -> Cost:
    """The ``cost`` section of ``summary`` from its steady figures (see the module docstring).

    ``energy`` is the measured mean power over the measured steps (all the run's devices);
    ``rated_power_w`` (per device) is used only when no source measured it, and says so.
    """
    price = check_price("price_per_hour", price_per_hour)
    grid = check_price("grid_g_per_kwh", grid_g_per_kwh)
    rated = check_price("rated_power_w", rated_power_w)
    devices = priced_units(summary)
    samples_per_s = _positive(summary.throughput.samples_per_s)
    tokens_per_s = _positive(summary.throughput.tokens_per_s)
    time = summary.time
    usd_per_s = price * devices / 3600.0 if price is not None else None

    power_w, source, missing, estimate = None, None, None, False
    if energy is not None and energy.power_w_mean is not None:
        power_w, source = energy.power_w_mean, energy.source
    elif rated is not None:
        power_w, source, estimate = rated * devices, RATED_POWER, True
    else:
        missing = energy.missing if energy is not None else "no sampler readings"
    energy_j = power_w * time.measured_s if power_w is not None and time.measured_s else None
    kwh = energy_j / J_PER_KWH if energy_j is not None else None
    return Cost(
        price_per_hour=price,
        usd_total=_times(usd_per_s, time.wall_s),
        usd_per_million_samples=_per_million(usd_per_s, samples_per_s),
        usd_per_million_tokens=_per_million(usd_per_s, tokens_per_s),
        usd_to_target=_times(usd_per_s, time.time_to_target_s),
        energy_j=energy_j,
        energy_j_per_sample=power_w / samples_per_s if power_w is not None and samples_per_s
        else None,
        energy_j_per_million_tokens=_per_million(power_w, tokens_per_s),
        power_w_mean=power_w,
        energy_source=source,
        kwh=kwh,
        co2_kg=kwh * grid / 1000.0 if kwh is not None and grid is not None else None,
        grid_g_per_kwh=grid,
        devices=devices,
        energy_missing=missing,
        energy_is_estimate=estimate,
    )


@dataclass(frozen=True, kw_only=True)
class Savings:
    """What the faster of two runs saves against the other, at one price."""

    price_per_hour: float | None
    usd_per_run: float | None  # to the target (or over the slower run's wall time at equal work)
    usd_per_million_tokens: float | None
    usd_per_million_samples: float | None
    kwh_per_run: float | None
    sooner_pct: float | None  # how much sooner the target is reached


def savings(winner: Summary, loser: Summary) -> Savings:
    """The winner's savings against the loser, from their (already computed) cost sections."""
    w, lo = winner.cost, loser.cost

    def less(a: float | None, b: float | None) -> float | None:
        return b - a if a is not None and b is not None else None

    tw, tl = winner.time.time_to_target_s, loser.time.time_to_target_s
    sooner = 100.0 * (tl - tw) / tl if tw is not None and tl else None
    kwh = None
    if w.power_w_mean is not None and lo.power_w_mean is not None and tw is not None and tl:
        kwh = (lo.power_w_mean * tl - w.power_w_mean * tw) / J_PER_KWH
    return Savings(
        price_per_hour=w.price_per_hour,
        usd_per_run=less(w.usd_to_target, lo.usd_to_target),
        usd_per_million_tokens=less(w.usd_per_million_tokens, lo.usd_per_million_tokens),
        usd_per_million_samples=less(w.usd_per_million_samples, lo.usd_per_million_samples),
        kwh_per_run=kwh,
        sooner_pct=sooner,
    )


def measured_span(t_s: Sequence[float] | np.ndarray, warmup: int) -> tuple[float, float]:
    """The measured steps' span on the run's clock: from the end of warm-up to the last step
    (``t_s``: each step's end)."""
    if not len(t_s):
        return 0.0, 0.0
    start = float(t_s[warmup - 1]) if 0 < warmup <= len(t_s) else 0.0
    return start, float(t_s[-1])


def cost_of_run(summary: Summary, t_s: Sequence[float] | np.ndarray,
                system: Sequence[Mapping[str, Any]], *, price_per_hour: float | None = None,
                grid_g_per_kwh: float | None = None, rated_power_w: float | None = None) -> Cost:
    """:func:`cost_of` with the energy of the measured steps taken from the sampler rows
    (a run folder's ``system.jsonl``, or the Meter's kept rows)."""
    start, end = measured_span(t_s, summary.steps.warmup)
    energy = energy_between(system, start, end) if system else None
    return cost_of(summary, price_per_hour=price_per_hour, grid_g_per_kwh=grid_g_per_kwh,
                   energy=energy, rated_power_w=rated_power_w)


def _positive(value: float | None) -> float | None:
    return value if value is not None and value > 0 else None


def _times(rate: float | None, seconds: float | None) -> float | None:
    return rate * seconds if rate is not None and seconds is not None else None


def _per_million(per_s: float | None, work_per_s: float | None) -> float | None:
    return per_s / work_per_s * 1e6 if per_s is not None and work_per_s else None
