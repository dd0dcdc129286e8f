"""The one fan-out: every sink gets every record in order, none holds back the others."""

import logging
import threading
import time

import pytest

from trainpace.runlog import Record
from trainpace.sinks.base import FanOut


class Recording:
    def __init__(self, raises=None, gate=None):
        self.records, self.closed = [], False
        self.raises, self.gate = raises, gate
        self.entered = threading.Event()

    def log(self, record):
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(5)
        if self.raises is not None:
            raise self.raises
        self.records.append(record.step)

    def close(self):
        self.closed = True


class Figures(Recording):
    reads_steps = False


def record(step, steps=0):
    return Record("window", {"window": {}, "steps": [{}] * steps}, step)


def test_every_sink_gets_every_record_in_order_and_is_closed():
    a, b = Recording(), Recording()
    fan = FanOut([a, b])
    for step in range(50):
        fan.log(record(step))
    assert fan.close(timeout_s=5) == []
    assert a.records == b.records == list(range(50)) and a.closed and b.closed
    assert fan.counts() == {"Recording": {"delivered": 50, "dropped": 0}}


def test_a_held_sink_holds_back_neither_the_caller_nor_another_sink():
    gate = threading.Event()
    held, quick = Recording(gate=gate), Recording()
    fan = FanOut([held, quick])
    fan.log(record(0))
    assert held.entered.wait(5)  # record 0 is in the held sink's hands
    for step in range(1, 10):
        fan.log(record(step))  # returns although the held sink takes nothing
    deadline = time.monotonic() + 5
    while len(quick.records) < 10 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert quick.records == list(range(10)) and held.records == []
    gate.set()
    fan.close(timeout_s=5)
    assert held.records == list(range(10))


def test_a_slow_sink_loses_its_oldest_records_and_is_warned_about_once(caplog):
    gate = threading.Event()
    held = Recording(gate=gate)
    fan = FanOut([held], capacity=5)
    with caplog.at_level(logging.WARNING):
        fan.log(record(0))
        assert held.entered.wait(5)
        for step in range(1, 100):
            fan.log(record(step))
    assert sum("slower than the run" in r.getMessage() for r in caplog.records) == 1
    assert fan.counts()["Recording"]["dropped"] == 94
    gate.set()
    fan.close(timeout_s=5)
    assert held.records == [0, 95, 96, 97, 98, 99]  # the newest are kept


def test_a_hanging_sink_is_abandoned_after_the_time_given(caplog):
    release = threading.Event()
    hanging = Recording(gate=release)
    fan = FanOut([hanging])
    fan.log(record(1))
    fan.log(record(2))
    with caplog.at_level(logging.WARNING):
        assert fan.close(timeout_s=0.01) == ["Recording"]
    assert any("abandoned" in r.getMessage() and "sink_timeout_s=0.01s" in r.getMessage()
               for r in caplog.records)
    assert all(t.daemon for t in threading.enumerate() if t.name == "trainpace-sink-Recording")
    release.set()


@pytest.mark.parametrize("raised", [SystemExit(2), KeyboardInterrupt(), RuntimeError("boom")])
def test_whatever_a_sink_raises_is_contained_and_reported_once(raised, caplog):
    sink = Recording(raises=raised)
    fan = FanOut([sink])
    with caplog.at_level(logging.WARNING):
        for step in range(10):
            fan.log(record(step))
        assert fan.close(timeout_s=5) == []  # the thread lived on to the end
    assert sink.closed
    assert fan.counts()["Recording"]["delivered"] == 10
    messages = [r.getMessage() for r in caplog.records]
    assert sum(type(raised).__name__ in m for m in messages) == 1


def test_a_slow_sink_holds_at_most_its_step_budget_in_window_records():
    gate = threading.Event()
    sink = Recording(gate=gate)
    fan = FanOut([sink], capacity=64, capacity_steps=100)
    fan.log(record(0, steps=40))
    assert sink.entered.wait(5)
    for step in range(1, 6):
        fan.log(record(step, steps=40))
    # the first is in the sink's hands; 40-step records wait: two fit in 100 steps
    assert fan.counts()["Recording"]["dropped"] == 3
    gate.set()
    fan.close(timeout_s=5)
    assert sink.records == [0, 4, 5]


def test_whether_any_sink_reads_the_steps():
    assert FanOut([Figures()]).reads_steps is False
    assert FanOut([Figures(), Recording()]).reads_steps is True
    assert FanOut([]).reads_steps is False
