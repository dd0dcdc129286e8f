from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainpace.stats import Ema, ema_array, mean_known, median, per_s, percentile, share_pct

finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False)


@given(st.lists(finite, min_size=1, max_size=60), st.floats(min_value=0, max_value=100))
def test_percentile_is_numpys_to_the_last_bit(values: list[float], q: float) -> None:
    assert percentile(values, q) == float(np.percentile(values, q))


def test_percentile_edges() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 90) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert median([5.0, 1.0, 3.0]) == 3.0
    assert math.isnan(percentile([1.0, math.nan, 2.0], 50) or 0.0)


@given(st.lists(finite, min_size=1, max_size=60))
def test_median_is_numpys_to_the_last_bit(values: list[float]) -> None:
    assert median(values) == float(np.median(values))


def ema_loop(values, beta):
    """The definition, one value at a time: acc = beta·acc + (1-beta)·v, bias-corrected."""
    out, acc = [], 0.0
    for i, value in enumerate(values, start=1):
        acc = beta * acc + (1.0 - beta) * value
        out.append(acc / (1.0 - beta**i))
    return out


@pytest.mark.parametrize("beta", [0.0, 0.5, 0.9, 0.99, 0.999])
def test_ema_array_is_the_loop_to_rounding(beta):
    values = np.random.default_rng(1).random(10_000) * 3
    assert np.allclose(ema_array(values, beta), ema_loop(values, beta), rtol=1e-12, atol=0)
    assert ema_array(np.empty(0), beta).size == 0


@pytest.mark.parametrize("beta", [0.0, 0.9, 0.999])
def test_an_ema_fed_in_blocks_is_the_ema_of_them_all(beta):
    values = np.random.default_rng(2).random(9_000)
    ema = Ema(beta)
    blocks = [ema.extend(values[lo:hi]) for lo, hi in ((0, 1), (1, 100), (100, 5_000),
                                                         (5_000, 5_000), (5_000, 9_000))]
    assert np.allclose(np.concatenate(blocks), ema_loop(values, beta), rtol=1e-12, atol=0)


def test_the_first_smoothed_value_is_the_first_value():
    assert Ema(0.9).extend(np.array([4.0, 2.0])).tolist() == pytest.approx([4.0, 2.0 / 1.9 + 3.6 / 1.9])


def test_rates_and_shares_are_unknown_without_a_positive_time():
    assert per_s(30, 2.0) == 15.0 and share_pct(1.0, 4.0) == 25.0
    assert per_s(None, 2.0) is None and per_s(3, 0.0) is None and per_s(3, None) is None
    assert share_pct(None, 1.0) is None and share_pct(1.0, 0.0) is None
    assert share_pct(1.0, float("inf")) is None and share_pct(1.0, float("nan")) is None


def test_mean_known_skips_nones_and_refuses_a_non_finite_mean():
    assert mean_known([1.0, None, 3.0]) == 2.0
    assert mean_known([None, None]) is None
    assert mean_known([]) is None
    assert mean_known([1.0, float("inf")]) is None


def test_binomial_tail_matches_the_exact_sum_and_holds_at_any_size():
    import math

    from trainpace.stats import binomial_tail

    def exact(n, k, q):
        return sum(math.comb(n, j) * q**j * (1 - q) ** (n - j) for j in range(k, n + 1))

    for n, k, q in [(10, 3, 0.2), (50, 20, 0.3), (200, 5, 0.01), (300, 150, 0.5),
                    (100, 2, 0.3), (100, 31, 0.3), (600, 100, 0.2), (7, 7, 0.9)]:
        assert binomial_tail(n, k, q) == pytest.approx(exact(n, k, q), rel=1e-9, abs=1e-15)
    assert binomial_tail(100, 0, 0.3) == 1.0 and binomial_tail(100, 101, 0.3) == 0.0
    assert binomial_tail(5, 2, 0.0) == 0.0 and binomial_tail(5, 2, 1.0) == 1.0
    # far past a float's exact coefficients: the tails on either side of the mean
    assert binomial_tail(50_000, 30_000, 0.3) == 0.0  # 7,000 above the mean of 15,000
    assert binomial_tail(50_000, 100, 0.3) == 1.0
    assert binomial_tail(50_000, 15_000, 0.3) == pytest.approx(0.5017, abs=1e-3)
