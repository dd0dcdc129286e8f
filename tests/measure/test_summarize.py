import math
from array import array

import numpy as np
import pytest

from trainpace.measure.summarize import (
    Goal,
    figures,
    summarize,
    summary_for_run,
    target_progress,
    warmup_steps,
)
from trainpace.records import STEP_FIELDS
from trainpace.runlog import RunData
from trainpace.series import StepSeries
from trainpace.stats import ema_array
from trainpace.summary import Device, Summary


def records(step_s, *, wait_s=0.0, samples=10, tokens=None, losses=None, outside_s=None):
    out, t = [], 0.0
    for i, s in enumerate(step_s):
        outside = outside_s[i] if outside_s is not None else None
        t += s + (outside or 0.0)
        out.append({
            "step": i + 1, "t_s": t, "step_s": s, "wait_s": wait_s, "exposed_wait_s": None,
            "h2d_s": None, "samples": samples, "tokens": tokens, "micro_batches": 1,
            "loss": losses[i] if losses else None, "metric": None,
            "outside_s": outside, "loss_nonfinite": False if losses else None,
        })
    assert all(set(r) == set(STEP_FIELDS) for r in out)
    return out


def test_auto_warmup_finds_the_slow_first_steps():
    step_s = np.array([0.5, 0.3, 0.2] + [0.01] * 50)
    assert warmup_steps(step_s, "auto") == 3


def test_auto_warmup_always_excludes_the_first_step():
    assert warmup_steps(np.array([0.01] * 40), "auto") == 1


def test_a_stall_after_warmup_does_not_extend_it():
    step_s = np.array([0.2] + [0.01] * 20 + [0.5] + [0.01] * 20)
    assert warmup_steps(step_s, "auto") == 1


def test_fixed_warmup_is_capped_by_the_steps_seen():
    assert warmup_steps(np.array([0.1] * 5), 3) == 3
    assert warmup_steps(np.array([0.1] * 2), 3) == 2


def test_steady_figures_exclude_warmup_exactly():
    series = StepSeries.from_records(records([1.0, 1.0] + [0.1] * 20, wait_s=0.02, samples=32))
    s = summarize(series, warmup=2)
    assert (s.steps.total, s.steps.warmup, s.steps.measured) == (22, 2, 20)
    assert s.throughput.samples_per_s == pytest.approx(320.0)
    assert s.throughput.steps_per_s == pytest.approx(10.0)
    assert s.data.wait_pct == pytest.approx(20.0)
    assert s.data.wait_s_per_step == pytest.approx(0.02)
    assert s.time.step_s_median == pytest.approx(0.1)
    assert s.time.warmup_s == pytest.approx(2.0)
    assert s.time.wall_s == pytest.approx(4.0)
    assert s.throughput.tokens_per_s is None
    assert s.ranks[0].samples_per_s == pytest.approx(320.0)


def test_percentiles_of_step_time():
    series = StepSeries.from_records(records([0.0] + [i / 100 for i in range(1, 11)]))
    s = summarize(series, warmup=1)
    assert s.time.step_s_median == pytest.approx(0.055)
    assert s.time.step_s_p90 == pytest.approx(0.091)


def test_tokens_per_second_when_every_step_has_tokens():
    series = StepSeries.from_records(records([0.5] * 5, tokens=1000))
    s = summarize(series, warmup=1, tokens_counted="non_padding")
    assert s.throughput.tokens_per_s == pytest.approx(2000.0)
    assert s.throughput.tokens_counted == "non_padding"


def test_time_to_target_is_the_first_smoothed_crossing():
    losses = [4.0, 3.0, 2.5, 2.0, 1.5, 1.2, 1.0, 0.9, 0.8, 0.7]
    series = StepSeries.from_records(records([0.5] * 10, losses=losses))
    goal = Goal(name="loss", value=1.5, smoothing=0.5)
    smoothed = ema_array(np.array(losses), 0.5).tolist()
    first = next(i for i, v in enumerate(smoothed) if v <= 1.5)
    progress = target_progress(series, goal)
    assert progress.steps_to_target == first + 1
    assert progress.time_to_target_s == pytest.approx(0.5 * (first + 1))
    # hand check of the bias-corrected EMA: the raw loss hits 1.5 at step 5, the EMA later
    assert first + 1 == 7


def test_higher_is_better_metric_target():
    series = StepSeries.from_records([
        {"step": i, "t_s": float(i), "step_s": 1.0, "metric": m}
        for i, m in enumerate([0.1, 0.5, 0.8, 0.95, 0.96], start=1)
    ])
    progress = target_progress(series, Goal(name="metric", value=0.9, higher_is_better=True,
                                            smoothing=0.0))
    assert progress.steps_to_target == 4
    assert progress.time_to_target_s == 4.0


def test_eta_extrapolates_the_recent_trend():
    # loss falls 0.1 per second, linearly; target 1.0 from 2.0 at t=10 s -> 10 s more
    losses = [3.0 - 0.1 * t for t in range(1, 11)]
    series = StepSeries.from_records(records([1.0] * 10, losses=losses))
    progress = target_progress(series, Goal(name="loss", value=1.0, smoothing=0.0))
    assert progress.time_to_target_s is None
    assert progress.eta_s == pytest.approx(10.0)


def test_no_eta_when_not_converging():
    series = StepSeries.from_records(records([1.0] * 10, losses=[2.0 + 0.01 * i for i in range(10)]))
    assert target_progress(series, Goal(name="loss", value=1.0)).eta_s is None


def test_window_figures_cover_only_the_window():
    recs = records([0.1] * 10 + [0.2] * 10, samples=4)
    w = figures(StepSeries.from_records(recs[10:]), warmup=1)
    assert (w["first_step"], w["last_step"], w["steps"], w["measured_steps"]) == (11, 20, 10, 10)
    assert w["samples_per_s"] == pytest.approx(20.0)


def test_a_windows_figures_are_the_summarys_over_the_same_steps():
    recs = records([0.9, 0.5] + [0.1 + 0.001 * (i % 7) for i in range(40)], wait_s=0.01,
                   samples=8, tokens=100, losses=[2.0 - 0.01 * i for i in range(42)])
    w = figures(StepSeries.from_records(recs), warmup=2)
    s = summarize(StepSeries.from_records(recs), warmup=2)
    # one function computes both: equal to the last bit
    assert w["samples_per_s"] == s.throughput.samples_per_s
    assert w["samples_per_s"] == pytest.approx(8 * 40 / sum(r["step_s"] for r in recs[2:]))
    assert w["tokens_per_s"] == s.throughput.tokens_per_s
    assert w["step_s_median"] == s.time.step_s_median
    assert w["step_s_p90"] == s.time.step_s_p90
    assert w["wait_pct"] == s.data.wait_pct


def test_nulls_stay_null_not_zero():
    s = summarize(StepSeries(), warmup="auto")
    d = s.to_dict()
    assert d["throughput"]["samples_per_s"] is None
    assert d["time"]["step_s_median"] is None
    # from steps alone where windows ended early is not known: null, not an empty list
    assert d["steps"] == {"total": 0, "warmup": 0, "measured": 0, "warmup_mode": "auto",
                          "slowed_by_others": None, "window_ends": None}
    assert d["throughput"]["steady_samples_per_s"] is None


def test_summary_for_a_killed_run_is_rebuilt_from_its_steps(tmp_path):
    steps = records([0.2] + [0.1] * 30, samples=8)
    stale = Summary(run_id="r", device=Device(kind="cpu", name="x"))  # written before any window
    run = RunData(tmp_path, {"run_id": "r", "config": {"warmup": 1}}, steps, [], stale)
    s = summary_for_run(run)
    assert s.steps.total == 31
    assert s.throughput.samples_per_s == pytest.approx(80.0)
    assert s.device.name == "x"  # the device part of the old summary is kept


def test_an_up_to_date_summary_is_kept(tmp_path):
    steps = records([0.1] * 3)
    current = Summary(run_id="r")
    current = current.__class__(**{**current.__dict__, "steps": current.steps.__class__(total=3)})
    run = RunData(tmp_path, {}, steps, [], current)
    assert summary_for_run(run) is current


def test_nan_free_json():
    s = summarize(StepSeries.from_records(records([0.1] * 3)), warmup=1)
    assert all(not (isinstance(v, float) and math.isnan(v)) for v in s.to_dict()["time"].values())


def test_auto_warmup_tolerates_noise_after_warmup():
    # warm-up of 3 slow steps, then steady 10 ms steps with a noisy 25 ms step in the first run
    step_s = np.array([0.5, 0.3, 0.2, 0.010, 0.025, 0.010, 0.011, 0.010] + [0.010] * 40)
    assert warmup_steps(step_s, "auto") == 3


def test_auto_warmup_does_not_start_on_a_fast_step_amid_slow_ones():
    step_s = np.array([0.5, 0.4, 0.01, 0.3, 0.2, 0.15] + [0.01] * 40)
    assert warmup_steps(step_s, "auto") == 6


def test_time_outside_the_steps_is_in_the_wall_time_and_out_of_throughput():
    # 10 steps of 0.1 s; one evaluation of 1 s between steps 5 and 6
    outside = [0.0] * 5 + [1.0] + [0.0] * 4
    s = summarize(StepSeries.from_records(records([0.1] * 10, outside_s=outside)), warmup=0)
    assert s.time.outside_steps_s == pytest.approx(1.0)
    assert s.time.wall_s == pytest.approx(2.0)
    assert s.time.outside_steps_pct == pytest.approx(50.0)
    assert s.throughput.samples_per_s == pytest.approx(100.0)  # 10 samples / 0.1 s
    assert s.time.step_s_median == pytest.approx(0.1)
    w = figures(StepSeries.from_records(records([0.1] * 10, outside_s=outside)), warmup=0)
    assert w["outside_s"] == pytest.approx(1.0)
    assert w["samples_per_s"] == pytest.approx(100.0)


def test_outside_time_unknown_without_a_metered_loader():
    s = summarize(StepSeries.from_records(records([0.1] * 4)), warmup=0)
    assert s.time.outside_steps_s is None and s.time.outside_steps_pct is None


def test_a_null_column_gives_the_figures_of_its_array_of_nan():
    # figures() skips the array of a column null throughout; the same column made of NaN
    # values one by one (an array, not one value) gives the same figures, exactly
    recs = records([0.5, 0.25, 0.125, 0.25], samples=None, losses=None)
    short = StepSeries.from_records(recs)
    assert short.null("tokens") and short.null("loss") and short.null("samples")
    assert not short.null("step_s")
    spelled = StepSeries.from_records(recs[:1])
    spelled._columns = {name: (array("d", [math.nan] * 4) if short.null(name)
                               else array("d", short.column(name)))
                        for name in STEP_FIELDS}
    spelled._n = 4
    assert not spelled.null("tokens")
    assert figures(short, 1) == figures(spelled, 1)
    assert figures(short, 1)["loss"] is None
    assert figures(short, 1)["loss_nonfinite_steps"] == 0
    assert figures(short, 1)["samples_per_s"] is None
    assert figures(StepSeries(), 0) == figures(StepSeries.from_records([]), 0)
