from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from trainpace.trace import intervals as iv


def _set(*pairs: tuple[float, float]) -> iv.IntervalSet:
    return iv.union(np.array([p[0] for p in pairs], dtype=float),
                    np.array([p[1] for p in pairs], dtype=float))


def test_union_merges_overlapping_and_touching_intervals() -> None:
    starts, ends = _set((10, 20), (0, 5), (5, 7), (15, 30), (40, 41))
    assert starts.tolist() == [0, 10, 40]
    assert ends.tolist() == [7, 30, 41]
    assert iv.measure((starts, ends)) == 28


def test_union_of_nothing_is_empty() -> None:
    assert iv.measure(iv.union(np.zeros(0), np.zeros(0))) == 0.0


def test_intersect_and_subtract() -> None:
    a = _set((0, 10), (20, 30))
    b = _set((5, 25))
    both = iv.intersect(a, b)
    assert both[0].tolist() == [5, 20] and both[1].tolist() == [10, 25]
    only_a = iv.subtract(a, b)
    assert only_a[0].tolist() == [0, 25] and only_a[1].tolist() == [5, 30]
    assert iv.measure(iv.subtract(b, a)) == 10


def test_measure_within_windows() -> None:
    s = _set((0, 10), (20, 30))
    got = iv.measure_within(s, np.array([0, 5, 10, 25, 40]), np.array([30, 22, 20, 100, 50]))
    assert got.tolist() == [20, 7, 0, 5, 0]


def test_gaps_between_intervals() -> None:
    lo, hi = iv.gaps(_set((0, 10), (20, 30), (35, 36)))
    assert lo.tolist() == [10, 30] and hi.tolist() == [20, 35]


pairs = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 30)), max_size=25)


@given(pairs, pairs)
def test_algebra_agrees_with_a_unit_grid(a_raw: list[tuple[int, int]],
                                         b_raw: list[tuple[int, int]]) -> None:
    def grid(raw: list[tuple[int, int]]) -> np.ndarray:
        cells = np.zeros(240, dtype=bool)
        for s, d in raw:
            cells[s:s + d] = True
        return cells

    def to_set(raw: list[tuple[int, int]]) -> iv.IntervalSet:
        return iv.union(np.array([s for s, _ in raw], dtype=float),
                        np.array([s + d for s, d in raw], dtype=float))

    a, b = to_set(a_raw), to_set(b_raw)
    ga, gb = grid(a_raw), grid(b_raw)
    assert iv.measure(a) == ga.sum()
    assert iv.measure(iv.intersect(a, b)) == (ga & gb).sum()
    assert iv.measure(iv.subtract(a, b)) == (ga & ~gb).sum()
    assert iv.measure_within(a, np.array([50.0]), np.array([120.0]))[0] == ga[50:120].sum()
