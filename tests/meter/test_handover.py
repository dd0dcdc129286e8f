"""How the host clock's steps reach the writer: it takes them from the recorder at its looks,
cut into windows by step counts, and the training thread only marks where a window ends early.
Driven by hand, one call at a time: which thread would make each call is said in the test."""

import json

import pytest
import torch

import trainpace
from trainpace.measure.recorder import StepRecorder
from trainpace.meter import facade
from trainpace.meter.handover import ClosedRows, HandedWindows, WriterHandOver
from trainpace.records import STEP_FIELDS
from trainpace.runlog import read_run

_STEP, _LOSS = STEP_FIELDS.index("step"), STEP_FIELDS.index("loss")


def steps(rec, clock, count):
    for _ in range(count):
        rec.enter(1)
        clock.advance(0.01)
        rec.exit(torch.zeros(4), failed=False)


def shape(windows):
    """Each window taken: (its steps, last_step, final, flush, ends_window)."""
    return [([v[_STEP] for v in w.make_records()], w.last_step, w.final, w.flush,
             w.ends_window) for w in windows]


def test_the_writer_takes_all_but_the_newest_step_cut_at_each_windows_end(clock):
    rec = StepRecorder(clock=clock)
    rows = ClosedRows(rec, window=5)
    assert rows.take() == []  # nothing closed: nothing to take
    steps(rec, clock, 12)
    assert shape(rows.take()) == [
        ([1, 2, 3, 4, 5], 5, False, False, True),
        ([6, 7, 8, 9, 10], 10, False, False, True),
        ([11], 11, False, False, False),  # the window's first steps; 12, the newest, waits
    ]
    assert rows.take() == []
    steps(rec, clock, 4)  # 13..16
    assert shape(rows.take()) == [([12, 13, 14, 15], 15, False, False, True)]


def test_at_a_half_window_the_training_thread_only_lets_the_newest_step_go(clock):
    rec = StepRecorder(clock=clock)
    rows = ClosedRows(rec, window=4)
    steps(rec, clock, 2)
    assert shape(rows.take()) == [([1], 1, False, False, False)]  # 2, the newest, waits
    # the loop enters step 3: step 2 gets no more values, the writer may take it
    assert rows.hand_over(final=False, flush=False, ends_window=False) is False  # no cut
    assert shape(rows.take()) == [([2], 2, False, False, False)]
    steps(rec, clock, 2)
    rows.hand_over(final=False, flush=False, ends_window=True)
    assert shape(rows.take()) == [([3, 4], 4, False, False, True)]


def test_a_cut_ends_the_window_early_and_the_next_counts_from_it(clock):
    rec = StepRecorder(clock=clock)
    rows = ClosedRows(rec, window=5)
    steps(rec, clock, 7)
    assert rows.hand_over(final=False, flush=True, ends_window=True) is True  # loader ran out
    assert shape(rows.take()) == [
        ([1, 2, 3, 4, 5], 5, False, False, True),
        ([6, 7], 7, False, True, True),
    ]
    steps(rec, clock, 6)  # 8..13: the next window ends at 12
    assert shape(rows.take()) == [([8, 9, 10, 11, 12], 12, False, False, True)]
    rows.hand_over(final=True, flush=False, ends_window=True)
    assert shape(rows.take()) == [([13], 13, True, False, True)]


def test_a_cut_with_no_new_step_still_reaches_the_writer(clock):
    # The loader ran out (its window was cut), then the run ends: nothing new, the end still
    # comes through (the pipeline sends what it held back).
    rec = StepRecorder(clock=clock)
    rows = ClosedRows(rec, window=10)
    steps(rec, clock, 3)
    rows.hand_over(final=False, flush=True, ends_window=True)
    assert shape(rows.take()) == [([1, 2, 3], 3, False, True, True)]
    rows.hand_over(final=True, flush=False, ends_window=True)
    assert shape(rows.take()) == [([], 3, True, False, True)]


def test_a_cut_the_writer_sees_before_its_step_waits_for_it(clock):
    # The writer took the steps, then the training thread cut (the cut first, then the
    # newest step may be taken): the cut waits for its step, taken at the next look.
    rec = StepRecorder(clock=clock)
    rows = ClosedRows(rec, window=10)
    steps(rec, clock, 3)
    rows._cuts.append((3, False, True))  # the cut is in, its step not yet released
    assert shape(rows.take()) == [([1, 2], 2, False, False, False)]
    rec.close_newest()
    assert shape(rows.take()) == [([3], 3, False, True, True)]


def test_the_writer_counts_the_steps_to_the_loops_next_hand_over(clock):
    # Window 10: the loop hands over at 5, 10, 15, ...; from a cut, every 5 after it. Counted
    # from the loop's last closed step, whatever the writer took.
    rec = StepRecorder(clock=clock)
    rows = ClosedRows(rec, window=10)
    assert rows.steps_to_hand_over() == 5
    steps(rec, clock, 4)
    rows.take()  # 1..3 (4, the newest, waits)
    assert rows.steps_to_hand_over() == 1  # from 4 to 5
    steps(rec, clock, 3)
    assert rows.steps_to_hand_over() == 3  # from 7 to the window's end, 10
    rows.hand_over(final=False, flush=True, ends_window=True)  # the loader ran out at 7
    rows.take()
    assert rows.steps_to_hand_over() == 5  # the next window counts from 7: its middle is 12
    steps(rec, clock, 9)
    assert rows.steps_to_hand_over() == 1  # from 16 to that window's end, 17
    steps(rec, clock, 5)  # not taken: the next window (17..27) counts on alike
    assert rows.steps_to_hand_over() == 1  # from 21 to its middle, 22


def test_windows_are_due_once_a_half_window_waits_to_be_taken(clock, monkeypatch):
    rec = StepRecorder(clock=clock)
    rows = ClosedRows(rec, window=10)
    steps(rec, clock, 4)
    assert not rows.due()  # 4 closed, none taken: less than a half window (5)
    steps(rec, clock, 1)
    assert rows.due()
    rows.take()  # 1..4
    assert not rows.due()
    monkeypatch.setattr(rec, "take_ready", lambda final: list)  # a device clock's read-back
    handed = HandedWindows(rec)
    assert not handed.due()
    handed.hand_over(final=False, flush=False, ends_window=False)
    assert handed.due()
    handed.take()
    assert not handed.due()


def test_a_loss_observed_after_its_step_is_its_however_often_the_writer_looks(clock):
    rec = StepRecorder(clock=clock)
    rows = ClosedRows(rec, window=10)
    taken = []
    for i in range(1, 5):
        steps(rec, clock, 1)
        taken += rows.take()  # the writer looks between the step and its loss
        rec.observe(loss=float(i))
    rows.hand_over(final=True, flush=False, ends_window=True)
    taken += rows.take()
    assert [v[_LOSS] for w in taken for v in w.make_records()] == [1.0, 2.0, 3.0, 4.0]
    rec.observe(loss=9.0)  # after the cut: the next step's
    steps(rec, clock, 1)
    rows.hand_over(final=True, flush=False, ends_window=True)
    assert [v[_LOSS] for w in rows.take() for v in w.make_records()] == [9.0]


class HostEvents:
    """A device clock whose events complete at once, on the test's manual clock: the Meter's
    device path (read back on the training thread, handed over), without a device."""

    name = "cuda"

    def __init__(self, clock):
        self.clock = clock

    def mark(self):
        return self.clock.now

    def ready(self, marker):
        return True

    def elapsed_s(self, start, end):
        return end - start

    def wait(self, marker):
        pass

    def release(self, marker):
        pass


def test_a_device_clocks_steps_are_handed_over_twice_a_window_and_all_reach_the_folder(
        tmp_path, clock, monkeypatch):
    monkeypatch.setattr(facade, "device_timer_for", lambda device: HostEvents(clock))
    handed = []
    real = WriterHandOver.hand_over

    def recording(self, final, flush, ends_window):
        handed.append((self._recorder.steps_closed, type(self._source).__name__))
        return real(self, final, flush, ends_window)

    monkeypatch.setattr(WriterHandOver, "hand_over", recording)
    meter = trainpace.Meter(tmp_path / "run", clock=clock, window=10, console=False,
                            report=False, count_flops=False)
    for i, b in enumerate(meter.loader([torch.zeros(2)] * 25)):
        with meter.step(b):
            clock.advance(0.01 * (1 + i % 2))
            meter.observe(loss=float(i))
    summary = meter.finish()
    # halfway and at each window's end; then the loader's end and the run's
    assert [step for step, _ in handed] == [5, 10, 15, 20, 25, 25]
    assert {source for _, source in handed} == {HandedWindows.__name__}
    run = read_run(meter.path)
    assert [s["step"] for s in run.steps] == list(range(1, 26))
    assert [s["loss"] for s in run.steps] == [float(i) for i in range(25)]
    # the device's times between the events (the fetch included), not the host cycle
    assert [s["step_s"] for s in run.steps] == pytest.approx([0.01 * (1 + i % 2)
                                                              for i in range(25)])
    assert summary.steps.total == 25
    assert json.loads((meter.path / "meta.json").read_text())["clock"] == "cuda"


def test_the_first_two_hand_overs_wake_the_idle_writer_and_no_later_one(
        tmp_path, clock, monkeypatch):
    # Until it has found steps at two looks the writer does not know the loop's pace and
    # sleeps its longest; the loop would then wait for it at the first window's end. The
    # first two hand-overs wake it (a system call each), the others never.
    from trainpace.sinks.background import Writer

    woken: list[int] = []
    meter = trainpace.Meter(tmp_path / "run", clock=clock, window=10, console=False,
                            report=False, count_flops=False)
    real = Writer.wake

    def recording(self):
        woken.append(meter._recorder.steps_closed)
        real(self)

    monkeypatch.setattr(Writer, "wake", recording)
    for b in [torch.zeros(2)] * 40:
        with meter.step(b):
            clock.advance(0.01)
    summary = meter.finish()
    assert woken == [5, 10]
    assert summary.steps.total == 40


class LaggingWriter:
    """A writer whose lines reach ``written_step``; records what the loop waits for."""

    def __init__(self):
        self.written_step = 0
        self.waited_for: list[int] = []

    def wake(self):
        pass

    def wait_for(self, step, timeout_s):
        self.waited_for.append(step)
        return True


class NoMeta:
    def __init__(self):
        self.last = {"tokens_counted": None}


def test_the_loop_waits_only_for_lines_older_than_half_a_window(clock):
    # window 10 (halves of 5): the loop waits for a writer that has not written the
    # previous half; where a loader runs out 2 steps after the previous hand-over, only for
    # the lines older than half a window: a SIGKILL still loses a window at most
    rec = StepRecorder(clock=clock)
    writer = LaggingWriter()
    hand = WriterHandOver(recorder=rec, source=ClosedRows(rec, window=10), writer=writer,
                          meta=NoMeta(), half_window=5)
    for closed, flush, written in [(5, False, 5), (10, False, 5), (15, False, 4),
                                   (20, False, 20), (22, True, 18), (24, True, 18)]:
        steps(rec, clock, closed - rec.steps_closed)
        writer.written_step = written
        hand.hand_over(final=False, flush=flush, ends_window=closed % 10 == 0 or flush)
    # at 15: 4 written of the previous hand-over's 10; at 22, 18 of 20 is enough (17 are
    # older than half a window); at 24 it is not (19)
    assert writer.waited_for == [10, 19]


def test_a_windows_middle_is_half_its_steps_and_at_least_one():
    from trainpace.config import half_window

    assert [half_window(w) for w in (1, 2, 5, 10, 101)] == [1, 1, 2, 5, 50]
