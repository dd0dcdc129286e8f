"""Step-time anomaly rules: stalls, periodic slow steps, a loss gone NaN."""

import pytest

from diagnosis.helpers import ctx, host_rows, only, records
from trainpace.diagnosis import anomalies
from trainpace.summary import RankEntry, Steps, Summary

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


def test_steps_within_the_summarys_warmup_are_not_measured():
    # records written before warm-up was decided say warmup=false; the summary knows better
    c = ctx(Summary(steps=Steps(warmup=5)), steps=records([1.0] * 5 + [0.1] * 30))
    assert c.times.step[0] == 6
    assert c.times.step_s.tolist() == [0.1] * 30


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


def test_a_long_run_as_columns_is_never_turned_into_records(monkeypatch):
    from trainpace.diagnosis import diagnose
    from trainpace.series import StepSeries

    n = 200_000
    series = StepSeries.from_records({"step": i, "t_s": i * 0.01, "step_s": 0.01,
                                      "wait_s": 0.0} for i in range(1, n + 1))
    monkeypatch.setattr(StepSeries, "records", lambda self: pytest.fail("turned into records"))
    d = diagnose(Summary(steps=Steps(total=n, warmup=0, measured=n)), steps=series)
    assert [f.id for f in d.findings] == ["checks"]


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



def test_a_period_equal_to_the_epochs_that_end_trainpaces_windows_is_its_own():
    # epochs of 64 steps, window 100: the loader that runs out ends every window (a second
    # epoch would not fit in it), so trainpace's boundaries come every 64 steps
    # (steps.window_ends), not every 50 or 100
    step_s = [0.018 if i % 64 == 1 else 0.01 for i in range(1, 641)]
    ends = list(range(64, 641, 64))
    c = ctx(Summary(steps=Steps(window_ends=ends)), steps=records(step_s),
            meta={"config": {"window": 100}})
    v = only(anomalies.step_outliers(c))
    ev = v.finding.evidence
    assert (ev["period_steps"], ev["cause"]) == (64, "trainpace_window")
    assert (v.finding.severity, v.bottleneck) == ("info", None)
    assert v.finding.advice == [
        "the slow steps fall on trainpace's own window boundary: the loader runs out every 64 "
        "steps, which ends trainpace's window there (steps.window_ends), and the 8 ms each time "
        "is trainpace's cost, its work at the boundary, not the training's"]
    # the same stall in the data wait is the epoch's first batch (the loader's), and
    # without the ends known, nothing says trainpace's windows end every 64 steps
    in_wait = records(step_s, wait_s=[0.008 if i % 64 == 1 else 0.0 for i in range(1, 641)])
    c = ctx(Summary(steps=Steps(window_ends=ends)), steps=in_wait,
            meta={"config": {"window": 100}})
    assert only(anomalies.step_outliers(c)).finding.evidence["cause"] != "trainpace_window"
    c = ctx(steps=records(step_s), meta={"config": {"window": 100}})
    assert only(anomalies.step_outliers(c)).finding.evidence["cause"] != "trainpace_window"

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
    # persistent workers: not a restart, still the epoch (never "not the epoch")
    loader["persistent_workers"] = True
    v = only(anomalies.step_outliers(ctx(steps=records(step_s), meta={"loader": loader})))
    assert v.finding.evidence["cause"] == "epoch_boundary"
    assert v.finding.advice[0].startswith(
        "the period is the epoch (8 batches): the extra 220 ms comes once per epoch, not in "
        "the data wait — the loop's own work at each epoch's start or end")
    assert "not the epoch" not in v.finding.advice[0]


def test_a_period_other_than_the_epoch_says_so():
    step_s = [0.62 if i % 8 == 1 else 0.4 for i in range(1, 81)]
    loader = {"num_workers": 0, "length": 32}
    v = only(anomalies.step_outliers(ctx(steps=records(step_s), meta={"loader": loader})))
    assert v.finding.evidence["cause"] == "unknown"
    assert "not in the data wait, not the epoch (32 batches)" in v.finding.advice[0]


def test_under_ddp_a_rank_waiting_more_than_rank_0_is_not_cleared_by_rank_0s_steps():
    # rank 0's steps (the ones a job's diagnosis reads) stall every 32 steps at the
    # all-reduce, outside its data wait; rank 1, the straggler, waits 12% of its time
    step_s = [0.064 if i % 32 == 1 else 0.024 for i in range(1, 161)]
    job = Summary(world_size=2, ranks=[RankEntry(rank=0, wait_pct=0.5),
                                       RankEntry(rank=1, wait_pct=12.0)])
    loader = {"num_workers": 0, "length": 32}
    v = only(anomalies.step_outliers(ctx(summary=job, steps=records(step_s),
                                         meta={"loader": loader})))
    advice = v.finding.advice[0]
    assert v.finding.evidence["cause"] == "epoch_boundary"
    assert "not in the data wait" not in advice
    assert ("not in rank 0's data wait (the steps read here), but rank 1 waits 12% of its "
            "time for data and every rank waits for it at the gradient all-reduce") in advice
    # ranks that wait alike: rank 0's steps speak for the job
    even = Summary(world_size=2, ranks=[RankEntry(rank=0, wait_pct=0.5),
                                        RankEntry(rank=1, wait_pct=0.9)])
    v = only(anomalies.step_outliers(ctx(summary=even, steps=records(step_s),
                                         meta={"loader": loader})))
    assert "not in the data wait" in v.finding.advice[0]


def test_stalls_while_others_took_the_cpu_name_no_bottleneck():
    steps = records([0.1] * 15 + [0.5] + [0.1] * 14)
    system = host_rows(1.4, 50.0, 100.0, 0.4, every_s=0.1) + host_rows(
        2.0, 100.0, 20.0, 0.4, start_s=1.4, every_s=0.1) + host_rows(
        3.5, 50.0, 100.0, 0.4, start_s=2.0, every_s=0.1)
    v = only(anomalies.step_outliers(ctx(steps=steps, system=system, meta={"cpu_count": 2})))
    assert v.finding.evidence["cause"] == "cpu_contention"
    assert v.bottleneck is None
    assert "other processes took the CPU" in v.finding.advice[0]


def test_a_busy_cpu_with_no_share_of_this_process_is_not_called_free_of_contention():
    # the machine 100% busy, this process's share unknown (no core count): "no contention"
    # would contradict the reading; the advice says what cannot be told
    steps = records([0.1] * 15 + [0.5] + [0.1] * 14)
    system = host_rows(3.5, 100.0, 98.0, 0.4, every_s=0.1)
    v = only(anomalies.step_outliers(ctx(steps=steps, system=system)))
    advice = v.finding.advice[0]
    assert v.finding.evidence["cause"] == "unknown"
    assert "no contention" not in advice
    assert ("the machine's CPU was 100% busy: whether other processes took it is not known"
            in advice)
    # this process kept it busy: the others' share is under the contention threshold
    v = only(anomalies.step_outliers(ctx(steps=steps, system=system, meta={"cpu_count": 1})))
    assert ("the machine's CPU was 100% busy, this process had 98% of it: other processes had "
            "2%, under the 30% that counts as contention") in v.finding.advice[0]
    # idle cores
    quiet = host_rows(3.5, 40.0, 70.0, 0.4, every_s=0.1)
    v = only(anomalies.step_outliers(ctx(steps=steps, system=quiet, meta={"cpu_count": 2})))
    assert "40% busy, this process had 35% of it: cores were idle, no contention" in (
        v.finding.advice[0])


def test_a_jobs_steps_rank_is_the_one_compared_not_rank_0():
    # the job's diagnosis reads rank 2's steps (meta dist.steps_rank): rank 1 waits more
    # than rank 2, so rank 2's steps do not clear the data wait; rank 0's wait is not the base
    step_s = [0.064 if i % 32 == 1 else 0.024 for i in range(1, 161)]
    job = Summary(world_size=3, ranks=[RankEntry(rank=0, wait_pct=20.0),
                                       RankEntry(rank=1, wait_pct=12.0),
                                       RankEntry(rank=2, wait_pct=0.5)])
    meta = {"loader": {"num_workers": 0, "length": 32}, "dist": {"steps_rank": 2}}
    v = only(anomalies.step_outliers(ctx(summary=job, steps=records(step_s), meta=meta)))
    assert ("not in rank 2's data wait (the steps read here), but rank 0 waits 20% of its "
            "time") in v.finding.advice[0]
    # the rank read is the one that waits most: its steps speak for the job
    meta["dist"]["steps_rank"] = 0
    v = only(anomalies.step_outliers(ctx(summary=job, steps=records(step_s), meta=meta)))
    assert "not in the data wait" in v.finding.advice[0]
