"""The rules' columns of a long run: views of the store where the values are the same, and the
diagnosis exactly what the straightforward copies give."""

import dataclasses
import tracemalloc

import numpy as np
import pytest

from trainpace.diagnosis import _context, diagnose, phases
from trainpace.diagnosis._context import Steps, finite_or, selection
from trainpace.measure.summarize import summarize
from trainpace.series import StepSeries
from trainpace.summary import Steps as Counts
from trainpace.summary import Summary


def varied_series(n, *, seed=0, gaps=False):
    """A run with what the rules look for: warm-up, a slow phase, periodic stalls, drift, a
    loss that diverges at the end, time outside the steps; ``gaps``: NaN step times and waits
    (hand-made records), so the measured steps are not one stretch."""
    rng = np.random.default_rng(seed)
    step_s = 0.02 * (1 + 0.05 * rng.standard_normal(n)).clip(0.5) * np.linspace(1.0, 1.3, n)
    step_s[:30] *= 5
    step_s[499::500] += 1.0
    a, b = n // 3, n // 3 + n // 20
    step_s[a:b] *= 3.0
    wait = step_s * 0.2 * (1 + 0.1 * rng.standard_normal(n)).clip(0.0)
    wait[a:b] *= 4
    t_s = np.cumsum(step_s)
    loss = 3.0 / (1.0 + np.arange(n) / 500)
    loss[-20:] = np.nan
    rows = []
    for i in range(n):
        rows.append({"step": i + 1, "t_s": float(t_s[i]), "step_s": float(step_s[i]),
                     "wait_s": float(wait[i]), "samples": 64, "tokens": 64 * (500 + i % 37),
                     "loss": None if np.isnan(loss[i]) else float(loss[i]),
                     "loss_nonfinite": bool(np.isnan(loss[i])),
                     "outside_s": 2.0 if i % 1000 == 999 else 0.0})
        if gaps and i % 97 == 5:
            rows[-1]["step_s"] = None
        if gaps and i % 89 == 7:
            rows[-1]["wait_s"] = None
    system = [{"t_s": float(t), "device_util_pct": 60.0, "memory_used_pct": 40.0,
               "host": {"system_cpu_pct": 95.0 if t_s[a] < t < t_s[b] else 50.0,
                        "process_cpu_pct": 100.0}} for t in t_s[::50]]
    return StepSeries.from_records(rows), system


def _copies(mask):  # the straightforward reference: every selection a copy
    return np.flatnonzero(mask)


def _where(values, fill):
    return np.where(np.isfinite(values), values, fill)


@pytest.mark.parametrize("gaps", [False, True])
def test_the_diagnosis_on_views_is_exactly_the_one_on_copies(monkeypatch, gaps):
    series, system = varied_series(30_000, gaps=gaps)
    summary = summarize(series, warmup="auto")
    meta = {"host": {"cpu_count": 4}}
    found = diagnose(summary, steps=series, system=system, meta=meta)
    monkeypatch.setattr(_context, "selection", _copies)
    monkeypatch.setattr(_context, "finite_or", _where)
    monkeypatch.setattr(phases, "selection", _copies)
    monkeypatch.setattr(phases, "finite_or", _where)
    reference = diagnose(summary, steps=series, system=system, meta=meta)
    assert repr(dataclasses.asdict(found)) == repr(dataclasses.asdict(reference))  # NaN too
    ids = {f.id for f in found.findings}
    assert {"slow_phase", "periodic_stall", "drift", "loss_nonfinite"} <= ids


def test_measured_steps_are_views_of_the_columns_when_they_are_one_stretch():
    series, _ = varied_series(5_000)
    c = _context.Context(Summary(steps=Counts(warmup=1)), series, None, {},
                         _context.Thresholds())
    times = c.times
    assert times.index == slice(1, 5_000)  # the first step is the warm-up
    assert np.shares_memory(times.step_s, series.column("step_s"))
    assert np.shares_memory(times.wait_s, series.column("wait_s"))
    assert times.step.dtype == np.int32 and times.step[0] == 2


def test_selection_and_known_or_against_the_copies():
    mask = np.array([False, True, True, True, False])
    assert selection(mask) == slice(1, 4)
    assert selection(np.zeros(3, dtype=bool)) == slice(0, 0)
    split = np.array([True, False, True])
    assert selection(split).tolist() == [0, 2]
    values = np.array([1.0, np.nan, np.inf, 2.0])
    assert finite_or(values, 0.0).tolist() == [1.0, 0.0, 0.0, 2.0]
    clean = np.array([1.0, 2.0])
    assert finite_or(clean, 0.0) is clean


def test_step_numbers_are_the_records_or_their_position():
    raw = np.array([3.0, np.nan, -1.0, 7.9, 0.0] * 30_000)  # over a chunk of steps
    steps = Steps(StepSeries.from_records({"step": s, "t_s": 1.0, "step_s": 1.0}
                                          for s in raw[:10].tolist()), warmup=0)
    assert steps.step.tolist() == [3, 2, 3, 7, 5, 3, 7, 8, 7, 10]
    index = np.arange(1, raw.size + 1, dtype=np.float64)
    expected = np.where(np.isnan(raw) | (raw <= 0), index, raw).astype(np.int64)
    assert (_context._step_numbers(raw) == expected).all()
    assert _context._step_numbers(np.array([3e9])).dtype == np.int64  # too large for int32


def test_diagnosing_a_long_run_costs_little_beside_its_columns():
    n = 200_000
    series, system = varied_series(n)
    summary = summarize(series, warmup="auto")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        diagnose(summary, steps=series, system=system, meta={})
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    # copies of the columns took 132 bytes a step (measured on this run before the views);
    # now ~37: the step numbers (4), masks (1 each), one median's partition at a time (8),
    # drift's steps without stalls (8)
    assert peak < 60 * n, peak / n


def test_a_hand_made_run_with_a_warmup_flag_inside_is_not_a_stretch():
    series, _ = varied_series(2_000)
    records = series.records()
    for r in records:
        r["warmup"] = r["step"] in (1, 2, 500)
    c = _context.Context(Summary(), records, None, {}, _context.Thresholds())
    assert isinstance(c.times.index, np.ndarray)
    assert 500 not in c.times.step.tolist() and len(c.times) == 1_997


def test_the_cli_verb_that_made_the_run_comes_from_meta():
    from diagnosis.helpers import ctx

    assert ctx(meta={"made_by": "run"}).made_by == "run"
    assert ctx(meta={"made_by": "meter"}).made_by is None
    assert ctx(meta={"made_by": "lightning"}).made_by == "lightning"
    assert ctx(meta={"made_by": "hf"}).made_by == "hf"
    # made_by is the truth where written: the argv is read only for runs older than it
    assert ctx(meta={"made_by": "meter", "argv": ["/venv/bin/trainpace", "run", "t.py"]}
               ).made_by is None
    assert ctx(meta={"argv": ["/venv/bin/trainpace", "demo", "--steps", "50"]}).made_by == "demo"
    assert ctx(meta={"argv": ["/venv/bin/trainpace", "run", "train.py"]}).made_by == "run"
    assert ctx(meta={"argv": ["train.py", "--epochs", "2"]}).made_by is None
    assert ctx(meta={"config": {"window": 14}}).window_steps == 14
    assert ctx().window_steps is None
