"""Small statistics the measurement and analysis layers share. Pure functions of numbers."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    """The q-th percentile (0..100, linear interpolation); None for no values.

    The same figure as ``np.percentile``, from a partial sort: numpy 2's percentile imports
    ``numpy.ma`` (about 15 ms) on its first call, which a short analysis or the first window
    of a run would pay.
    """
    if len(values) == 0:
        return None
    a = np.asarray(values, dtype=np.float64)
    low, high, t = _bracket(len(a), q)
    part = np.partition(a, (low, high))
    if np.isnan(part[-1]):  # NaN sorts last; numpy's percentile of data with NaN is NaN
        return math.nan
    return _interpolate(float(part[low]), float(part[high]), t)


def _bracket(n: int, q: float) -> tuple[int, int, float]:
    """The ranks either side of the q-th percentile of n values, and where it lies between."""
    position = (n - 1) * (q / 100.0)
    low = math.floor(position)
    return low, min(low + 1, n - 1), position - low


def _interpolate(low: float, high: float, t: float) -> float:
    """numpy's linear interpolation, for the same last bit: from the nearer neighbour."""
    span = high - low
    return high - span * (1.0 - t) if t >= 0.5 else low + span * t


def median(values: Sequence[float] | np.ndarray) -> float | None:
    """The median (``np.median``: the mean of the middle two of an even count); None for no
    values. From a partial sort, for the reason :func:`percentile` gives."""
    n = len(values)
    if n == 0:
        return None
    half = n // 2
    part = np.partition(np.asarray(values, dtype=np.float64), (half - 1, half) if n > 1 else 0)
    if np.isnan(part[-1]):
        return math.nan
    return float(part[half]) if n % 2 else (float(part[half - 1]) + float(part[half])) / 2


def per_s(count: float | None, seconds: float | None) -> float | None:
    """A rate: ``count`` per second of ``seconds``; None when either is unknown or the time is
    not positive."""
    if count is None or seconds is None or not seconds > 0:
        return None
    return count / seconds


def share_pct(part: float | None, whole: float | None) -> float | None:
    """A share: 100·part/whole; None when either is unknown or the whole is not positive."""
    if part is None or whole is None or not whole > 0 or not math.isfinite(whole):
        return None
    return 100.0 * part / whole


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
    excused: np.ndarray | None = None,
) -> int | None:
    """Index of the first step of the steady state, or None if none is visible yet.

    The steady reference is the median of the second half of the steps. The steady state
    starts at the first step ``i >= 1`` (the first step is always warm-up: it pays for lazy
    initialisation, allocator growth and loader start-up) that is itself within
    ``(1 + tolerance)`` times the reference and from which the median of the next
    ``run_length`` steps is too. The median lets a noisy step or two through (a loaded
    machine), while warm-up steps, slow one after another, keep it high; a stall later in the
    run does not move the start back.

    ``excused`` marks the steps whose slowness is not the process's own (other processes
    took the CPU): they count as steady, whatever their time, and stay out of the reference
    when enough others are left; warm-up then ends where the process's own warm-up ends.
    """
    n = len(step_s)
    run = min(run_length, max(1, n // 4))
    if n < 2 * run + 1:
        return None
    times = np.asarray(step_s, dtype=np.float64)
    later = times[n // 2 :]
    if excused is not None:
        own = later[~excused[n // 2 :]]
        later = own if own.size >= run else later
    limit = (median(later) or 0.0) * (1.0 + tolerance)
    if excused is not None:
        times = np.where(excused, np.minimum(times, limit), times)
    windows = np.lib.stride_tricks.sliding_window_view(times, run)  # windows[i] = times[i:i+run]
    # the median of each window from a partition, without np.median's checks (and import)
    half = run // 2
    if run % 2:
        medians = np.partition(windows, half, axis=1)[:, half]
    else:
        middle = np.partition(windows, (half - 1, half), axis=1)
        medians = (middle[:, half - 1] + middle[:, half]) / 2
    steady = (medians <= limit) & (times[: len(windows)] <= limit)
    starts = np.flatnonzero(steady[1:])
    if starts.size == 0:
        return None
    return int(starts[0]) + 1


class Ema:
    """A bias-corrected exponential moving average (as Adam corrects its moments), fed a block
    of values at a time.

    ``beta`` is the weight of the past (0 ≤ beta < 1). The bias correction makes the first
    smoothed value equal the first observation instead of ``(1 - beta)`` times it, so a target
    is not "reached" early just because the average started at zero.
    """

    def __init__(self, beta: float) -> None:
        self.beta = beta
        self._acc = 0.0  # the uncorrected average so far
        self._count = 0

    def extend(self, values: np.ndarray) -> np.ndarray:
        """The smoothed values of the next ``values``, vectorized.

        Block by block, the recurrence ``acc = beta·acc + (1-beta)·v`` is a cumulative sum of
        ``v·beta^-m`` scaled back by ``beta^k``; blocks stay short enough that ``beta^-m``
        never overflows, and each carries the last value of the one before.
        """
        v = np.asarray(values, dtype=np.float64)
        n, beta = v.size, self.beta
        if n == 0:
            return np.empty(0)
        if beta == 0.0:
            self._count += n
            return np.array(v, copy=True)
        block = max(1, min(4096, int(250.0 / -math.log10(beta))))
        k = np.arange(float(block))
        grow, shrink, carried = beta**-k, (1.0 - beta) * beta**k, beta ** (k + 1.0)
        acc = np.empty(n)
        carry = self._acc
        for start in range(0, n, block):
            m = min(block, n - start)
            acc[start:start + m] = carried[:m] * carry + shrink[:m] * np.cumsum(
                v[start:start + m] * grow[:m])
            carry = float(acc[start + m - 1])
        self._acc = carry
        counts = np.arange(self._count + 1.0, self._count + n + 1.0)
        self._count += n
        return acc / (1.0 - beta**counts)


def ema_array(values: np.ndarray, beta: float) -> np.ndarray:
    """The bias-corrected EMA of ``values`` (see :class:`Ema`)."""
    return Ema(beta).extend(values)


def mean_known(values: Iterable[float | None]) -> float | None:
    """The mean of the values that are not None; None when there are none, or when the mean
    is not finite (an inf or NaN among them)."""
    known = [float(v) for v in values if v is not None]
    if not known:
        return None
    mean = sum(known) / len(known)
    return mean if math.isfinite(mean) else None


def binomial_tail(n: int, k_min: int, q: float) -> float:
    """P(X >= k_min) for X ~ Binomial(n, q), in floats at any ``n``.

    Exact integer binomial coefficients overflow a float past about 1,000 trials (and cost
    time in big integers long before). The tail is summed from the term nearest the mode
    outward: above the mode the upper tail itself, below it one less the lower tail. The
    first term is taken in logs, the others by the ratio of neighbouring terms, until they
    no longer change the sum (a first term that underflows is a tail too small to count).
    """
    if k_min <= 0:
        return 1.0
    if k_min > n or q <= 0.0:
        return 0.0
    if q >= 1.0:
        return 1.0
    upper = k_min > n * q
    k = k_min if upper else k_min - 1

    term = math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                    + k * math.log(q) + (n - k) * math.log1p(-q))
    odds = q / (1.0 - q)
    total = 0.0
    while 0 <= k <= n:
        total += term
        if term <= total * 1e-17:  # moving away from the mode: the terms only shrink
            break
        if upper:
            term *= (n - k) / (k + 1) * odds
            k += 1
        else:
            term *= k / ((n - k + 1) * odds)
            k -= 1
    return min(1.0, total) if upper else max(0.0, 1.0 - total)
