"""The Meter computes its job's goodput at the end of each run, and the sinks get it."""

import json

import pytest
import torch

import trainpace
from trainpace.job.events import LEDGER_FILE, RUNS_DIR
from trainpace.sinks.names import summary_scalars


class Summaries:
    """A sink that keeps the summaries it is given."""

    def __init__(self):
        self.summaries = []

    def log(self, record):
        if record.kind == "summary":
            self.summaries.append(record.data)

    def close(self):
        pass


def train(folder, clock, steps, *, fail=False):
    sink = Summaries()
    meter = trainpace.Meter(folder, clock=clock, console=False, report=False, window=4,
                            warmup=0, count_flops=False, sinks=[sink])
    try:
        with meter:
            for batch in meter.loader([torch.ones(2, 1)] * steps):
                with meter.step(batch):
                    clock.advance(0.5)
            if fail:
                raise RuntimeError("the node went away")
    except RuntimeError:
        pass
    return meter.finish(), sink  # (finished already: the same summary)


def test_each_run_ends_with_the_jobs_goodput_in_its_summary_and_sinks(tmp_path, clock,
                                                                      monkeypatch):
    job = tmp_path / "job"
    first, _ = train(job, clock, 6, fail=True)
    assert first.goodput.runs and len(first.goodput.runs) == 1
    monkeypatch.setenv("TRAINPACE_JOB", "continue")  # the same process: say it is a restart
    clock.advance(3.0)
    second, sink = train(job, clock, 8)
    assert (job / RUNS_DIR / "job" / "steps.jsonl").is_file()
    assert [run.run_id for run in second.goodput.runs] == ["job", "job.2"]
    assert second.goodput.failures == 1
    # the job's productive time: its 14 steps of 0.5 s on the injected clock, none waiting
    assert second.goodput.productive_s == pytest.approx(14 * 0.5, rel=1e-6)
    # (the wall time mixes the injected clock with the process's real start time, so the
    # share itself is not asserted here: tests/job/test_goodput.py pins it on exact jobs)
    assert second.goodput.pct is not None
    written = json.loads((job / "summary.json").read_text())
    assert written["goodput"]["pct"] == pytest.approx(second.goodput.pct)
    last = sink.summaries[-1]  # the final one (others refresh it at window ends)
    tags = summary_scalars(last)
    assert tags["trainpace/goodput/pct"] == pytest.approx(second.goodput.pct)
    assert len((job / LEDGER_FILE).read_text().splitlines()) >= 4
