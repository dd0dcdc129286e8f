"""Downsampling by extremes, a chunk at a time: the same points as over the whole series, and a
one-step spike survives in any chunk, at any bucket edge."""

import re

import numpy as np
import pytest

from trainpace.report.downsample import BUCKETS, CHUNK_POINTS, extreme_indices
from trainpace.report.html import tick_label
from trainpace.report.plots import Layer, Series, line_chart, stacked_chart


def reference_extremes(ys, buckets=BUCKETS):
    """The whole-series version: pad, reshape, argmin/argmax per bucket, in one go."""
    n = len(ys)
    if n <= 2 * buckets:
        return np.arange(n)
    size = -(-n // buckets)
    rows = -(-n // size)
    padded = np.full(rows * size, np.nan)
    padded[:n] = ys
    grid = padded.reshape(rows, size)
    finite = np.isfinite(grid)
    base = np.arange(rows) * size
    low = base + np.where(finite, grid, np.inf).argmin(axis=1)
    high = base + np.where(finite, grid, -np.inf).argmax(axis=1)
    empty = ~finite.any(axis=1)
    low[empty] = high[empty] = np.minimum(base[empty], n - 1)
    pairs = np.sort(np.stack([low, high], axis=1), axis=1).ravel()
    return pairs[np.concatenate(([True], pairs[1:] != pairs[:-1]))]


@pytest.mark.parametrize("n", [1_399, 1_401, CHUNK_POINTS * 3 + 17, 1_000_000])
def test_chunked_extremes_are_the_whole_series_extremes(n):
    rng = np.random.default_rng(n)
    ys = rng.standard_normal(n)
    ys[rng.integers(0, n, n // 50)] = np.nan
    ys[n // 3: n // 3 + 5_000] = np.nan  # whole buckets with no point
    assert np.array_equal(extreme_indices(ys), reference_extremes(ys))


@pytest.mark.parametrize("at", [0, CHUNK_POINTS - 1, CHUNK_POINTS, 654_321, 999_999])
def test_a_one_step_spike_in_a_million_survives_wherever_it_is(at):
    ys = np.full(1_000_000, 0.03)
    ys[at] = 2.0
    kept = extreme_indices(ys)
    assert at in kept.tolist() and len(kept) <= 2 * BUCKETS
    svg = line_chart([Series("step time", np.arange(1.0, 1_000_001.0), ys)], title="t",
                     x_label="step", y_label="s", robust=True, value_format="{:.4g} s")
    assert svg.count('class="clipped"') == 1
    assert "1 point above the scale (up to 2 s)" in svg


def test_a_stacked_spike_survives_and_is_marked_with_its_value():
    n = 1_000_000
    xs = np.arange(1.0, n + 1.0)
    wait = np.full(n, 0.01)
    rest = np.full(n, 0.02)
    wait[CHUNK_POINTS] = 1.5  # the first point of the second chunk
    svg = stacked_chart(xs, [Series("wait", xs, wait), Series("rest", xs, rest)], title="t",
                        x_label="step", y_label="s", robust=True, value_format="{:.4g} s")
    assert svg.count('class="clipped"') == 1
    assert f"total at {tick_label(float(CHUNK_POINTS + 1))}: 1.52 s" in svg
    assert "1 point above the scale (up to 1.52 s)" in svg


def test_layers_as_functions_draw_what_the_arrays_draw():
    n = CHUNK_POINTS * 2 + 1_234
    rng = np.random.default_rng(3)
    xs = np.arange(1.0, n + 1.0)
    a, b = rng.random(n), rng.random(n)
    a[::11] = np.nan  # NaN counts as 0
    b[5] = 40.0
    arrays = [Series("a", xs, a), Series("b", xs, b)]
    functions = [Layer("a", lambda lo, hi: a[lo:hi]), Layer("b", lambda lo, hi: b[lo:hi])]
    kwargs = {"title": "t", "x_label": "x", "y_label": "y", "robust": True}
    svg = stacked_chart(xs, functions, **kwargs)
    assert svg == stacked_chart(xs, arrays, **kwargs)
    # the total a chunk at a time is the whole arrays' column sums, to the last bit
    total = np.sum([np.nan_to_num(a), np.nan_to_num(b)], axis=0)
    frame_top = float(re.findall(r'text-anchor="end">([0-9.]+)</text>', svg)[-1])
    assert frame_top <= 1.5 * np.percentile(total, 95)


def test_a_layer_shorter_than_the_steps_is_an_error_not_a_wrong_chart():
    xs = np.arange(10.0)
    with pytest.raises(ValueError, match="inhomogeneous"):
        stacked_chart(xs, [Series("a", xs, np.ones(10)), Series("b", xs, np.ones(9))],
                      title="t", x_label="x", y_label="y")
