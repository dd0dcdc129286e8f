"""Small statistics the measurement and analysis layers share. Pure functions of numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    """The q-th percentile (0..100, linear interpolation); None for no values."""
    if len(values) == 0:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def percentile_sorted(values: Sequence[float], q: float) -> float | None:
    """:func:`percentile` of values already sorted, in plain Python (fast for a window)."""
    if not values:
        return None
    position = (len(values) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)


def median(values: Sequence[float] | np.ndarray) -> float | None:
    """The median; None for no values."""
    return percentile(values, 50.0)


def ratio_pct(part: float | None, whole: float | None) -> float | None:
    """100·part/whole, or None when either is unknown or the whole is not positive."""
    if part is None or whole is None or whole <= 0 or not math.isfinite(whole):
        return None
    return 100.0 * part / whole


def ema(values: Sequence[float], beta: float) -> list[float]:
    """Bias-corrected exponential moving average (as Adam corrects its moments).

    ``beta`` is the weight of the past (0 ≤ beta < 1). The bias correction makes the first
    smoothed value equal the first observation instead of ``(1 - beta)`` times it, so a target
    is not "reached" early just because the average started at zero.
    """
    out: list[float] = []
    acc = 0.0
    for i, value in enumerate(values, start=1):
        acc = beta * acc + (1.0 - beta) * value
        out.append(acc / (1.0 - beta**i))
    return out


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float] | None:
    """Least-squares (slope, intercept) of ys against xs; None with < 2 distinct xs."""
    if len(xs) < 2 or len(xs) != len(ys):
        return None
    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    x_mean, y_mean = x.mean(), y.mean()
    denominator = float(((x - x_mean) ** 2).sum())
    if denominator <= 0.0:
        return None
    slope = float(((x - x_mean) * (y - y_mean)).sum()) / denominator
    return slope, float(y_mean - slope * x_mean)


def steady_start(
    step_s: Sequence[float] | np.ndarray,
    *,
    tolerance: float = 0.5,
    run_length: int = 5,
) -> int | None:
    """Index of the first step of the steady state, or None if none is visible yet.

    The steady reference is the median of the second half of the steps. The steady state
    starts at the first step ``i >= 1`` (the first step is always warm-up: it pays for lazy
    initialisation, allocator growth and loader start-up) that is itself within
    ``(1 + tolerance)`` times the reference and from which the median of the next
    ``run_length`` steps is too. The median lets a noisy step or two through (a loaded
    machine), while warm-up steps, slow one after another, keep it high; a stall later in the
    run does not move the start back.
    """
    n = len(step_s)
    run = min(run_length, max(1, n // 4))
    if n < 2 * run + 1:
        return None
    times = np.asarray(step_s, dtype=np.float64)
    limit = float(np.median(times[n // 2 :])) * (1.0 + tolerance)
    windows = np.lib.stride_tricks.sliding_window_view(times, run)  # windows[i] = times[i:i+run]
    if run % 2:  # the middle element of a partition is the median, without np.median's checks
        medians = np.partition(windows, run // 2, axis=1)[:, run // 2]
    else:
        medians = np.median(windows, axis=1)
    steady = (medians <= limit) & (times[: len(windows)] <= limit)
    starts = np.flatnonzero(steady[1:])
    if starts.size == 0:
        return None
    return int(starts[0]) + 1
