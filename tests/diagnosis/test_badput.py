"""The goodput rule: the largest badput category, its evidence and advice, exact figures."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from job.goodput_jobs import killed_and_restarted
from trainpace.diagnosis import diagnose
from trainpace.diagnosis._context import Context
from trainpace.diagnosis.badput import job_goodput
from trainpace.diagnosis.thresholds import Thresholds
from trainpace.job.goodput import goodput
from trainpace.job.ledger import read_job
from trainpace.summary import Summary
from trainpace.summary_goodput import Goodput, GoodputCategories, GoodputRun

HOUR = 3600.0


def _ctx(g: Goodput, mtbf_s: float | None = None) -> Context:
    return Context(Summary(goodput=g), None, None, {}, Thresholds(), mtbf_s)


def _job(*, failures: int, shares: dict[str, float], pct: float = 50.0, **figures) -> Goodput:
    wall = HOUR
    seconds = {f"{name}_s": share * wall / 100 for name, share in shares.items()}
    return Goodput(pct=pct, wall_s=wall, productive_s=pct * wall / 100,
                   categories=GoodputCategories(**seconds), shares_pct=shares,
                   failures=failures, sources={name: f"src {name}" for name in shares},
                   **figures)


def test_lost_progress_gives_the_young_daly_interval_from_observed_failures() -> None:
    """3 failures in an hour: MTBF 20 min; 10 s saves: τ = √(2 × 10 × 1200) ≈ 154.9 s."""
    g = _job(failures=3, shares={"checkpoint_save": 60 / 36, "lost_progress": 20.0},
             checkpoint_saves=6, checkpoint_save_s_mean=10.0, checkpoint_interval_s=600.0,
             step_s_median=1.0)
    (found,) = job_goodput(_ctx(g)).verdicts
    f = found.finding
    tau = math.sqrt(2 * 10.0 * 1200.0)
    reach = 50.0 + 100 * ((60.0 + 720.0) / HOUR - (10.0 / tau + tau / 2400.0))
    assert (f.id, f.severity) == ("goodput", "critical")  # 20% ≥ the critical 20%
    assert f.title == "Goodput 50%: lost progress took 20% of the job's wall time (12m00s)"
    assert f.evidence["mtbf_s"] == pytest.approx(1200.0)
    assert f.evidence["mtbf_source"] == "observed: 3 failures in 60m00s"
    assert f.evidence["young_daly_interval_s"] == pytest.approx(tau)
    assert f.evidence["young_daly_steps"] == 155
    assert f.evidence["goodput_at_interval_pct"] == pytest.approx(reach)
    assert reach == pytest.approx(58.7567, abs=1e-4)
    assert f.advice == [
        "save every 2m35s (about 155 steps) instead of every 10m00s: the Young/Daly interval "
        "√(2 × 10 s per save × 20m00s between failures, observed: 3 failures in 60m00s); the "
        "job's goodput would be about 59% (first order: 10 s/τ of the time saving, τ/2 redone "
        "per failure)"]


def test_too_few_failures_ask_for_a_failure_rate_and_use_the_one_given() -> None:
    g = _job(failures=1, shares={"lost_progress": 12.0}, checkpoint_save_s_mean=8.0,
             step_s_median=0.5)
    (found,) = job_goodput(_ctx(g)).verdicts
    assert found.finding.severity == "warning"
    assert found.finding.advice == [
        "the job has seen 1 failure, too few to measure the time between failures: give your "
        "machines' mean time between failures (`trainpace report JOB --mtbf-hours H`) for the "
        "checkpoint interval that maximizes goodput (saves take 8 s each)"]
    (given,) = job_goodput(_ctx(g, mtbf_s=4 * HOUR)).verdicts
    tau = math.sqrt(2 * 8.0 * 4 * HOUR)  # 480 s
    assert tau == pytest.approx(480.0)
    assert given.finding.evidence["mtbf_source"] == "given with --mtbf-hours"
    assert given.finding.evidence["young_daly_steps"] == 960
    assert given.finding.advice[0].startswith("save every 8m00s (about 960 steps): the Young/Daly")


def test_checkpoint_saves_also_advise_asynchronous_saves() -> None:
    g = _job(failures=4, shares={"checkpoint_save": 30.0}, checkpoint_save_s_mean=90.0,
             checkpoint_interval_s=300.0)
    advice = job_goodput(_ctx(g)).verdicts[0].finding.advice
    assert advice[-1] == ("a save blocks training for 90 s: save asynchronously "
                          "(torch.distributed.checkpoint.async_save, Lightning's "
                          "AsyncCheckpointIO)")


def test_startup_says_what_dominated_it() -> None:
    run = GoodputRun(run=1, start_unix_s=0.0, meter_start_unix_s=40.0, first_step_unix_s=50.0,
                     categories=GoodputCategories(checkpoint_load_s=4.0))
    g = _job(failures=0, shares={"startup": 25.0}, runs=[run, run])
    f = job_goodput(_ctx(g)).verdicts[0].finding
    assert (f.evidence["before_meter_s"], f.evidence["meter_to_first_step_s"]) == (80.0, 12.0)
    assert f.advice[0].startswith("80 s passed before trainpace's Meter opened (imports")
    assert f.advice[1] == ("startup is paid once per run: 2 runs paid it; fewer restarts (the "
                           "checkpoint advice) pay it less")


def test_warmup_says_whether_the_first_step_dominated() -> None:
    runs = [GoodputRun(run=1, first_step_excess_s=30.0), GoodputRun(run=2, first_step_excess_s=28.0)]
    g = dataclasses.replace(_job(failures=1, shares={"warmup_excess": 8.0}, runs=runs),
                            categories=GoodputCategories(warmup_excess_s=70.0))
    f = job_goodput(_ctx(g)).verdicts[0].finding
    assert (f.evidence["first_steps_excess_s"], f.evidence["later_warmup_excess_s"]) == (58.0, 12.0)
    assert f.advice[0].startswith("the first step of each run took 58 s in all beyond the steady "
                                  "step (compilation, autotuning)")


def test_a_small_loss_is_checked_and_no_job_is_not_checked() -> None:
    outcome = job_goodput(_ctx(_job(failures=0, shares={"other": 3.0}, pct=97.0)))
    assert outcome.verdicts == ()
    assert outcome.checked == ("goodput 97.0%; the largest loss, time outside the steps that "
                               "nothing named, is 3.0% of the wall time")
    assert job_goodput(_ctx(Goodput())).skipped.startswith("no job was read")


def test_the_hand_made_job_end_to_end(tmp_path: Path) -> None:
    summary = Summary(goodput=goodput(read_job(killed_and_restarted(tmp_path / "job"))))
    d = diagnose(summary)
    (f,) = [f for f in d.findings if f.id == "goodput"]
    assert f.title == "Goodput 29%: startup took 23% of the job's wall time (14.5 s)"
    assert (f.evidence["before_meter_s"], f.evidence["meter_to_first_step_s"]) == (3.0, 11.5)
