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


def _old_combine(a: iv.IntervalSet, b: iv.IntervalSet, keep: int) -> iv.IntervalSet:
    """The sweep as first written: a general union of the kept segments."""
    points = np.concatenate([a[0], a[1], b[0], b[1]])
    if len(points) == 0:
        return iv.empty()
    na, nb = len(a[0]), len(b[0])
    delta = np.concatenate([np.ones(na), -np.ones(na), np.full(nb, 2.0), np.full(nb, -2.0)])
    order = np.argsort(points, kind="stable")
    p = points[order]
    state = np.cumsum(delta[order])
    kept = (state[:-1] == keep) & (p[1:] > p[:-1])
    return iv.union(p[:-1][kept], p[1:][kept])


def _same(x: iv.IntervalSet, y: iv.IntervalSet) -> bool:
    return x[0].tolist() == y[0].tolist() and x[1].tolist() == y[1].tolist()


quarters = st.lists(st.tuples(st.integers(0, 800), st.integers(0, 120)), max_size=25)


@given(quarters, quarters)
def test_sweeps_give_what_the_unions_gave(a_raw: list[tuple[int, int]],
                                              b_raw: list[tuple[int, int]]) -> None:
    def to_set(raw: list[tuple[int, int]]) -> iv.IntervalSet:  # zero-length ones included
        return iv.union(np.array([s / 4 for s, _ in raw], dtype=float),
                        np.array([(s + d) / 4 for s, d in raw], dtype=float))

    a, b = to_set(a_raw), to_set(b_raw)
    assert _same(iv.intersect(a, b), _old_combine(a, b, 3))
    assert _same(iv.subtract(a, b), _old_combine(a, b, 1))
    lo, hi = np.array([10.0, 50.0, 0.0]), np.array([120.0, 40.0, 300.0])
    assert iv.measure_within(a, lo, hi).tolist() == (
        iv.covered_before(a, np.maximum(hi, lo)) - iv.covered_before(a, lo)).tolist()


def test_operations_on_nothing() -> None:
    a = _set((0, 10))
    assert len(iv.intersect(iv.empty(), a)[0]) == 0 and len(iv.intersect(a, iv.empty())[0]) == 0
    assert _same(iv.subtract(a, iv.empty()), a) and len(iv.subtract(iv.empty(), a)[0]) == 0


layers_raw = st.lists(quarters, min_size=0, max_size=5)


@given(quarters, layers_raw)
def test_paint_gives_what_a_chain_of_splits_gave(base_raw: list[tuple[int, int]],
                                                 layer_raws: list[list[tuple[int, int]]]) -> None:
    def to_set(raw: list[tuple[int, int]]) -> iv.IntervalSet:  # zero-length ones included
        return iv.union(np.array([s / 4 for s, _ in raw], dtype=float),
                        np.array([(s + d) / 4 for s, d in raw], dtype=float))

    base, layers = to_set(base_raw), [to_set(r) for r in layer_raws]
    chain, rest = [], base
    for layer in layers:  # as steps() first did it: intersect, then subtract what was taken
        taken = _old_combine(rest, layer, 3)
        chain.append(taken)
        rest = _old_combine(rest, taken, 1)
    chain.append(rest if layers else _old_combine(base, iv.empty(), 1))
    painted = iv.paint(base, layers)
    assert len(painted) == len(layers) + 1
    for got, want in zip(painted, chain, strict=True):
        assert _same(got, want)


def test_paint_by_hand() -> None:
    base = _set((0, 100))
    first, second, rest = iv.paint(base, [_set((10, 20), (50, 60)), _set((15, 55), (90, 120))])
    assert first[0].tolist() == [10, 50] and first[1].tolist() == [20, 60]
    assert second[0].tolist() == [20, 90] and second[1].tolist() == [50, 100]
    assert rest[0].tolist() == [0, 60] and rest[1].tolist() == [10, 90]
    assert all(len(x[0]) == 0 for x in iv.paint(iv.empty(), [base]))
