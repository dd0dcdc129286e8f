"""The Meter's one writer thread: order, coalesced windows, contained failures."""

import sys
import threading
import time
from collections import deque
from typing import NamedTuple

from trainpace.sinks.background import Writer


def nothing(windows):
    pass


class W(NamedTuple):
    """A window as the writer counts it: the step it reaches."""

    last_step: int


class Handed:
    """Windows handed to the writer (its ``take_windows``): an append that wakes nobody."""

    def __init__(self):
        self._windows = deque()

    def hand(self, *steps):
        self._windows.extend(W(step) for step in steps)

    def take(self):
        taken = []
        while self._windows:
            taken.append(self._windows.popleft())
        return taken


def writer_of(on_windows=nothing, on_error=lambda e: None, **kwargs):
    handed = Handed()
    return Writer(on_windows, on_error, take_windows=handed.take, **kwargs), handed


def steps_of(windows):
    return [w.last_step for w in windows]


def test_calls_run_in_order_off_the_calling_thread_and_close_drains():
    seen, threads = [], set()
    errors = []
    writer = Writer(nothing, errors.append)
    for i in range(200):
        writer.submit(lambda i=i: (seen.append(i), threads.add(threading.current_thread().name)))
    writer.close()
    assert seen == list(range(200))
    assert threads == {"trainpace-writer"}
    assert errors == []
    assert writer.closed


def asleep_for(poll_s):
    """A ``poll_s`` for the Writer that says when the writer has looked at its queue and is
    about to sleep (it looks before it asks how long to sleep)."""
    looked = threading.Event()

    def poll():
        looked.set()
        return poll_s

    return poll, looked


def test_a_window_handed_over_wakes_nobody_the_writer_finds_it_when_it_looks():
    poll, looked = asleep_for(60.0)
    writer, handed = writer_of(poll_s=poll)
    assert looked.wait(10)
    handed.hand(7)  # after the writer's look: it sleeps on, 60 s
    threading.Event().wait(0.2)
    assert writer.written_step == 0  # not woken (a slower machine only sleeps longer)
    assert writer.wait_for(7, timeout_s=10)  # a wait wakes it
    assert writer.close(timeout_s=10)


def test_an_idle_writer_finds_a_window_at_its_next_look():
    poll, looked = asleep_for(0.01)
    writer, handed = writer_of(poll_s=poll)
    assert looked.wait(10)
    handed.hand(3)
    deadline = time.monotonic() + 10
    while writer.written_step == 0 and time.monotonic() < deadline:
        threading.Event().wait(0.005)  # no wait_for: it would wake the writer
    assert writer.written_step == 3
    assert writer.close(timeout_s=10)


def test_close_wakes_a_sleeping_writer_and_drains_the_queue():
    seen = []
    poll, looked = asleep_for(60.0)
    writer, handed = writer_of(lambda windows: seen.append(steps_of(windows)), poll_s=poll)
    assert looked.wait(10)
    writer.submit(seen.append, "job")
    handed.hand(4)  # made before close(): written before the writer stops
    assert writer.close(timeout_s=10)  # not 60 s later
    assert seen == [[4], "job"] and writer.written_step == writer.sent_step == 4


def test_a_failing_call_is_reported_and_the_writer_goes_on():
    seen, errors = [], []
    writer = Writer(nothing, errors.append)
    writer.submit(lambda: 1 / 0)
    writer.submit(seen.append, "after")
    writer.close()
    writer.close()  # idempotent
    assert seen == ["after"]
    assert [type(e) for e in errors] == [ZeroDivisionError]


def test_windows_handed_over_faster_than_written_are_taken_together():
    taken = []
    gate, busy = threading.Event(), threading.Event()

    def on_windows(windows):
        busy.set()
        gate.wait(5)
        taken.append(steps_of(windows))

    writer, handed = writer_of(on_windows)
    handed.hand(10)
    assert busy.wait(5)  # the writer holds the first window: the next four wait for it
    handed.hand(20, 30, 40, 50)
    gate.set()
    assert writer.wait_for(50, timeout_s=5)
    writer.close()
    assert taken == [[10], [20, 30, 40, 50]]  # all, in order; the four in one call
    assert writer.written_step == 50


def test_wait_for_gives_up_when_the_window_is_not_written():
    release = threading.Event()
    writer, handed = writer_of(lambda windows: release.wait(5))
    handed.hand(9)
    assert writer.wait_for(9, timeout_s=0.01) is False
    release.set()
    assert writer.wait_for(9, timeout_s=5) is True
    assert writer.close(timeout_s=5)


def test_a_window_job_raising_is_reported_and_counted_written():
    errors = []
    writer, handed = writer_of(lambda windows: 1 / 0, errors.append)
    handed.hand(2)
    assert writer.wait_for(2, timeout_s=5)  # no one waits forever on a window that failed
    writer.close()
    assert [type(e) for e in errors] == [ZeroDivisionError]


def test_a_job_raising_systemexit_does_not_end_the_writer():
    seen, errors = [], []
    writer = Writer(nothing, errors.append)
    writer.submit(sys.exit, 3)
    writer.submit(seen.append, "after")
    writer.close()
    assert seen == ["after"]
    assert [type(e) for e in errors] == [SystemExit]


def test_work_held_back_goes_out_when_no_window_follows():
    # A window whose record waits for the next (tiny steps): when the loop stops between
    # windows, the writer sends it after idle_s, once, and waits quietly again after that.
    held, idled = [], threading.Event()

    def on_windows(windows):
        held.extend(windows)

    def on_idle():
        held.clear()
        idled.set()

    writer, handed = writer_of(on_windows, on_idle=on_idle, holding=lambda: bool(held),
                               idle_s=lambda: 0.01)
    handed.hand(1)
    assert idled.wait(10)  # event-driven: however loaded the machine, it comes
    writer.close()
    assert held == []


def test_close_sends_the_work_held_back():
    # a quiet run's windows wait QUIET_HOLD_S for their columns: at close they go out, once,
    # though no idle time passed
    held, sent = [], []

    def on_idle():
        sent.extend(held)
        held.clear()

    writer, handed = writer_of(held.extend, on_idle=on_idle, holding=lambda: bool(held),
                               idle_s=lambda: 3600.0)
    handed.hand(1, 2)
    assert writer.close(timeout_s=60)
    assert (steps_of(sent), held) == ([1, 2], [])


def test_nothing_held_back_means_no_idle_work():
    calls = []
    writer, handed = writer_of(on_idle=lambda: calls.append(1), holding=lambda: False,
                               idle_s=lambda: 0.001)
    handed.hand(1)  # written in full
    assert writer.wait_for(1, timeout_s=10)
    writer.close()
    assert calls == []


def test_windows_count_written_before_their_figures_are_made():
    # What a SIGKILL would lose waits for on_windows only: a hand-over waiting for the
    # lines is not held up by the figures and sinks that follow (after_windows).
    in_after, release = threading.Event(), threading.Event()

    def after():
        in_after.set()
        release.wait(5)

    writer, handed = writer_of(after_windows=after)
    handed.hand(5)
    assert writer.wait_for(5, timeout_s=5)  # written, though its figures are still held
    assert in_after.wait(5)
    assert writer.written_step == 5 and writer.sent_step == 0
    assert writer.wait_for(5, timeout_s=0.01, sent=True) is False
    release.set()
    assert writer.wait_for(5, timeout_s=5, sent=True)
    writer.close()
    assert writer.sent_step == 5


def test_windows_found_at_a_look_come_before_the_jobs_queued_and_go_together():
    seen = []
    gate, busy = threading.Event(), threading.Event()

    def hold():
        busy.set()
        gate.wait(5)

    writer, handed = writer_of(lambda windows: seen.append(steps_of(windows)),
                               after_windows=lambda: seen.append("after"))
    writer.submit(hold)
    assert busy.wait(5)
    handed.hand(1, 2, 3)
    writer.submit(seen.append, "job")
    writer.submit(seen.append, "job 2")
    gate.set()
    writer.close()
    assert seen == [[1, 2, 3], "after", "job", "job 2"]


class TwoParts:
    """A window record's work in two parts; the first waits for ``go_on`` (once only: later
    windows' records are done in one go)."""

    def __init__(self, seen):
        self.seen = seen
        self.in_part, self.go_on = threading.Event(), threading.Event()

    def __call__(self):
        return None if self.in_part.is_set() else self.parts()

    def parts(self):
        self.seen.append("part 1")
        self.in_part.set()
        self.go_on.wait(5)
        yield
        self.seen.append("part 2")


def in_first_part(seen):
    """A writer inside the first part of window 1's record, that record's work, and the
    windows handed to it."""
    work = TwoParts(seen)
    writer, handed = writer_of(lambda windows: seen.append(steps_of(windows)),
                               after_windows=work)
    handed.hand(1)
    assert work.in_part.wait(5)
    return writer, work, handed


def test_windows_handed_over_between_parts_get_their_lines_before_the_parts_go_on():
    # The figures and sinks come in parts; a window handed over meanwhile is written (what
    # a SIGKILL would lose) at the next pause, not after the whole record's work.
    seen = []
    writer, work, handed = in_first_part(seen)
    handed.hand(2)
    work.go_on.set()
    writer.close()
    assert seen == [[1], "part 1", [2], "part 2"]
    assert writer.written_step == writer.sent_step == 2


def test_a_job_queued_while_parts_run_waits_for_them():
    seen = []
    writer, work, _handed = in_first_part(seen)
    writer.submit(seen.append, "job")
    work.go_on.set()
    writer.close()
    assert seen == [[1], "part 1", "part 2", "job"]


def test_the_writer_pauses_between_parts_only():
    pauses = []

    def parts():
        yield
        yield

    def pause_s():
        pauses.append(1)
        return 0.0

    writer, handed = writer_of(after_windows=parts, pause_s=pause_s)
    handed.hand(1)
    assert writer.wait_for(1, timeout_s=10, sent=True)
    writer.close()
    assert len(pauses) == 2  # three parts, two pauses
    assert writer.sent_step == 1


def test_a_part_that_raises_is_reported_and_the_window_still_counts_sent():
    errors = []

    def parts():
        yield
        raise ValueError("figures")

    writer, handed = writer_of(on_error=errors.append, after_windows=parts)
    handed.hand(1)
    writer.close()
    assert [type(e) for e in errors] == [ValueError]
    assert writer.sent_step == 1


def test_a_writer_behind_the_loop_does_not_pause():
    # Windows waiting between two parts: their lines are written, and no pause follows (the
    # writer catches up first); with nothing waiting, it pauses.
    pauses, work = [], None

    def pause_s():
        pauses.append(writer.written_step)
        return 0.0

    def parts():
        yield  # nothing waits yet: a pause
        work.go_on.set()
        handed.hand(2)
        yield  # window 2 waits: its lines, no pause

    class Work:
        go_on = threading.Event()

        def __call__(self):
            return parts() if not self.go_on.is_set() else None

    work = Work()
    writer, handed = writer_of(after_windows=work, pause_s=pause_s)
    handed.hand(1)
    assert writer.wait_for(2, timeout_s=10, sent=True)
    writer.close()  # a stop waiting is no time to pause either
    assert pauses == [1]
    assert writer.written_step == writer.sent_step == 2


def test_a_look_that_raises_is_reported_and_the_writer_looks_again():
    errors, looks = [], []

    def take():
        looks.append(1)
        if len(looks) == 1:
            raise OSError("taking the steps")
        return [W(8)] if len(looks) == 2 else []

    writer = Writer(nothing, errors.append, take_windows=take, poll_s=lambda: 0.001)
    assert writer.wait_for(8, timeout_s=10)
    writer.close()
    assert [type(e) for e in errors] == [OSError]


def test_a_window_that_reaches_no_further_step_is_still_sent():
    # The run's end, cut where the steps were all taken already: a window of no new step
    # still has its work (the records held back go out then).
    sends = []
    writer, handed = writer_of(after_windows=lambda: sends.append(writer.written_step))
    handed.hand(45)
    assert writer.wait_for(45, timeout_s=10, sent=True)
    handed.hand(45)
    writer.close()
    assert sends == [45, 45]


def test_after_a_look_that_found_windows_the_writer_looks_again_at_once_only_when_due():
    # Steps far shorter than the writer's work: a half window closed while it wrote, and it
    # looks again at once. Otherwise it sleeps first: a look that would find a step or two
    # is a write at its full fixed cost.
    takes, due = [], [False]
    poll, looked = asleep_for(60.0)
    handed = Handed()

    def take():
        takes.append(1)
        return handed.take()

    writer = Writer(nothing, lambda e: None, take_windows=take, poll_s=poll,
                    due=lambda: due[0])
    assert looked.wait(10)
    looked.clear()
    handed.hand(5)
    writer.wake()
    assert looked.wait(10)  # woken: one look found window 5, and the writer sleeps again
    assert len(takes) == 2 and writer.written_step == 5
    looked.clear()
    due[0] = True  # this time a half window closes while it writes
    handed.hand(10)
    writer.wake()
    assert looked.wait(10)
    assert len(takes) == 4  # the look, then one more at once (it found nothing)
    assert writer.close(timeout_s=10)


def test_between_two_parts_the_writer_takes_windows_only_when_due():
    takes, part, due = [], [0], [False]
    handed = Handed()

    def take():
        takes.append(part[0])
        return handed.take()

    def parts():
        if part[0]:
            return  # the second window's work: nothing to check there
        part[0] = 1
        handed.hand(2)  # a step closed meanwhile, not a half window
        yield
        part[0], due[0] = 2, True
        yield
        part[0] = 3

    writer = Writer(nothing, lambda e: None, take_windows=take, after_windows=parts,
                    poll_s=lambda: 60.0, due=lambda: due[0])
    handed.hand(1)
    assert writer.wait_for(2, timeout_s=10)
    # looks before the work (one or two: the first may come before window 1), then a take
    # after the second part only (window 2 due by then), none after the first
    assert 2 in takes and 1 not in takes
    assert writer.close(timeout_s=10)
