"""The drift rule: step time that grows (or falls) over the run, and its cause."""

import pytest

from diagnosis.helpers import ctx, host_rows, only, records
from trainpace.diagnosis.drift import drift
from trainpace.summary import Steps, Summary


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
        "in the last quarter the machine's CPU was 50% busy, this process had 50% of it: "
        "cores were idle, no contention; this process's memory 0.41 GB (from 0.41); the "
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
