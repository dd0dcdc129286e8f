"""A framework's iteration as trainpace's step (``Iterations``), on a manual clock: the job's
progress map counts the step done from its optimizer step, while the step runs on to the next
fetch."""

import orjson
import pytest
import torch

import trainpace
import trainpace.sinks.ledger as ledger_sink
from trainpace.integrations._common import Iterations
from trainpace.sinks.ledger import PROGRESS_FILE


def progress(folder):
    """The progress map's (step, its end on the run's clock)."""
    return ledger_sink.STEP_LAYOUT.unpack_from((folder / PROGRESS_FILE).read_bytes())


def _metered(folder, clock):
    """A Meter writing the job ``folder`` on ``clock``, and a framework's iterations over it."""
    meter = trainpace.Meter(folder, clock=clock, console=False, report=False, window=3,
                            count_flops=False)
    return meter, Iterations(meter, clock, skip_steps=0)


def test_the_progress_map_has_the_step_at_its_optimizer_step_and_its_time_runs_to_the_fetch(
        tmp_path, clock):
    folder = tmp_path / "job"
    meter, iterations = _metered(folder, clock)
    batches = iter(iterations.fetches(meter.loader([torch.ones(2, 1)] * 3)))
    for step in (1, 2):
        iterations.user_begins(next(batches))
        clock.advance(0.25)  # the user's work, the optimizer step at its end
        stepped_at = clock()
        iterations.user_ends(stepped=True, framework_step=step)
        # a kill from here on loses no step the framework did...
        assert progress(folder) == (step, stepped_at)
        # ...and the step is still open: the framework's own work after it is its time
        assert iterations.open and iterations.closed == step - 1
        clock.advance(0.5)
    next(batches)  # the fetch closes step 2, with its own end
    assert iterations.closed == 2
    assert progress(folder) == (2, clock())
    iterations.interrupt()
    meter.finish()
    steps = [orjson.loads(line) for line in (meter.path / "steps.jsonl").read_bytes().splitlines()]
    assert [(s["step"], s["step_s"]) for s in steps] == [(1, 0.75), (2, 0.75)]


def test_a_step_that_has_not_stepped_is_not_in_the_progress_map(tmp_path, clock):
    folder = tmp_path / "job"
    meter, iterations = _metered(folder, clock)
    iterations.user_begins(torch.ones(2, 1))
    clock.advance(0.25)
    iterations.user_ends(stepped=False, framework_step=0)  # a micro-batch of an accumulation
    assert progress(folder) == (0, 0.0)  # none yet
    iterations.abandon(RuntimeError("the fit ended inside an accumulation"))
    meter.finish()


def test_a_meter_finished_after_an_optimizer_step_leaves_that_step_to_the_next_run(
        tmp_path, clock, monkeypatch):
    """A SIGTERM finishes the Meter wherever the loop is: here between step 2's optimizer step
    and the next fetch. The run's end says the steps it closed (1); the progress map has step
    2, which the next run writes as the run's last progress, the step the framework did."""
    folder = tmp_path / "job"
    meter, iterations = _metered(folder, clock)
    batches = iter(iterations.fetches(meter.loader([torch.ones(2, 1)] * 3)))
    for step in (1, 2):
        iterations.user_begins(next(batches))
        clock.advance(0.25)
        iterations.user_ends(stepped=True, framework_step=step)
        clock.advance(0.5)
    meter.finish()
    monkeypatch.setenv("TRAINPACE_JOB", "continue")  # the restart: the same job
    trainpace.Meter(folder, clock=clock, console=False, report=False, count_flops=False,
                    ).finish()
    events = [orjson.loads(line) for line in (folder / "job.jsonl").read_bytes().splitlines()]
    ends = [(e["run"], e["last_step"]) for e in events if e["event"] == "run_end"]
    assert ends == [(1, 1), (2, 0)]
    (last,) = [e for e in events if e["event"] == "progress"]
    assert (last["run"], last["step"]) == (1, 2)
    # its optimizer step's time, from the first step's start
    assert last["step_end_unix_s"] - events[1]["unix_s"] == pytest.approx(1.0, abs=1e-6)
