from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from trainpace.stats import median, percentile

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
