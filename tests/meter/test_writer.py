"""The run folder is written whatever the sinks do, and keeps up with any step rate."""

import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import trainpace
from trainpace.meter import handover
from trainpace.runlog import STEPS_FILE, read_run


class Hanging:
    def __init__(self):
        self.release = threading.Event()

    def log(self, record):
        self.release.wait()

    def close(self):
        self.release.wait()


class Exiting:
    def log(self, record):
        raise SystemExit(3)

    def close(self):
        raise KeyboardInterrupt


def lines(path):
    try:
        with open(path / STEPS_FILE, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def run(meter, steps):
    for b in meter.loader([torch.zeros(2)] * steps):
        with meter.step(b):
            pass


def test_a_held_sink_never_holds_the_run_folder_back(tmp_path, caplog, clock):
    sink = Hanging()  # takes nothing until released: the slowest sink there is
    meter = trainpace.Meter(tmp_path / "run", clock=clock, window=10, console=False,
                            report=False, count_flops=False, sinks=[sink], sink_timeout_s=0.2)
    for b in meter.loader([torch.zeros(2)] * 400):
        with meter.step(b):
            clock.advance(0.01)
    with caplog.at_level(logging.WARNING):
        summary = meter.finish()  # gives the sink sink_timeout_s, then abandons it
    assert summary.steps.total == 400 and len(read_run(meter.path).steps) == 400
    assert any("Hanging did not finish within sink_timeout_s=0.2s; abandoned" in r.getMessage()
               for r in caplog.records)
    sink.release.set()


def test_a_sink_raising_systemexit_is_contained(tmp_path, caplog):
    meter = trainpace.Meter(tmp_path / "run", window=10, console=False, report=False,
                            count_flops=False, sinks=[Exiting()])
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        run(meter, 100)
        summary = meter.finish()  # nothing re-raised into the user's code
    assert summary.steps.total == 100 and len(read_run(meter.path).steps) == 100
    assert sum("Exiting" in r.getMessage() for r in caplog.records) == 1


def test_tiny_steps_keep_the_run_folder_within_a_window(tmp_path, monkeypatch):
    # The hand-over waits for the writer's previous lines; the bound on that wait (a stalled
    # disk) is lifted here, so the check holds however loaded the machine is: what a real
    # loop achieves in real time is measured by benchmarks/writer.py.
    monkeypatch.setattr(handover, "LAG_WAIT_S", 600.0)
    window = 20
    meter = trainpace.Meter(tmp_path / "run", window=window, console=False, report=False,
                            count_flops=False)
    worst = 0
    steps = 0
    for b in meter.loader(range(30_000)):
        with meter.step(b):
            steps += 1
        if steps % 2_000 == 0:
            worst = max(worst, steps - lines(meter.path))
    at_end = steps - lines(meter.path)
    meter.finish()
    # on disk: every step but those of the open half window and the half being written
    # (the open one may be whole: its hand-over comes as the next step begins)
    assert worst <= window and at_end <= window
    assert len(read_run(meter.path).steps) == 30_000


CHILD = """
import mmap, sys, time, torch, trainpace
from pathlib import Path

class Sleepy:
    def log(self, record): time.sleep(1.0)
    def close(self): pass

counter = open(sys.argv[2], "r+b")
done = mmap.mmap(counter.fileno(), 8)
meter = trainpace.Meter(Path(sys.argv[1]), window=20, console=False, report=False,
                        count_flops=False, sinks=[Sleepy()])
n = 0
for b in meter.loader(range(10**9)):
    with meter.step(b):
        time.sleep(0.0002)
    n += 1
    done[:8] = n.to_bytes(8, "little")
"""


def test_sigkill_loses_at_most_a_window(tmp_path):
    """The open half window and the half in flight, no more."""
    rng = random.Random(7)
    env = dict(os.environ, PYTHONPATH=str(Path(trainpace.__file__).parents[1]))
    for attempt in range(2):
        counter = tmp_path / f"counter{attempt}"
        counter.write_bytes(b"\0" * 8)
        out = tmp_path / f"run{attempt}"
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(out), str(counter)], env=env)
        deadline = time.monotonic() + 60
        while int.from_bytes(counter.read_bytes(), "little") < 50:  # the loop is running
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(rng.uniform(0.3, 1.5))
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        done = int.from_bytes(counter.read_bytes(), "little")
        recovered = len(read_run(out).steps)
        assert done - 20 <= recovered <= done


UNFINISHED = """
import sys, threading, torch, trainpace
from pathlib import Path

class Hanging:
    def log(self, record): threading.Event().wait()
    def close(self): threading.Event().wait()

meter = trainpace.Meter(Path(sys.argv[1]), window=10, console=False, report=False,
                        count_flops=False, sinks=[Hanging()])
for b in meter.loader([torch.zeros(2)] * 105):
    with meter.step(b):
        pass
# no finish(): the interpreter exits here
"""


def test_a_run_never_finished_exits_without_waiting_on_a_hanging_sink(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(Path(trainpace.__file__).parents[1]))
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", UNFINISHED, str(tmp_path / "run")], env=env,
                   check=True, timeout=120)
    exited_s = time.monotonic() - started
    assert len(read_run(tmp_path / "run").steps) == 105  # the exit hook wrote every step
    # the child's exit did not wait on the sink (imports alone take seconds on a busy machine)
    assert exited_s < 60


class Windows:
    """A sink keeping the window records it gets."""

    def __init__(self):
        self.records = []

    def log(self, record):
        if record.kind == "window":
            self.records.append(record.data)

    def close(self):
        pass


def test_windows_shorter_than_sink_window_s_reach_the_sinks_together_every_step_once(
        tmp_path, clock):
    from trainpace.meter.pipeline import SINK_WINDOW_S

    sink = Windows()
    meter = trainpace.Meter(tmp_path / "run", clock=clock, window=10, console=False,
                            report=False, count_flops=False, sinks=[sink])
    for b in meter.loader([torch.zeros(2)] * 203):
        with meter.step(b):
            clock.advance(1 / 512)  # windows of 19.5 ms (exact in binary): three to a record
    meter.finish()
    assert SINK_WINDOW_S == 0.05
    steps = [[s["step"] for s in data["steps"]] for data in sink.records]
    assert [s for part in steps for s in part] == list(range(1, 204))  # once each, in order
    # a record per 50 ms of run time at least; the rest when the loader ran out
    assert [(part[0], part[-1]) for part in steps] == [
        (1, 30), (31, 60), (61, 90), (91, 120), (121, 150), (151, 180), (181, 203)]
    assert [data["window"]["steps"] for data in sink.records] == [30] * 6 + [23]
    assert [s["step"] for s in read_run(meter.path).steps] == list(range(1, 204))


@pytest.mark.parametrize(("epoch", "ends", "records"), [
    (7, [14, 28, 42], [14, 28, 42]),  # a third epoch would not fit: cut after two
    (6, [18, 36], [18, 36]),  # three fit (18 steps), a fourth would not
    (5, [20], [20, 30]),  # four fill the window: it ends with the fourth
])
def test_a_window_holds_the_whole_epochs_that_fit_in_it(tmp_path, clock, epoch, ends, records):
    # window 20, six epochs: a loader's end cuts the window only when another epoch as long
    # would not fit in it (a window record per two or three epochs, not per epoch)
    sink = Windows()
    meter = trainpace.Meter(tmp_path / "run", clock=clock, window=20, console=False,
                            report=False, count_flops=False, sinks=[sink])
    for _ in range(6):
        for b in meter.loader([torch.zeros(2)] * epoch):
            with meter.step(b):
                clock.advance(0.01)
    summary = meter.finish()
    assert summary.steps.window_ends == ends
    assert [data["window"]["last_step"] for data in sink.records] == records
    assert summary.steps.total == 6 * epoch


class FiguresOnly(Windows):
    reads_steps = False  # the window figures only


def test_a_goal_set_mid_window_puts_every_step_in_the_run_once_and_no_records_are_kept(
        tmp_path, clock):
    sink = FiguresOnly()
    meter = trainpace.Meter(tmp_path / "run", clock=clock, window=10, console=False,
                            report=False, count_flops=False, sinks=[sink])
    for i, b in enumerate(meter.loader([torch.zeros(2)] * 203), start=1):
        with meter.step(b):
            clock.advance(1 / 512)
            # a goal in the middle of the steps not sent yet, then another in the next ones
            target = {45: 1.0, 47: 0.5, 100: 0.25}.get(i)
            meter.observe(loss=1.0 / i, target=target)
    meter.finish()
    pipeline = meter._pipeline
    assert [s["step"] for s in pipeline.state.series] == list(range(1, 204))
    assert pipeline.state.tracker is not None
    assert [data["steps"] for data in sink.records] == [[]] * 7  # nobody reads them
    assert [data["window"]["steps"] for data in sink.records] == [30] * 6 + [23]
    assert [data["window"]["last_step"] for data in sink.records] == [
        30, 60, 90, 120, 150, 180, 203]


def test_the_training_threads_hand_over_comes_halfway_through_each_window_and_at_its_end(
        tmp_path, clock, monkeypatch):
    """Two loaders of 8 batches, window 5: a hand-over (on the host clock, the writer's lag
    checked; see tests/meter/test_handover.py for the steps it takes) after steps 2 and 5 (the
    window's end), 7, then 8 (the loader ran out: the window ends there), and the next window
    counts from step 8."""
    from trainpace.meter.handover import WriterHandOver

    handed: list[tuple[int, bool]] = []
    real = WriterHandOver.hand_over

    def recording(self, final, flush, ends_window):
        handed.append((self._recorder.steps_closed, ends_window))
        return real(self, final, flush, ends_window)

    monkeypatch.setattr(WriterHandOver, "hand_over", recording)
    meter = trainpace.Meter(tmp_path / "run", clock=clock, window=5, console=False,
                            report=False, count_flops=False)
    for _ in range(2):
        for b in meter.loader([torch.zeros(2)] * 8):
            with meter.step(b):
                clock.advance(0.01)
    meter.finish()
    assert handed == [(2, False), (5, True), (7, False), (8, True),
                      (10, False), (13, True), (15, False), (16, True), (16, True)]
    assert len(read_run(meter.path).steps) == 16


def test_the_sinks_get_the_very_records_of_steps_jsonl(tmp_path, clock):
    # One record per step from the writer's values: the lines on disk and the records a sink
    # reads (made from the window's columns) are equal, types included (ints, None, bools).
    import json

    sink = Windows()
    meter = trainpace.Meter(tmp_path / "run", clock=clock, window=10, console=False,
                            report=False, count_flops=False, sinks=[sink])
    for i, b in enumerate(meter.loader([torch.zeros(3, 2)] * 47), start=1):
        with meter.step(b):
            clock.advance(1 / 256)
            if i % 3 == 0:
                meter.observe(loss=float("nan") if i == 9 else 1.0 / i)
    meter.finish()
    on_disk = [json.loads(line) for line in (meter.path / STEPS_FILE).read_text().splitlines()]
    sent = [s for data in sink.records for s in data["steps"]]
    assert [s["step"] for s in on_disk] == list(range(1, 48))
    assert sent == on_disk
    assert [type(sent[0][k]) for k in ("step", "samples", "micro_batches")] == [int] * 3
    assert sent[8]["loss_nonfinite"] is True and sent[8]["loss"] is None
    assert sent[5]["loss"] == 1.0 / 6 and sent[5]["loss_nonfinite"] is False
    assert sent[0]["loss"] is None and sent[0]["exposed_wait_s"] is None


def test_a_hand_over_with_no_new_steps_is_no_failure(tmp_path, clock, caplog):
    # The loader ran out (its window went out then): the end of the run hands over nothing new.
    sink = Windows()
    meter = trainpace.Meter(tmp_path / "run", clock=clock, window=10, console=False,
                            report=False, count_flops=False, sinks=[sink])
    with caplog.at_level(logging.WARNING):
        for b in meter.loader([torch.zeros(2)] * 10):
            with meter.step(b):
                clock.advance(0.01)
        summary = meter.finish()
    assert not [r for r in caplog.records if "failed" in r.getMessage()]
    assert summary.steps.total == 10
    assert [s["step"] for data in sink.records for s in data["steps"]] == list(range(1, 11))
