"""The tuner's report on a console: the trials table, the verdict, the line to paste."""

from __future__ import annotations

import dataclasses
import io

from trainpace.report.tune_console import print_tune, tune_progress
from trainpace.tune import Probe, Setting, Trial, TuneResult


def _trial(workers: int, wait_pct: float, **kw) -> Trial:
    setting = Setting(num_workers=workers, prefetch_factor=2 if workers else None,
                      pin_memory=False, persistent_workers=workers > 0)
    base = {"setting": setting, "batches": 30, "warmup_batches": workers + 1, "startup_s": 0.2,
                "batches_per_s": 25.0, "wait_s_per_batch": wait_pct / 100 * 0.04,
                "wait_pct": wait_pct, "worker_cpu_s_per_batch": 0.002 if workers else None,
                "worker_rss_gb": 0.1 * workers or None, "worker_uss_gb": 0.01 * workers or None,
                "memory_gb": 0.01 * workers, "duration_s": 1.0}
    base.update(kw)
    return Trial(**base)


def _result(trials: list[Trial], chosen: Trial, reachable: bool) -> TuneResult:
    probe = Probe(samples=16, sample_s=0.005, sample_cpu_s=0.0001, sample_runq_s=0.0,
                  collate_s=0.0002, batch_s=0.0802, sample_bytes=32, batch_bytes=512)
    return TuneResult(
        recommended=chosen.setting, wait_pct=chosen.wait_pct, reachable=reachable, step_s=0.03,
        step_source="--step-ms", batch_size=16, probe=probe, trials=trials, bound="io",
        cores=2, memory_budget_gb=8.0, budget_s=60.0, elapsed_s=12.5,
        verdict="w=3 pf=2 hides the loading", advice=["cache the samples"],
        code="DataLoader(dataset, batch_size=16, num_workers=3, prefetch_factor=2, "
             "persistent_workers=True, pin_memory=False)")


def test_table_verdict_and_code():
    trials = [_trial(0, 72.8), _trial(1, 62.0), _trial(2, 25.1), _trial(4, 4.0),
              _trial(3, 5.5, batches=12, complete=False)]
    out = io.StringIO()
    result = _result(trials, trials[-1], True)
    print_tune(result, out)
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0] == ("tune-loader batch 16 · a 30 ms step (--step-ms) · 2 usable cores · "
                        "loading is io-bound")
    assert "one sample 5 ms in this process (CPU 100 µs, waiting 4.9 ms); collate 200 µs; " \
           "one batch 80.2 ms, 512 B" in lines[1]
    rows = [line for line in lines if line.strip() and line.strip()[0] in "→0123456789"]
    assert len(rows) == 5
    assert rows[-1].startswith("→")
    assert rows[-1].split()[1:4] == ["3", "2", "no"]
    assert "5.5%" in rows[-1]
    assert "12 (cut)" in rows[-1]
    assert rows[0].split()[:3] == ["0", "—", "no"]
    assert "—" in rows[0]  # no worker CPU without workers
    assert "w=3 pf=2 hides the loading" in text
    assert "  • cache the samples" in text
    assert ("DataLoader(dataset, batch_size=16, num_workers=3, prefetch_factor=2, "
            "persistent_workers=True, pin_memory=False)") in lines
    assert "searched 5 settings in 12.5 s (budget 60 s, memory budget 8.0 GB)" in text
    assert lines[-1] == result.code  # last, whole: ready to paste


def test_the_line_to_paste_is_never_cut():
    trial = _trial(2, 4.0)
    result = _result([trial], trial, True)
    long = result.code.replace("dataset", "d" * 150)
    result = dataclasses.replace(result, code=long)
    out = io.StringIO()
    print_tune(result, out)
    assert out.getvalue().splitlines()[-1] == long


def test_progress_off_a_terminal_is_one_line_per_setting():
    out = io.StringIO()
    with tune_progress(out) as progress:
        progress("trying w=2 pf=2", 3.25, 60)
        progress("done", 10.0, 60)
    assert out.getvalue().splitlines() == [
        "trainpace tune-loader:   3.2/60 s  trying w=2 pf=2",
        "trainpace tune-loader:  10.0/60 s  done",
    ]


def test_progress_on_a_terminal_is_a_bar_that_goes_away():
    out = io.StringIO()
    with tune_progress(out, force_terminal=True) as progress:
        progress("trying w=4 pf=2", 30.0, 60)
    text = out.getvalue()
    assert "tune-loader" in text
    assert "trying w=4 pf=2" in text
    assert "━" in text  # the bar itself


def test_the_head_says_how_the_step_was_simulated():
    import dataclasses

    trials = [_trial(0, 72.8)]
    for device, said in (("cpu", "a 30 ms step (--step-ms, CPU work)"),
                         ("cuda", "a 30 ms step (--step-ms, cuda: a sleep)")):
        out = io.StringIO()
        print_tune(dataclasses.replace(_result(trials, trials[0], False), step_device=device),
                   out)
        assert said in out.getvalue().splitlines()[0]
