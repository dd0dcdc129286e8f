import pytest

from trainpace.sampling.aggregates import SeriesSet


def _series(points, start=0.0, **kwargs):
    """One metric "v" read at (t, value): each reading covers the time since the previous one."""
    series = SeriesSet(**kwargs)
    series.start(start)
    for t, value in points:
        series.add(t, {"v": value})
    return series


def test_time_weighted_mean_over_uneven_intervals():
    # 10 for 1 s, 40 for 2 s, 100 for 1 s -> (10 + 80 + 100) / 4
    series = _series([(1.0, 10.0), (3.0, 40.0), (4.0, 100.0)])
    found = series.aggregate("v", 0.0, 4.0)
    assert found.mean == pytest.approx(190 / 4)
    assert (found.min, found.max, found.readings) == (10.0, 100.0, 3)


def test_window_edges_take_their_share():
    series = _series([(1.0, 10.0), (3.0, 40.0), (4.0, 100.0)])
    # [0.5, 2]: 0.5 s of 10 and 1 s of 40
    found = series.aggregate("v", 0.5, 2.0)
    assert found.mean == pytest.approx((0.5 * 10 + 1.0 * 40) / 1.5)
    assert (found.min, found.max, found.readings) == (10.0, 40.0, 2)


def test_unknown_readings_take_no_weight():
    series = _series([(1.0, 10.0), (2.0, None), (3.0, 30.0)])
    found = series.aggregate("v", 0.0, 3.0)
    assert found.mean == 20.0
    assert found.readings == 2
    assert series.aggregate("v", 1.2, 1.8) is None  # only the unknown reading there


def test_nan_is_unknown_and_empty_or_reversed_windows_are_none():
    series = _series([(1.0, float("nan")), (2.0, 5.0)])
    assert series.aggregate("v", 0.0, 2.0).mean == 5.0
    assert series.aggregate("v", 5.0, 6.0) is None
    assert series.aggregate("v", 2.0, 1.0) is None
    assert SeriesSet().aggregate("v", 0.0, 1.0) is None


def test_instantaneous_readings_count_when_inside_the_window():
    series = _series([(2.0, 7.0)], start=2.0)
    assert series.aggregate("v", 1.0, 3.0).mean == 7.0
    assert series.aggregate("v", 2.5, 3.0) is None


def test_halving_bounds_memory_and_keeps_aligned_means_exact():
    series = _series([(float(t), float(t % 7)) for t in range(1, 1001)], max_buckets=100)
    assert len(series) <= 100
    exact = sum(t % 7 for t in range(1, 1001)) / 1000
    found = series.aggregate("v", 0.0, 1000.0)
    assert found.mean == pytest.approx(exact)
    assert (found.min, found.max, found.readings) == (0.0, 6.0, 1000)
    # a window on merged-row boundaries stays exact too
    edge = int(series._end[0])
    assert edge > 1
    assert series.aggregate("v", 0.0, edge).mean == pytest.approx(
        sum(t % 7 for t in range(1, edge + 1)) / edge)


def test_a_window_cutting_a_merged_row_is_pro_rata():
    series = _series([(1.0, 0.0), (2.0, 10.0), (3.0, 0.0), (4.0, 10.0)], max_buckets=2)
    # the 3rd reading merged (0, 1] and (1, 2]; the 4th merged (0, 2] and (2, 3]
    assert len(series) == 2
    found = series.aggregate("v", 0.0, 1.0)
    assert found.mean == pytest.approx(10 / 3)  # the true value there was 0: resolution lost
    assert (found.min, found.max) == (0.0, 10.0)
    assert series.aggregate("v", 0.0, 4.0).mean == pytest.approx(5.0)  # whole rows stay exact


def test_many_metrics_and_one_that_appears_late():
    series = SeriesSet()
    series.start(0.0)
    series.add(1.0, {"a": 2.0, "b": None})
    series.add(3.0, {"a": 4.0, "b": 1.0})
    series.add(4.0, {"a": 4.0, "c": 9.0})  # "b" left out: unknown; "c" new
    assert series.names() == ["a", "b", "c"]
    assert series.aggregate("a", 0.0, 3.0).mean == pytest.approx((2 * 1 + 4 * 2) / 3)
    assert series.aggregate("b", 0.0, 4.0).mean == 1.0
    assert series.aggregate("b", 3.5, 4.0) is None
    assert series.aggregate("c", 0.0, 4.0).mean == 9.0
    assert series.aggregate("c", 0.0, 3.0) is None
    assert series.aggregate("d", 0.0, 3.0) is None


def test_growth_past_the_first_capacity_keeps_every_row():
    series = _series([(float(t), 1.0) for t in range(1, 301)])
    assert len(series) == 300
    assert series.aggregate("v", 0.0, 300.0).readings == 300


def test_bad_bucket_count():
    with pytest.raises(ValueError, match="max_buckets must be >= 2, got 1"):
        SeriesSet(max_buckets=1)


def test_readings_joining_the_table_in_blocks_give_the_same_figures(monkeypatch):
    from trainpace.sampling import aggregates as series_module

    def fill(pending_max):
        monkeypatch.setattr(series_module, "PENDING_MAX", pending_max)
        s = series_module.SeriesSet(max_buckets=16)
        s.start(0.0)
        for i in range(1, 101):  # halved several times on the way
            s.add(i * 0.1, {"a": float(i % 7), "b": None if i % 3 else float(i)})
        return s

    one, blocks = fill(1), fill(256)
    assert len(one) == len(blocks)
    for window in ((0.0, 10.0), (2.35, 7.1), (9.0, 9.05)):
        assert one.window(*window) == blocks.window(*window)
