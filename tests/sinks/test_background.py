import logging
import sys
import threading
import time

import pytest

from trainpace.runlog import Record
from trainpace.sinks.background import BackgroundWriter, SinkThread, close_all


def test_calls_run_in_order_off_the_calling_thread_and_close_drains():
    seen, threads = [], set()
    errors = []
    writer = BackgroundWriter(errors.append)
    for i in range(200):
        writer.submit(lambda i=i: (seen.append(i), threads.add(threading.current_thread().name)))
    writer.close()
    assert seen == list(range(200))
    assert threads == {"trainpace-writer"}
    assert errors == []
    assert writer.closed


def test_a_failing_call_is_reported_and_the_writer_goes_on():
    seen, errors = [], []
    writer = BackgroundWriter(errors.append)
    writer.submit(lambda: 1 / 0)
    writer.submit(seen.append, "after")
    writer.close()
    writer.close()  # idempotent
    assert seen == ["after"]
    assert [type(e) for e in errors] == [ZeroDivisionError]


def test_windows_handed_over_faster_than_written_are_taken_together():
    taken = []
    gate = threading.Event()

    def on_windows(windows):
        gate.wait(5)
        taken.append(list(windows))

    writer = BackgroundWriter(lambda e: None, on_windows=on_windows)
    numbers = [writer.submit_window(i) for i in range(5)]
    assert numbers == [1, 2, 3, 4, 5]
    gate.set()
    assert writer.wait_for(5, timeout_s=5)
    writer.close()
    assert [w for batch in taken for w in batch] == [0, 1, 2, 3, 4]  # all, in order
    assert len(taken) < 5  # the first one held the writer: the rest came in together
    assert writer.windows_written == 5


def test_wait_for_gives_up_after_its_timeout():
    writer = BackgroundWriter(lambda e: None, on_windows=lambda w: time.sleep(1.0))
    writer.submit_window("slow")
    started = time.monotonic()
    assert writer.wait_for(1, timeout_s=0.05) is False
    assert time.monotonic() - started < 0.5
    assert writer.close(timeout_s=5)


def test_a_job_raising_systemexit_does_not_end_the_writer():
    seen, errors = [], []
    writer = BackgroundWriter(errors.append)
    writer.submit(sys.exit, 3)
    writer.submit(seen.append, "after")
    writer.close()
    assert seen == ["after"]
    assert [type(e) for e in errors] == [SystemExit]


class Recording:
    def __init__(self, delay_s=0.0, raises=None):
        self.records, self.closed = [], False
        self.delay_s, self.raises = delay_s, raises

    def log(self, record):
        time.sleep(self.delay_s)
        if self.raises is not None:
            raise self.raises
        self.records.append(record.step)

    def close(self):
        self.closed = True


def record(step):
    return Record("window", {"window": {}, "steps": []}, step)


def test_a_sink_gets_every_record_in_order_and_is_closed():
    sink = Recording()
    thread = SinkThread(sink)
    for step in range(50):
        thread.log(record(step))
    assert thread.close(timeout_s=5)
    assert sink.records == list(range(50)) and sink.closed
    assert (thread.delivered, thread.dropped) == (50, 0)


def test_a_slow_sink_loses_its_oldest_records_never_blocks_and_warns_once(caplog):
    sink = Recording(delay_s=0.2)
    thread = SinkThread(sink, capacity=5)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        for step in range(100):
            thread.log(record(step))
    assert time.monotonic() - started < 0.15  # log() never waited for the sink
    assert thread.dropped >= 90
    assert sum("slower than the run" in r.getMessage() for r in caplog.records) == 1
    thread.close(timeout_s=5)
    assert sink.records[-5:] == list(range(95, 100))  # the newest are kept


def test_a_hanging_sink_is_abandoned_after_its_timeout(caplog):
    release = threading.Event()

    class Hanging(Recording):
        def log(self, record):
            release.wait()

    thread = SinkThread(Hanging())
    thread.log(record(1))
    thread.log(record(2))
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        assert close_all([thread], timeout_s=0.2) == ["Hanging"]
    assert 0.15 < time.monotonic() - started < 1.0
    assert any("abandoned" in r.getMessage() and "sink_timeout_s=0.2s" in r.getMessage()
               for r in caplog.records)
    assert thread._thread.daemon  # the interpreter's exit does not wait for it
    release.set()


@pytest.mark.parametrize("raised", [SystemExit(2), KeyboardInterrupt(), RuntimeError("boom")])
def test_whatever_a_sink_raises_is_contained_and_reported_once(raised, caplog):
    sink = Recording(raises=raised)
    thread = SinkThread(sink)
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        for step in range(10):
            thread.log(record(step))
        assert thread.close(timeout_s=5)  # the thread lived on to the end
    assert sink.closed
    assert thread.errors == 10 and thread.delivered == 10
    messages = [r.getMessage() for r in caplog.records]
    assert sum(type(raised).__name__ in m for m in messages) == 1


def test_an_armed_writer_runs_on_idle_once_no_job_came_for_idle_s():
    idle = []
    writer = BackgroundWriter(lambda e: None, on_idle=lambda: idle.append(time.monotonic()),
                              idle_s=0.05)
    time.sleep(0.2)
    assert idle == []  # never armed: never woken for nothing
    armed = time.monotonic()
    writer.arm()
    deadline = time.monotonic() + 5
    while not idle and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(idle) == 1 and idle[0] - armed >= 0.05
    time.sleep(0.2)
    assert len(idle) == 1  # once per arm()
    assert writer.close(timeout_s=5)


def test_a_slow_sink_holds_at_most_its_step_budget_in_window_records():
    gate, taken = threading.Event(), threading.Event()

    class Held:
        def __init__(self):
            self.got = []

        def log(self, rec):
            taken.set()
            gate.wait(5)
            self.got.append(rec.step)

        def close(self):
            pass

    sink = Held()
    thread = SinkThread(sink, capacity=64, capacity_steps=100)
    windows = [Record("window", {"window": {}, "steps": [{}] * 40}, step) for step in range(6)]
    thread.log(windows[0])
    assert taken.wait(5)
    for rec in windows[1:]:
        thread.log(rec)
    # the first is in the sink's hands; 40-step records wait: two fit in 100 steps
    assert thread.dropped == 3
    gate.set()
    thread.close(timeout_s=5)
    assert sink.got == [0, 4, 5]
