"""Step-time anomaly rules: stalls, periodic slow steps, drift."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnosis.helpers import ctx, only, records
from trainpace.diagnosis import anomalies
from trainpace.diagnosis import periodic as period_search
from trainpace.diagnosis.drift import drift
from trainpace.diagnosis.thresholds import Thresholds
from trainpace.summary import Steps, Summary

# ---- step-time anomalies -------------------------------------------------------------------

def test_one_stall_over_three_medians():
    steps = records([0.1] * 15 + [0.31] + [0.1] * 14)
    v = only(anomalies.step_outliers(ctx(steps=steps)))
    assert v.finding.id == "stalls"
    ev = v.finding.evidence
    assert (ev["count"], ev["worst_step"], ev["period_steps"]) == (1, 16, None)
    assert ev["lost_s"] == pytest.approx(0.21)
    assert ev["lost_pct"] == pytest.approx(100 * 0.21 / 3.21)
    assert v.finding.severity == "warning"
    assert v.bottleneck == "host_overhead"
    assert ev["cause"] == "unknown"
    assert v.finding.advice[0].startswith(
        "the recorded signs do not tell the cause: the stalls are outside the loader, no host "
        "readings (system.jsonl) for them; a profiler trace over a stall "
        "(Meter(profile_steps=START:STOP)) shows where the time went")


def test_a_step_under_three_medians_is_not_a_stall():
    outcome = anomalies.step_outliers(ctx(steps=records([0.1] * 15 + [0.29] + [0.1] * 14)))
    assert outcome.verdicts == ()
    assert outcome.checked.startswith("no step over 3× the median (100 ms) in 30 steps")


def test_periodic_slow_steps_are_found_with_their_period():
    step_s = [0.2 if i % 10 == 0 else 0.1 for i in range(1, 61)]
    v = only(anomalies.step_outliers(ctx(steps=records(step_s))))
    assert v.finding.id == "periodic_stall"
    ev = v.finding.evidence
    assert (ev["period_steps"], ev["count"]) == (10, 6)
    assert ev["outlier_steps"] == [10, 20, 30, 40, 50, 60]
    assert ev["lost_pct"] == pytest.approx(100 * 0.6 / 6.6)
    assert v.finding.title.startswith("Periodic slow step every 10 steps: 6 steps took 200 ms instead of 100 ms")
    assert "checkpoint save" in v.finding.advice[0]


def test_periodic_stall_in_the_data_wait_points_at_the_loader():
    step_s = [0.5 if i % 8 == 0 else 0.1 for i in range(1, 41)]
    wait_s = [0.4 if i % 8 == 0 else 0.0 for i in range(1, 41)]
    v = only(anomalies.step_outliers(ctx(steps=records(step_s, wait_s))))
    assert v.finding.title.startswith("Periodic stall every 8 steps")
    assert v.bottleneck == "data_loading"
    assert v.finding.evidence["in_data_wait_pct"] == pytest.approx(100.0)
    assert "persistent_workers=True" in v.finding.advice[0]


def test_small_outlier_cost_is_info_without_a_bottleneck():
    step_s = [0.16 if i % 25 == 0 else 0.1 for i in range(1, 101)]  # 4 × 0.06 s of 10.24 s
    v = only(anomalies.step_outliers(ctx(steps=records(step_s))))
    assert v.finding.severity == "info"
    assert v.bottleneck is None


def periodic(steps, first=1, last=None, extra=None):
    spikes = {s: (extra or {}).get(s, 1.0) for s in steps}
    return period_search.periodic(spikes, first, last or max(steps), Thresholds())


def test_period_tolerates_one_step_of_jitter():
    assert periodic([10, 20, 31, 40]) == (10, [10, 20, 31, 40])
    assert periodic([10, 20, 35, 40]) is None
    assert periodic([1, 2, 3]) is None


def test_period_survives_unrelated_stalls_and_keeps_one_step_per_cycle():
    assert periodic([10, 20, 27, 30, 40, 50, 60]) == (10, [10, 20, 30, 40, 50, 60])
    # the step after each slow step is slow too (cold caches): one per cycle, the nearest
    assert periodic([10, 11, 20, 21, 30, 31, 40, 41]) == (10, [10, 20, 30, 40])


def test_the_period_that_explains_the_most_time_wins():
    # big stalls every 10 steps, smaller slow steps clustered after each (cold caches)
    slow = [10, 13, 14, 20, 23, 24, 30, 33, 34, 40, 43, 44, 50, 53, 54]
    extra = {s: 0.25 if s % 10 == 0 else 0.015 for s in slow}
    assert periodic(slow, extra=extra) == (10, [10, 20, 30, 40, 50])


def test_noise_between_periodic_stalls_does_not_halve_the_period():
    # stalls every 10 steps; on a loaded machine, slow steps also fall on the 5s in between
    slow = list(range(5, 61, 5))
    extra = {s: 0.25 if s % 10 == 0 else 0.02 for s in slow}
    assert periodic(slow, extra=extra) == (10, [10, 20, 30, 40, 50, 60])


def test_a_period_must_fill_most_of_its_places_in_the_run():
    assert periodic([10, 20, 30], last=200) is None  # 3 of the 20 places every 10 steps
    assert periodic([10, 20, 30, 40, 60, 70, 80, 90, 100], last=100) == (10, [10, 20, 30, 40, 60, 70, 80, 90, 100])


def test_period_search_is_bounded_on_a_noisy_run(monkeypatch):
    # the work is bounded by the number of candidate periods tried, whatever the spikes
    tried = []
    best_residue = period_search._best_residue

    def counted(spikes, period, tolerance):
        tried.append(period)
        return best_residue(spikes, period, tolerance)

    monkeypatch.setattr(period_search, "_best_residue", counted)
    rng = random.Random(0)
    steps = sorted(rng.sample(range(1, 100_000), 3000))
    assert periodic(steps, last=100_000) is None
    assert 0 < len(tried) <= period_search.PERIOD_CANDIDATES * (1 + len(period_search.BIG_SHARES))


def test_an_unrelated_stall_beside_a_periodic_one_is_its_own_finding():
    step_s = [0.1] * 60
    for i in (10, 20, 30, 40, 50, 60):
        step_s[i - 1] = 0.2
    step_s[26] = 0.5  # step 27
    outcome = anomalies.step_outliers(ctx(steps=records(step_s)))
    assert [v.finding.id for v in outcome.verdicts] == ["periodic_stall", "stalls"]
    assert outcome.verdicts[1].finding.evidence["outlier_steps"] == [27]


def test_warmup_steps_are_not_outliers_and_few_steps_are_skipped():
    steps = records([2.0, 1.0] + [0.1] * 20, warmup=2)
    assert anomalies.step_outliers(ctx(steps=steps)).verdicts == ()
    assert anomalies.step_outliers(ctx(steps=records([0.1] * 9))).skipped == "only 9 measured steps; the stall check needs 10"
    assert anomalies.step_outliers(ctx()).skipped.startswith("no per-step records")


def test_drift_at_ten_percent():
    step_s = [1.0] * 10 + [1.05] * 20 + [1.1] * 10
    v = only(drift(ctx(steps=records(step_s))))
    assert v.finding.id == "drift"
    assert v.finding.evidence["drift_pct"] == pytest.approx(10.0)
    # no host readings, no memory, no wait: the cause is said as unknown, with the signs
    assert v.finding.evidence["cause"] == "unknown"
    assert v.finding.advice[0].startswith("the recorded signs do not tell the cause: the data "
                                          "wait did not grow (0 µs of 100 ms); no host readings")
    assert "tensors kept" not in v.finding.advice[0]
    steady = drift(ctx(steps=records([1.0] * 10 + [1.05] * 20 + [1.099] * 10)))
    assert steady.verdicts == ()
    assert steady.checked.startswith("step time steady (+10% from 1 s to 1.1 s over 40 steps")


def test_drift_in_the_data_wait_says_so():
    step_s = [0.1] * 10 + [0.13] * 10
    wait_s = [0.0] * 10 + [0.03] * 10
    v = only(drift(ctx(steps=records(step_s, wait_s))))
    assert v.finding.advice[0].startswith("the growth is in the data wait")


def test_falling_step_time_hints_at_warmup():
    v = only(drift(ctx(Summary(steps=Steps(warmup=3)), steps=records([0.2] * 10 + [0.1] * 30))))
    assert v.finding.severity == "info"
    assert v.finding.advice[0].startswith("exclude more warm-up, e.g. Meter(warmup=12)")
    meta = {"argv": ["/venv/bin/trainpace", "run", "train.py"]}
    v = only(drift(ctx(Summary(steps=Steps(warmup=3)), steps=records([0.2] * 10 + [0.1] * 30),
                                 meta=meta)))
    assert v.finding.advice[0].startswith("exclude more warm-up, e.g. `trainpace run --warmup 12`")


def test_drift_ignores_stalls_and_needs_twenty_steps():
    step_s = [0.1] * 30 + [1.0]
    assert drift(ctx(steps=records(step_s))).verdicts == ()
    assert drift(ctx(steps=records([0.1] * 19))).skipped == "only 19 measured steps; the drift check needs 20"


def test_steps_within_the_summarys_warmup_are_not_measured():
    # records written before warm-up was decided say warmup=false; the summary knows better
    c = ctx(Summary(steps=Steps(warmup=5)), steps=records([1.0] * 5 + [0.1] * 30))
    assert c.times.step[0] == 6
    assert c.times.step_s.tolist() == [0.1] * 30


@given(period=st.integers(3, 200), offset=st.integers(0, 199), cycles=st.integers(4, 30),
       noise=st.lists(st.tuples(st.integers(1, 6000), st.floats(0.001, 0.05)), max_size=60))
@settings(max_examples=100, deadline=None)
def test_a_periodic_event_is_found_among_random_slow_steps(period, offset, cycles, noise):
    last = period * cycles
    events = dict.fromkeys(range(1 + offset % period, last + 1, period), 0.5)
    spikes = {s: extra for s, extra in noise if s <= last} | events
    found = period_search.periodic(spikes, 1, last, Thresholds())
    assert found is not None
    assert found[0] == period
    assert set(events) <= set(found[1])


def test_a_loss_that_stops_being_finite_is_critical_and_names_the_step():
    steps = records([0.1] * 30)
    for i, r in enumerate(steps, start=1):
        r["loss"] = None if i >= 17 else 2.0
        r["loss_nonfinite"] = i >= 17
    v = only(anomalies.loss_finite(ctx(steps=steps)))
    assert (v.finding.id, v.finding.severity) == ("loss_nonfinite", "critical")
    assert v.finding.evidence["first_step"] == 17
    assert v.finding.evidence["nonfinite_steps"] == 14
    assert v.finding.title == "The loss stopped being finite at step 17 (NaN or inf in 14 steps)"
    finite = records([0.1] * 5)
    for r in finite:
        r["loss"], r["loss_nonfinite"] = 1.5, False
    assert anomalies.loss_finite(ctx(steps=finite)).checked == "loss finite in every step (5 with a loss)"
    assert anomalies.loss_finite(ctx(steps=records([0.1] * 5))).skipped.startswith("no loss observed")


def _with_tokens(step_s, tokens):
    out = records(step_s)
    for r, n in zip(out, tokens, strict=True):
        r["tokens"] = n
    return out


def test_drift_blames_growing_inputs_only_when_the_work_per_step_grew():
    step_s = [1.0] * 10 + [1.1] * 20 + [1.2] * 10
    grown = only(drift(ctx(steps=_with_tokens(step_s, [1000] * 10 + [1100] * 20 + [1200] * 10))))
    assert grown.finding.advice[0].startswith("the inputs grew: the work per step (tokens, else samples) rose 20%")
    # variable-length batches whose typical size does not change: not "inputs that grow"
    lengths = [800, 1200, 1000] * 13 + [1000]
    v = only(drift(ctx(steps=_with_tokens(step_s, lengths))))
    assert "inputs that grow" not in v.finding.advice[0]
    assert v.finding.advice[0].startswith("the recorded signs do not tell the cause")
    assert "the work per step changed +0%" in v.finding.advice[0]


def test_a_long_run_as_columns_is_never_turned_into_records(monkeypatch):
    from trainpace.diagnosis import diagnose
    from trainpace.series import StepSeries

    n = 200_000
    series = StepSeries.from_records({"step": i, "t_s": i * 0.01, "step_s": 0.01,
                                      "wait_s": 0.0} for i in range(1, n + 1))
    monkeypatch.setattr(StepSeries, "records", lambda self: pytest.fail("turned into records"))
    d = diagnose(Summary(steps=Steps(total=n, warmup=0, measured=n)), steps=series)
    assert [f.id for f in d.findings] == ["checks"]


def host_rows(until_s, system_cpu_pct, process_cpu_pct, rss_gb, start_s=0.0, every_s=1.0):
    """Sampler rows (system.jsonl's shape) every ``every_s`` from ``start_s`` to ``until_s``."""
    out, t = [], start_s
    while t < until_s - 1e-9:
        t += every_s
        out.append({"t_s": t, "host": {"system_cpu_pct": system_cpu_pct,
                                       "process_cpu_pct": process_cpu_pct, "rss_gb": rss_gb}})
    return out


def test_a_drift_while_others_took_the_cpu_is_the_machines():
    # DCGAN's 10× jump at step 13 while other processes held the CPU (issue 25 §4)
    steps = records([0.1] * 12 + [1.0] * 28)
    system = (host_rows(1.2, 50.0, 100.0, 0.4, every_s=0.3)
              + host_rows(29.2, 100.0, 40.0, 0.4, start_s=1.2))
    v = only(drift(ctx(steps=steps, system=system, meta={"cpu_count": 2})))
    ev = v.finding.evidence
    assert ev["cause"] == "cpu_contention"
    assert ev["drift_pct"] == pytest.approx(900.0)
    assert ev["last_quarter_signs"]["others_pct"] == pytest.approx(80.0)
    assert ev["first_quarter_signs"]["others_pct"] == pytest.approx(0.0)
    assert v.finding.severity == "info" and v.bottleneck is None
    assert v.finding.advice == [
        "the machine's, not the step's: other processes took the CPU in the last quarter (the "
        "machine's CPU was 100% busy, this process had 20% of it; in the first quarter the "
        "machine's CPU was 50% busy, this process had 50% of it) — compare on a quiet machine; "
        "nothing in the code needs to change for it"]


def test_a_small_drift_on_a_quiet_machine_without_memory_growth_names_no_leak():
    # the demo's 11–16% drift got the leak text: memory steady, CPU quiet → cause unknown
    steps = records([0.1] * 20 + [0.115] * 20)
    system = host_rows(4.4, 50.0, 100.0, 0.41, every_s=0.2)
    v = only(drift(ctx(steps=steps, system=system, meta={"cpu_count": 2})))
    assert v.finding.evidence["cause"] == "unknown"
    assert v.finding.advice[0] == (
        "the recorded signs do not tell the cause: the data wait did not grow (0 µs of 15 ms); "
        "in the last quarter the machine's CPU was 50% busy, this process had 50% of it: no "
        "more contention than in the first; this process's memory 0.41 GB (from 0.41); the "
        "work per step changed +0% — a profiler trace of early and late steps "
        "(Meter(profile_steps=START:STOP)) shows where the time went")


def test_a_drift_with_the_process_memory_growing_names_tensors_kept():
    steps = records([0.1] * 20 + [0.13] * 20)
    system = host_rows(2.0, 50.0, 100.0, 0.4, every_s=0.2) + host_rows(
        4.6, 50.0, 100.0, 0.9, start_s=2.0, every_s=0.2)
    v = only(drift(ctx(steps=steps, system=system, meta={"cpu_count": 2})))
    assert v.finding.evidence["cause"] == "memory_growth"
    assert v.finding.advice[0].startswith(
        "this process's memory grew from 0.40 to 0.90 GB as the step slowed: tensors kept")


def test_a_period_equal_to_trainpaces_window_is_trainpaces_own():
    # every 14th step 10 ms slower, and the run's window is 14: trainpace's boundary work
    step_s = [0.02 if i % 14 == 0 else 0.01 for i in range(1, 71)]
    v = only(anomalies.step_outliers(ctx(steps=records(step_s), meta={"config": {"window": 14}})))
    ev = v.finding.evidence
    assert (ev["period_steps"], ev["cause"]) == (14, "trainpace_window")
    assert v.finding.severity == "info" and v.bottleneck is None
    assert v.finding.title.endswith(": trainpace's own window boundary")
    assert v.finding.advice == [
        "the slow steps fall on trainpace's own window boundary (every 14 steps, config.window): "
        "the 10 ms each time is trainpace's cost, its work at the boundary, not the training's; "
        "a larger window (Meter(window=28)) makes it rarer"]
    # from `trainpace run`, the flag
    meta = {"config": {"window": 14}, "argv": ["/venv/bin/trainpace", "run", "train.py"]}
    v = only(anomalies.step_outliers(ctx(steps=records(step_s), meta=meta)))
    assert "a larger window (`trainpace run --window 28`)" in v.finding.advice[0]
    # another window: the period is the user's
    v = only(anomalies.step_outliers(ctx(steps=records(step_s), meta={"config": {"window": 20}})))
    assert v.finding.evidence["cause"] == "unknown"
    assert v.finding.advice[0].startswith(
        "the recorded signs do not tell what costs 10 ms every 14 steps (not in the data wait, "
        "not trainpace's window (20 steps)): it is outside the loader; look in the loop for "
        "work every 14 steps — a checkpoint save")


def test_more_than_trainpaces_boundary_costs_at_its_period_is_the_loops():
    # a checkpoint saved every window's length of steps: 100 ms each time is far more than
    # trainpace's boundary work costs (trainpace_boundary_max_s), so it is the loop's
    step_s = [0.2 if i % 14 == 0 else 0.1 for i in range(1, 71)]
    v = only(anomalies.step_outliers(ctx(steps=records(step_s), meta={"config": {"window": 14}})))
    assert v.finding.evidence["cause"] != "trainpace_window"
    assert v.finding.severity != "info"


@pytest.mark.parametrize("phase", [1, 2, 3])
def test_trainpaces_window_period_is_its_own_at_any_phase(phase):
    # under DDP the writer's work and the window exchange land a step or two after the
    # boundary (issue 21: windows of 50, the step after each 2-11 ms slower): still trainpace's
    step_s = [0.018 if i % 50 == phase else 0.01 for i in range(1, 401)]
    v = only(anomalies.step_outliers(ctx(steps=records(step_s), meta={"config": {"window": 50}})))
    ev = v.finding.evidence
    assert (ev["period_steps"], ev["cause"]) == (50, "trainpace_window")
    assert (v.finding.severity, v.bottleneck) == ("info", None)
    assert v.finding.title == ("Periodic slow step every 50 steps: 8 steps took 18 ms instead of "
                               "10 ms (1.6% of the time): trainpace's own window boundary")
    assert v.finding.advice[0].startswith(
        "the slow steps fall on trainpace's own window boundary (every 50 steps, config.window): "
        "the 8 ms each time is trainpace's cost")
    assert "checkpoint" not in v.finding.advice[0]


def test_half_of_trainpaces_window_is_its_own_hand_over():
    step_s = [0.018 if i % 25 == 1 else 0.01 for i in range(1, 401)]
    v = only(anomalies.step_outliers(ctx(steps=records(step_s), meta={"config": {"window": 50}})))
    assert (v.finding.evidence["period_steps"], v.finding.evidence["cause"]) == (
        25, "trainpace_window")


def test_a_period_of_one_epoch_with_workers_restarting_names_them():
    # DCGAN: ~200 ms more every epoch of 8 batches, persistent_workers=False, outside the wait
    step_s = [0.62 if i % 8 == 1 else 0.4 for i in range(1, 81)]
    loader = {"num_workers": 2, "persistent_workers": False, "length": 8}
    v = only(anomalies.step_outliers(ctx(steps=records(step_s), meta={"loader": loader})))
    ev = v.finding.evidence
    assert (ev["period_steps"], ev["cause"]) == (8, "worker_restart")
    assert (v.finding.severity, v.bottleneck) == ("warning", "data_loading")
    assert v.finding.advice[0].startswith(
        "the period is the epoch (8 batches) and the DataLoader's 2 workers restart every "
        "epoch (persistent_workers=False): the extra 220 ms is their start-up and first "
        "batches — `DataLoader(persistent_workers=True)` keeps them")
    # persistent workers: not a restart
    loader["persistent_workers"] = True
    v = only(anomalies.step_outliers(ctx(steps=records(step_s), meta={"loader": loader})))
    assert v.finding.evidence["cause"] == "unknown"


def test_slow_steps_scattered_by_noise_are_no_period():
    # a loop with no periodic work on a busy machine: a third of the steps slow at random
    rng = random.Random(3)
    step_s = [0.1 + (rng.uniform(0.06, 0.2) if rng.random() < 0.35 else 0.0) for _ in range(70)]
    outcome = anomalies.step_outliers(ctx(steps=records(step_s)))
    assert all(v.finding.id != "periodic_stall" for v in outcome.verdicts), outcome
    # steps 3+14k on a lattice among as many others, all alike: chance fills its places
    noise = dict.fromkeys((3, 7, 9, 12, 17, 23, 27, 31, 37, 40, 45, 51, 55, 59, 65, 68), 0.1)
    on = [3, 17, 31, 45, 59]
    assert not period_search._stands_out(noise, on, period=14, tolerance=1, first=1, last=70)
    # the same steps, larger than the others: periodic work
    assert period_search._stands_out(noise | dict.fromkeys(on, 0.5), on, 14, 1, 1, 70)
    # alike, but the others are rare: the places are filled beyond chance
    assert period_search._stands_out(dict.fromkeys([*on, 40], 0.1), on, 14, 1, 1, 70)
    # the step after each event is part of it, not evidence against the period
    assert period_search._stands_out(dict.fromkeys([*on, 4, 18, 32], 0.1), on, 14, 1, 1, 70)
    # the real run that was called "periodic every 11 steps": 4 of 5 places, 2 events off
    real = {14: 8.2, 27: 12.4, 28: 0.6, 37: 8.5, 38: 0.25, 47: 8.3, 48: 0.23, 59: 16.5, 60: 83.4}
    assert not period_search._stands_out(real, [14, 37, 47, 59], 11, 1, 6, 60)
    assert periodic(sorted(real), first=6, last=60, extra=real) is None


def test_stalls_while_others_took_the_cpu_name_no_bottleneck():
    steps = records([0.1] * 15 + [0.5] + [0.1] * 14)
    system = host_rows(1.4, 50.0, 100.0, 0.4, every_s=0.1) + host_rows(
        2.0, 100.0, 20.0, 0.4, start_s=1.4, every_s=0.1) + host_rows(
        3.5, 50.0, 100.0, 0.4, start_s=2.0, every_s=0.1)
    v = only(anomalies.step_outliers(ctx(steps=steps, system=system, meta={"cpu_count": 2})))
    assert v.finding.evidence["cause"] == "cpu_contention"
    assert v.bottleneck is None
    assert "other processes took the CPU" in v.finding.advice[0]
