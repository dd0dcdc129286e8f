"""Slow phases (warm-up included), their causes from the recorded signs, the long warm-up
warning and time outside the steps; the issue-10 case reproduced on a real loop."""

import contextlib
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from diagnosis.helpers import ctx, records
from trainpace.diagnosis import diagnose, phases
from trainpace.measure.contention import host_columns, slowed_by_others
from trainpace.measure.summarize import summarize, warmup_steps
from trainpace.series import StepSeries
from trainpace.summary import Steps, Summary, Time


def host_row(t_s, system, process, memory=20.0):
    return {"t_s": t_s, "host": {"system_cpu_pct": system, "process_cpu_pct": process,
                                 "main_cpu_pct": process, "memory_used_pct": memory}}


def contended_run():
    # 20 steps of 0.1 s (2 s) at 5× the steady 20 ms, then 100 steady steps (2 s)
    step_s = [0.1] * 20 + [0.02] * 100
    system = [host_row(t / 2, 100.0 if t / 2 <= 2.0 else 55.0, 50.0 if t / 2 <= 2.0 else 100.0)
              for t in range(1, 9)]
    return step_s, system


def test_a_contended_phase_is_named_with_when_how_much_and_why():
    step_s, system = contended_run()
    c = ctx(Summary(steps=Steps(total=120, warmup=20, measured=100), time=Time(wall_s=4.0)),
            steps=records(step_s), system=system, meta={"cpu_count": 2})
    outcome = phases.slow_phases(c)
    finding = outcome.verdicts[0].finding
    assert finding.id == "slow_phase"
    [phase] = finding.evidence["phases"]
    assert (phase["start_step"], phase["stop_step"]) == (1, 20)
    assert (phase["start_s"], phase["stop_s"]) == (0.0, pytest.approx(2.0))
    assert phase["slowdown"] == pytest.approx(5.0)
    assert phase["wall_pct"] == pytest.approx(50.0)
    assert phase["cause"] == "cpu_contention"
    # the machine 100% busy, this process 50% of one core = 25% of the 2 cores: others 75%
    assert phase["signs"]["others_pct"] == pytest.approx(75.0)
    assert finding.severity == "critical"  # 50% of the wall time
    assert outcome.verdicts[0].bottleneck is None  # the machine's, not the training's
    assert "other processes took the CPU (the machine's CPU was 100% busy, this process had " \
           "25% of it)" in finding.title
    assert finding.title.startswith("A slow phase: steps 1–20 (0.0–2.0 s, 50% of the wall time) "
                                    "ran 5.0× slower than the steady step")
    # the excluded warm-up is half the run: a warning of its own
    long = outcome.verdicts[1].finding
    assert long.id == "long_warmup"
    assert long.evidence["wall_pct"] == pytest.approx(50.0)


def test_a_slow_phase_in_the_data_wait_and_one_nothing_explains():
    step_s = [0.02] * 40 + [0.1] * 10 + [0.02] * 40 + [0.08] * 10 + [0.02] * 20
    wait_s = [0.0] * 40 + [0.08] * 10 + [0.0] * 80
    c = ctx(Summary(time=Time(wall_s=sum(step_s))), steps=records(step_s, wait_s))
    found = phases.find_phases(c)
    assert [(p.start_step, p.stop_step, p.cause) for p in found] == [
        (41, 50, "data_wait"), (91, 100, "unknown")]
    assert found[0].slowdown == pytest.approx(5.0)
    assert found[1].slowdown == pytest.approx(4.0)


def test_a_few_fast_steps_inside_a_phase_do_not_split_it_and_single_stalls_are_no_phase():
    step_s = [0.02] * 30 + [0.1, 0.1, 0.02, 0.1, 0.1, 0.1, 0.02, 0.1, 0.1, 0.1] + [0.02] * 30
    step_s[5] = step_s[12] = 0.5  # two lone stalls: the stall rule's, not a phase
    found = phases.find_phases(ctx(steps=records(step_s)))
    assert [(p.start_step, p.stop_step) for p in found] == [(31, 40)]


def test_compile_warmup_is_a_phase_of_its_own_kind_and_only_info():
    step_s = [1.0, 0.5, 0.3] + [0.02] * 200  # compile: the first three steps
    c = ctx(Summary(steps=Steps(total=203, warmup=3, measured=200)), steps=records(step_s),
            slow_phase_min_steps=3)
    outcome = phases.slow_phases(c)
    [v] = outcome.verdicts
    assert v.finding.evidence["phases"][0]["cause"] == "warmup"
    assert v.finding.severity == "info"
    # 1.8 s of 5.8 s (31%): under a third, and no slower than compile warm-up itself
    assert not any(x.finding.id == "long_warmup" for x in outcome.verdicts)


def test_a_warmup_far_longer_than_compile_warmup_is_a_warning():
    step_s = [0.5] + [0.06] * 30 + [0.02] * 200  # 30 more steps at 3×: not compile
    c = ctx(Summary(steps=Steps(total=231, warmup=31, measured=200)), steps=records(step_s))
    long = next(v.finding for v in phases.slow_phases(c).verdicts if v.finding.id == "long_warmup")
    # compile warm-up: the first 3 steps (0.62 s) + 28 steady steps (0.56 s) = 1.18 s; it took 2.3 s
    assert long.evidence["compile_warmup_s"] == pytest.approx(1.18)
    assert long.evidence["warmup_s"] == pytest.approx(2.3)


def test_steps_as_columns_give_the_same_diagnosis_as_records():
    step_s, system = contended_run()
    summary = Summary(steps=Steps(total=120, warmup=20, measured=100), time=Time(wall_s=4.0))
    recs = records(step_s)
    for r in recs:
        del r["warmup"]
    from_records = diagnose(summary, steps=recs, system=system, meta={"cpu_count": 2})
    from_columns = diagnose(summary, steps=StepSeries.from_records(recs), system=system,
                            meta={"cpu_count": 2})
    assert from_columns == from_records
    assert "slow_phase" in [f.id for f in from_columns.findings]


def test_time_outside_the_steps_is_info_never_a_stall():
    recs = records([0.02] * 50)
    for r in recs:
        r["outside_s"] = 0.0
    recs[24]["outside_s"] = 0.5  # an evaluation between steps 25 and 26
    c = ctx(Summary(time=Time(wall_s=1.5)), steps=recs)
    [v] = phases.outside_steps(c).verdicts
    assert v.finding.id == "outside_steps"
    assert v.finding.severity == "info"
    assert v.finding.evidence["outside_steps_pct"] == pytest.approx(100 * 0.5 / 1.5)
    assert v.bottleneck is None
    d = diagnose(Summary(time=Time(wall_s=1.5)), steps=recs)
    assert not any(f.id in ("stalls", "periodic_stall") for f in d.findings)


def test_stalls_outside_the_loader_say_what_the_sampler_measured():
    step_s = [0.1] * 30
    step_s[15] = 0.5
    recs = records(step_s)
    system = [host_row(t / 10, 100.0, 40.0) for t in range(1, 40)]
    v = next(v for v in diagnose(Summary(), steps=recs, system=system,
                                 meta={"cpu_count": 2}).findings if v.id == "stalls")
    assert "other processes took the CPU" in v.advice[0]
    assert "machine's CPU was 100% busy, this process had 20% of it" in v.advice[0]
    calm = [host_row(t / 10, 30.0, 40.0) for t in range(1, 40)]
    v = next(v for v in diagnose(Summary(), steps=recs, system=calm,
                                 meta={"cpu_count": 2}).findings if v.id == "stalls")
    assert "no contention" in v.advice[0]


# ---- the case, on a real loop -----------------------------------------------------

HOG = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end:\n    pass\n"
# The hog runs as a grandchild whose parent exits at once: it is another process on the
# machine, not one of this process's descendants (which the sampler counts as loader workers).
SPAWN = ("import subprocess, sys\n"
         "p = subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdin=subprocess.DEVNULL,\n"
         "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
         "print(p.pid)\n")


def start_hog():
    out = subprocess.run([sys.executable, "-c", SPAWN, HOG], capture_output=True, text=True,
                         check=True)
    return int(out.stdout)


def stop(pids):
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_trainpaces_own_first_step_work_is_not_the_users_warmup():
    # issue 25 §2: the FLOP count made step 1 take 2.5 s (meta: 2.4 s of CPU counting) of a
    # run of 0.02 s steps; auto warm-up excluded steps 1–5
    step_s = [2.5] + [0.02] * 204
    meta = {"vitals": {"flop_count": {"counted": True, "ops_cpu_s": 2.4}}}
    summary = Summary(steps=Steps(total=205, warmup=5, measured=200))
    outcome = phases.slow_phases(ctx(summary, steps=records(step_s), meta=meta,
                                     slow_phase_min_steps=1))
    assert not any(v.finding.id == "long_warmup" for v in outcome.verdicts)
    v, own = outcome.verdicts
    assert (own.finding.id, own.finding.severity, own.bottleneck) == (
        "trainpace_first_step", "info", None)
    assert own.finding.title == ("trainpace's own first-step work (counting the step's FLOPs) "
                                 "took 2.4 s, 36% of the wall time")
    [phase] = v.finding.evidence["phases"]
    assert phase["cause"] == "trainpace_first_step"
    assert v.finding.severity == "info" and v.bottleneck is None
    assert "trainpace's own first-step work (counting the step's FLOPs), not the training's" \
        in v.finding.title
    # the same run without trainpace's cost recorded: a warm-up of 39% of the wall time
    outcome = phases.slow_phases(ctx(summary, steps=records(step_s), slow_phase_min_steps=1))
    long = next(v.finding for v in outcome.verdicts if v.finding.id == "long_warmup")
    assert long.evidence["trainpace_first_step_s"] == 0.0
    assert long.evidence["wall_pct"] == pytest.approx(100 * 2.58 / 6.58)


def test_first_step_work_is_bounded_by_the_first_steps_extra_time():
    # counting cost 2.4 s of CPU, but step 1 took 0.5 s more than a steady one: 0.5 s is its
    step_s = [0.52] + [0.02] * 100
    meta = {"vitals": {"flop_count": {"ops_cpu_s": 2.4}}}
    c = ctx(Summary(steps=Steps(total=101, warmup=1, measured=100)), steps=records(step_s),
            meta=meta)
    assert phases.own_first_step_s(c, phases.timeline(c)) == pytest.approx(0.5)


def test_flop_counting_then_hogs_a_first_step_of_trainpaces_and_a_phase_of_the_machines():
    # step 1: 2.5 s, 2.4 s of it trainpace's FLOP count (this process busy: its own work);
    # steps 2–101 at 0.06 s while other processes held the CPU (this process had 20% of the
    # machine, 50% usually); then 200 steps of 0.02 s
    step_s = [2.5] + [0.06] * 100 + [0.02] * 200
    recs = records(step_s)
    end_s = np.array([r["t_s"] for r in recs])
    system = [host_row(t, 100.0, 40.0 if 2.5 < t - 0.05 <= 8.5 else 100.0)
              for t in np.arange(0.1, end_s[-1] + 0.2, 0.1)]
    slowed = slowed_by_others(np.array(step_s), end_s, host_columns(system), 2)
    assert np.flatnonzero(slowed).tolist() == list(range(1, 101))
    assert warmup_steps(np.array(step_s), "auto") == 101  # by the step times alone
    assert warmup_steps(np.array(step_s), "auto", slowed) == 1
    summary = summarize(StepSeries.from_records(recs), warmup="auto", slowed=slowed)
    assert (summary.steps.warmup, summary.steps.slowed_by_others) == (1, 100)
    meta = {"cpu_count": 2, "vitals": {"flop_count": {"counted": True, "ops_cpu_s": 2.4}}}
    outcome = phases.slow_phases(ctx(summary, steps=recs, system=system, meta=meta))
    assert not any(v.finding.id == "long_warmup" for v in outcome.verdicts)
    finding = next(v.finding for v in outcome.verdicts if v.finding.id == "slow_phase")
    causes = {(p["start_step"], p["stop_step"]): p["cause"] for p in finding.evidence["phases"]}
    # the slow run of steps starts at step 1: the phase takes it (named for its main cause),
    # trainpace's own part of it is a finding of its own
    assert causes == {(1, 101): "cpu_contention"}
    own = next(v.finding for v in outcome.verdicts if v.finding.id == "trainpace_first_step")
    assert own.evidence["trainpace_first_step_s"] == pytest.approx(2.4)  # its CPU cost, recorded


def test_a_short_phase_right_after_trainpaces_hand_over_is_trainpaces():
    # window 100: hand-overs after steps 50, 100, 150, ... Steps 203-207 at 2× the steady
    # 2 ms (5 ms extra in all) begin 3 steps after the hand-over at step 200: trainpace's
    # work there, info only, as up to 10 + 37 steps after it (the writer finds a hand-over
    # within three eighths of a window). The same phase 48 steps after it is nothing's that
    # was recorded.
    for start, cause in ((203, "trainpace_boundary"), (247, "trainpace_boundary"),
                         (248, "unknown")):
        step_s = [0.002] * 400
        step_s[start - 1:start + 4] = [0.004] * 5
        c = ctx(Summary(time=Time(wall_s=sum(step_s))), steps=records(step_s),
                meta={"config": {"window": 100}}, slow_phase_min_wall_pct=0.5)
        [phase] = phases.find_phases(c)
        assert (phase.start_step, phase.stop_step, phase.cause) == (start, start + 4, cause)
        assert phase.after_handover == (200 if cause == "trainpace_boundary" else None)
        finding = phases.slow_phases(c).verdicts[0].finding
        # trainpace's phase is not counted against the run; the other one is (5 steps of
        # 4 ms in 0.81 s: 2.5% of the wall time)
        counted = finding.evidence["slow_wall_pct"]
        if cause == "trainpace_boundary":
            assert finding.severity == "info" and counted == 0.0
            assert ("trainpace's own work after one of its window boundaries (its writer's "
                    "window record; under DDP the ranks' exchange), not the training's; it "
                    f"began {start - 200} steps after trainpace's window boundary at step "
                    "200") in finding.title
        else:
            assert counted == pytest.approx(100 * 0.02 / 0.81)


def test_a_phase_after_a_hand_over_costing_more_than_trainpaces_work_is_not_its():
    # 10 steps at 2× a steady 10 ms after the hand-over at step 100: 100 ms extra, four times
    # what trainpace's work at a boundary costs; said as not told, with the hand-over named
    step_s = [0.01] * 300
    step_s[101:111] = [0.02] * 10
    c = ctx(Summary(time=Time(wall_s=sum(step_s))), steps=records(step_s),
            meta={"config": {"window": 100}})
    [phase] = phases.find_phases(c)
    assert (phase.start_step, phase.cause, phase.after_handover) == (102, "unknown", 100)
    finding = phases.slow_phases(c).verdicts[0].finding
    assert ("none of the recorded signs (data wait, host CPU, memory, throttling) explains "
            "it; it began 2 steps after trainpace's window boundary at step 100, but its "
            "extra time (100 ms) is more than trainpace's work there costs") in finding.title


def test_the_hand_over_before_a_phase_is_where_the_meters_loop_makes_it():
    # window 5: hand-overs after steps 2, 5, 7, 10, ... (halfway is 5 // 2 = 2 steps in)
    c = ctx(meta={"config": {"window": 5}})
    found = {step: phases._handover_before(c, step) for step in (1, 2, 3, 5, 6, 8, 11)}
    assert found == {1: None, 2: None, 3: 2, 5: 2, 6: 5, 8: 7, 11: 10}


def test_a_window_ended_by_a_loader_moves_the_boundaries_after_it():
    # window 5, epochs of 7 steps: the loop's windows end at 5, 7 (the loader ran out), 12,
    # 14, 19, 21 ..., with halfway hand-overs 2 steps into each (2, 9, 16, ...); without
    # the ends known, the boundaries are counted from the run's start (5, 7, 10, 12, 15)
    known = ctx(Summary(steps=Steps(window_ends=[7, 14])), meta={"config": {"window": 5}})
    unknown = ctx(meta={"config": {"window": 5}})
    steps = (3, 8, 9, 10, 12, 13, 15, 16, 17, 20)
    assert {s: phases._handover_before(known, s) for s in steps} == {
        3: 2, 8: 7, 9: 7, 10: 9, 12: 9, 13: 12, 15: 14, 16: 14, 17: 16, 20: 19}
    assert {s: phases._handover_before(unknown, s) for s in steps} == {
        3: 2, 8: 7, 9: 7, 10: 7, 12: 10, 13: 12, 15: 12, 16: 15, 17: 15, 20: 17}


def test_a_phase_right_after_a_loader_ended_window_is_named_at_that_boundary():
    # window 100, epochs of 64 steps: the loop's windows end at 64 (a loader ran out), 114
    # (halfway), 128 (the next loader end), 178, 192, 242, 256 ... A phase at steps 259-263
    # begins 3 steps after the boundary at 256; counted from the run's start the last
    # boundary would be 250, and the phase 9 steps after it
    step_s = [0.002] * 400
    step_s[258:263] = [0.004] * 5
    c = ctx(Summary(steps=Steps(window_ends=[64, 128, 192, 256, 320, 384]),
                    time=Time(wall_s=sum(step_s))),
            steps=records(step_s), meta={"config": {"window": 100}}, slow_phase_min_wall_pct=0.5)
    [phase] = phases.find_phases(c)
    assert (phase.start_step, phase.cause, phase.after_handover) == (
        259, "trainpace_boundary", 256)
    finding = phases.slow_phases(c).verdicts[0].finding
    assert "began 3 steps after trainpace's window boundary at step 256" in finding.title


def test_the_writers_look_period_is_the_meters():
    from trainpace.meter.pipeline import POLL_SHARE

    assert phases.WRITER_LOOK_WINDOWS == POLL_SHARE / 2  # of a half window
