"""Windows of tiny steps: lines written at the boundary, window records at most every 50 ms."""

import threading
import time

import torch

import trainpace
from trainpace.meter.handover import HAND_OVER_S
from trainpace.meter.pipeline import SINK_WINDOW_S
from trainpace.runlog import STEPS_FILE, read_run


class Windows:
    """A sink keeping the window records it gets, with the time each came."""

    def __init__(self):
        self.records = []
        self.lock = threading.Lock()

    def log(self, record):
        if record.kind == "window":
            with self.lock:
                self.records.append((time.monotonic(), record.data))

    def close(self):
        pass

    def steps(self):
        with self.lock:
            return [s["step"] for _, data in self.records for s in data["steps"]]


def lines(path):
    with open(path / STEPS_FILE, "rb") as f:
        return f.read().count(b"\n")


def test_tiny_windows_are_on_disk_at_their_boundary_and_reach_sinks_in_order(tmp_path):
    window, n = 10, 20_000
    sink = Windows()
    meter = trainpace.Meter(tmp_path / "run", window=window, console=False, report=False,
                            count_flops=False, sinks=[sink])
    behind = []
    started = time.perf_counter()
    for i, b in enumerate(meter.loader([torch.zeros(2)] * n), start=1):
        with meter.step(b):
            pass
        if i % 1000 == 1 and i > window:  # a boundary just passed at the step's start
            behind.append(i - lines(meter.path))
    loop_s = time.perf_counter() - started
    meter.finish()
    # at most the step just taken and the window being written by the writer thread
    assert max(behind) <= 2 * window + 1
    # every step once, in order; windows taken together by the writer (more than
    # MERGE_AFTER) reach the sinks as one record, so fewer records than windows
    assert SINK_WINDOW_S == 0.0
    assert sink.steps() == list(range(1, n + 1))
    assert len(sink.records) < n / window and loop_s > 0
    assert [s["step"] for s in read_run(meter.path).steps] == list(range(1, n + 1))


def test_windows_written_at_the_boundary_reach_the_sinks_during_a_pause(tmp_path):
    """A long evaluation after tiny windows: the writer takes them by itself."""
    sink = Windows()
    meter = trainpace.Meter(tmp_path / "run", window=5, console=False, report=False,
                            count_flops=False, sinks=[sink])
    batches = iter(meter.loader([torch.zeros(2)] * 1000))
    for _ in range(300):  # tiny steps: windows written on the training thread
        with meter.step(next(batches)):
            pass
    paused = time.monotonic()
    deadline = paused + 5
    while (not sink.steps() or sink.steps()[-1] < 295) and time.monotonic() < deadline:
        time.sleep(0.01)  # the loop is away (no step, no boundary)
    got = sink.steps()
    arrived = sink.records[-1][0] if sink.records else None
    for b in batches:
        with meter.step(b):
            pass
    meter.finish()
    assert got and got[-1] >= 295  # every window handed over at a boundary before the pause
    assert got == list(range(1, got[-1] + 1))
    assert arrived is not None and arrived - paused < HAND_OVER_S + 2.0  # 2 s: a loaded VM
    assert sink.steps() == list(range(1, 1001))


def test_short_windows_go_to_disk_while_the_writer_is_busy_and_the_loop_never_waits(tmp_path):
    """The writer busy 20 ms with each window record (a slow window observer): the lines of
    short windows are still written at their boundary, in order, and the training thread
    does not wait for the writer (it did, milliseconds a time, when a short window found the
    writer still at the previous one)."""
    window, n = 10, 20_000
    meter = trainpace.Meter(tmp_path / "run", window=window, console=False, report=False,
                            count_flops=False)
    meter._pipeline.observers.append(lambda figures, steps: time.sleep(0.02))
    waits = []
    wait_for = meter._writer.wait_for

    def counted(*args):
        waits.append(args)
        return wait_for(*args)

    meter._writer.wait_for = counted
    behind = []
    for i, b in enumerate(meter.loader([torch.zeros(2)] * n), start=1):
        with meter.step(b):
            pass
        if i % 500 == 1 and i > window:
            behind.append(i - lines(meter.path))
    meter._writer.wait_for = wait_for
    meter.finish()
    assert max(behind) <= 2 * window + 1  # at most the open window and the one being written
    # at most once at the start (the first window is a long one), and after a window that a
    # stall of the machine made longer than 50 ms; the old rule waited 18 times here
    assert len(waits) <= 3
    assert [s["step"] for s in read_run(meter.path).steps] == list(range(1, n + 1))
