"""The Meter's one writer thread: order, coalesced windows, contained failures."""

import sys
import threading
import time

from trainpace.sinks.background import Writer


def nothing(windows):
    pass


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
    writer = Writer(nothing, lambda e: None, poll_s=poll)
    assert looked.wait(10)
    writer.submit_window("w")  # after the writer's look: it sleeps on, 60 s
    threading.Event().wait(0.2)
    assert writer.windows_written == 0  # not woken (a slower machine only sleeps longer)
    assert writer.wait_for(1, timeout_s=10)  # a wait wakes it
    assert writer.close(timeout_s=10)


def test_an_idle_writer_finds_a_window_at_its_next_look():
    poll, looked = asleep_for(0.01)
    writer = Writer(nothing, lambda e: None, poll_s=poll)
    assert looked.wait(10)
    writer.submit_window("w")
    deadline = time.monotonic() + 10
    while writer.windows_written == 0 and time.monotonic() < deadline:
        threading.Event().wait(0.005)  # no wait_for: it would wake the writer
    assert writer.windows_written == 1
    assert writer.close(timeout_s=10)


def test_close_wakes_a_sleeping_writer_and_drains_the_queue():
    seen = []
    poll, looked = asleep_for(60.0)
    writer = Writer(nothing, lambda e: None, poll_s=poll)
    assert looked.wait(10)
    writer.submit(seen.append, "job")
    assert writer.close(timeout_s=10)  # not 60 s later
    assert seen == ["job"]


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
        taken.append(list(windows))

    writer = Writer(on_windows, lambda e: None)
    numbers = [writer.submit_window(0)]
    assert busy.wait(5)  # the writer holds window 0: the next four wait for it
    numbers += [writer.submit_window(i) for i in range(1, 5)]
    assert numbers == [1, 2, 3, 4, 5]
    gate.set()
    assert writer.wait_for(5, timeout_s=5)
    writer.close()
    assert taken == [[0], [1, 2, 3, 4]]  # all, in order; the four in one call
    assert writer.windows_written == 5


def test_wait_for_gives_up_when_the_window_is_not_written():
    release = threading.Event()
    writer = Writer(lambda windows: release.wait(5), lambda e: None)
    writer.submit_window("held")
    assert writer.wait_for(1, timeout_s=0.01) is False
    release.set()
    assert writer.wait_for(1, timeout_s=5) is True
    assert writer.close(timeout_s=5)


def test_a_window_job_raising_is_reported_and_counted_written():
    errors = []
    writer = Writer(lambda windows: 1 / 0, errors.append)
    writer.submit_window("bad")
    assert writer.wait_for(1, timeout_s=5)  # no one waits forever on a window that failed
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

    writer = Writer(on_windows, lambda e: None, on_idle=on_idle,
                    holding=lambda: bool(held), idle_s=0.01)
    writer.submit_window("tiny")
    assert idled.wait(10)  # event-driven: however loaded the machine, it comes
    writer.close()
    assert held == []


def test_nothing_held_back_means_no_idle_work():
    calls = []
    writer = Writer(nothing, lambda e: None, on_idle=lambda: calls.append(1),
                    holding=lambda: False, idle_s=0.001)
    writer.submit_window("written in full")
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

    writer = Writer(nothing, lambda e: None, after_windows=after)
    writer.submit_window("w")
    assert writer.wait_for(1, timeout_s=5)  # written, though its figures are still held
    assert in_after.wait(5)
    assert writer.windows_written == 1 and writer.windows_sent == 0
    assert writer.wait_for(1, timeout_s=0.01, sent=True) is False
    release.set()
    assert writer.wait_for(1, timeout_s=5, sent=True)
    writer.close()
    assert writer.windows_sent == 1


def test_jobs_and_windows_keep_their_order_and_windows_waiting_go_together():
    seen = []
    gate, busy = threading.Event(), threading.Event()

    def hold():
        busy.set()
        gate.wait(5)

    writer = Writer(lambda windows: seen.append(list(windows)), lambda e: None,
                    after_windows=lambda: seen.append("after"))
    writer.submit(hold)
    assert busy.wait(5)
    for i in range(3):
        writer.submit_window(i)
    writer.submit(seen.append, "job")
    writer.submit_window(3)
    gate.set()
    writer.close()
    assert seen == [[0, 1, 2], "after", "job", [3], "after"]


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
    """A writer inside the first part of window "a"'s record, and that record's work."""
    work = TwoParts(seen)
    writer = Writer(lambda windows: seen.append(list(windows)), lambda e: None,
                    after_windows=work)
    writer.submit_window("a")
    assert work.in_part.wait(5)
    return writer, work


def test_windows_handed_over_between_parts_get_their_lines_before_the_parts_go_on():
    # The figures and sinks come in parts; a window handed over meanwhile is written (what
    # a SIGKILL would lose) at the next pause, not after the whole record's work.
    seen = []
    writer, work = in_first_part(seen)
    writer.submit_window("b")
    work.go_on.set()
    writer.close()
    assert seen == [["a"], "part 1", ["b"], "part 2"]
    assert writer.windows_written == writer.windows_sent == 2


def test_a_job_queued_before_windows_keeps_them_behind_it_while_parts_run():
    seen = []
    writer, work = in_first_part(seen)
    writer.submit(seen.append, "job")
    writer.submit_window("b")
    work.go_on.set()
    writer.close()
    assert seen == [["a"], "part 1", "part 2", "job", ["b"]]


def test_the_writer_pauses_between_parts_only():
    pauses = []

    def parts():
        yield
        yield

    def pause_s():
        pauses.append(1)
        return 0.0

    writer = Writer(nothing, lambda e: None, after_windows=parts, pause_s=pause_s)
    writer.submit_window("w")
    assert writer.wait_for(1, timeout_s=10, sent=True)
    writer.close()
    assert len(pauses) == 2  # three parts, two pauses
    assert writer.windows_sent == 1


def test_a_part_that_raises_is_reported_and_the_window_still_counts_sent():
    errors = []

    def parts():
        yield
        raise ValueError("figures")

    writer = Writer(nothing, errors.append, after_windows=parts)
    writer.submit_window("w")
    writer.close()
    assert [type(e) for e in errors] == [ValueError]
    assert writer.windows_sent == 1


def test_a_writer_behind_the_loop_does_not_pause():
    # Windows waiting between two parts: their lines are written, and no pause follows (the
    # writer catches up first); with nothing waiting, it pauses.
    pauses, work = [], None

    def pause_s():
        pauses.append(writer.windows_written)
        return 0.0

    def parts():
        yield  # nothing waits yet: a pause
        work.go_on.set()
        writer.submit_window("b")
        yield  # "b" waits: its lines, no pause

    class Work:
        go_on = threading.Event()

        def __call__(self):
            return parts() if not self.go_on.is_set() else None

    work = Work()
    writer = Writer(nothing, lambda e: None, after_windows=work, pause_s=pause_s)
    writer.submit_window("a")
    assert writer.wait_for(2, timeout_s=10, sent=True)
    writer.close()  # a stop waiting is no time to pause either
    assert pauses == [1]
    assert writer.windows_written == writer.windows_sent == 2
