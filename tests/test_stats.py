from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainpace.stats import ema, ema_array, mean_known, median, percentile

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


@pytest.mark.parametrize("beta", [0.0, 0.5, 0.9, 0.99, 0.999])
def test_ema_array_is_the_loop_to_rounding(beta):
    values = np.random.default_rng(1).random(10_000) * 3
    assert np.allclose(ema_array(values, beta), ema(list(values), beta), rtol=1e-12, atol=0)
    assert ema_array(np.empty(0), beta).size == 0


def test_mean_known_skips_nones_and_refuses_a_non_finite_mean():
    assert mean_known([1.0, None, 3.0]) == 2.0
    assert mean_known([None, None]) is None
    assert mean_known([]) is None
    assert mean_known([1.0, float("inf")]) is None
