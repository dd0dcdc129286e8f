import logging
import time

import pytest

from trainpace.errors import ConfigError
from trainpace.sampling.sampler import Sampler


class Clock:
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


def _scripted(values):
    readings = iter(values)

    def read():
        value = next(readings)
        return {"value": value}, {"value": value}

    return read


def test_rows_and_time_weighted_aggregates_with_a_manual_clock():
    clock = Clock()
    sampler = Sampler(_scripted([10.0, 30.0, None, 50.0]), interval_s=0.1, clock=clock, t0=99.0)
    for step in (1.0, 1.0, 0.5, 0.5):  # readings at t_s 2, 3, 3.5, 4
        clock.now += step
        sampler.sample_once()
    rows = sampler.drain_rows()
    assert [r["t_s"] for r in rows] == [2.0, 3.0, 3.5, 4.0]
    assert [r["value"] for r in rows] == [10.0, 30.0, None, 50.0]
    assert sampler.drain_rows() == []
    # first reading covers (1, 2] (sampling started at t_s 1), then (2, 3], (3, 3.5] unknown, (3.5, 4]
    found = sampler.aggregate("value", 1.0, 4.0)
    assert found.mean == pytest.approx((10 * 1 + 30 * 1 + 50 * 0.5) / 2.5)
    assert (found.min, found.max, found.readings) == (10.0, 50.0, 3)
    assert sampler.aggregate("value", 2.5, 3.0).mean == 30.0
    assert sampler.readings == 4


def test_t0_can_be_set_until_the_first_reading():
    clock = Clock(10.0)
    sampler = Sampler(_scripted([1.0, 2.0]), clock=clock)
    clock.now = 12.0
    sampler.set_t0(11.0)  # the run started at 11: sampling began 1 s into it
    clock.now = 13.0
    assert sampler.sample_once()["t_s"] == 2.0
    assert sampler.aggregate("value", 0.0, 2.0).readings == 1
    assert sampler.aggregate("value", 1.5, 2.0).mean == 1.0
    with pytest.raises(RuntimeError, match="t0 cannot move after the first reading"):
        sampler.set_t0(0.0)


def test_a_failing_reading_is_contained_and_logged_once(caplog):
    calls = []

    def read():
        calls.append(1)
        if len(calls) < 3:
            raise OSError("sensor gone")
        return {"ok": 1}, {"ok": 1.0}

    sampler = Sampler(read, clock=Clock(), t0=0.0)
    assert sampler.sample_once() is None
    assert sampler.sample_once() is None
    assert sampler.sample_once()["ok"] == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["trainpace: a device/host reading failed (OSError: sensor gone); "
                        "sampling goes on, further failures are not shown"]


def test_the_thread_samples_and_stop_takes_a_last_reading():
    count = [0]

    def read():
        count[0] += 1
        return {"n": count[0]}, {"n": float(count[0])}

    t0 = time.perf_counter()
    sampler = Sampler(read, interval_s=0.02, t0=t0)
    sampler.start()
    sampler.start()  # idempotent
    deadline = time.monotonic() + 60  # three readings of the thread: waited for, not timed
    while sampler.readings < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sampler.running
    waited_s = time.perf_counter() - t0
    sampler.stop()
    assert not sampler.running
    rows = sampler.drain_rows()
    assert len(rows) >= 4  # the thread's three, and the last one
    assert rows == sorted(rows, key=lambda r: r["t_s"])
    assert rows[-1]["t_s"] >= waited_s  # the last reading was taken at stop()
    assert sampler.busy_s > 0


def test_pending_rows_are_bounded():
    sampler = Sampler(_scripted([float(i) for i in range(10)]), clock=Clock(), t0=0.0,
                      max_pending_rows=4)
    for _ in range(10):
        sampler.sample_once()
    rows = sampler.drain_rows()
    assert [r["value"] for r in rows] == [6.0, 7.0, 8.0, 9.0]
    assert sampler.dropped_rows == 6
    assert sampler.aggregate("value", 99, 101).readings == 10  # aggregates keep everything


@pytest.mark.parametrize("interval", [0, -1, float("nan"), True, "0.1"])
def test_bad_interval_is_a_config_error(interval):
    with pytest.raises(ConfigError, match="interval_s must be a number of seconds > 0"):
        Sampler(_scripted([]), interval_s=interval)


def test_without_poll_the_thread_waits_on_a_lock(monkeypatch):
    import select

    monkeypatch.delattr(select, "poll")
    count = [0]

    def read():
        count[0] += 1
        return {"n": count[0]}, {"n": float(count[0])}

    sampler = Sampler(read, interval_s=0.02, t0=time.perf_counter())
    sampler.start()
    assert sampler._pipe is None
    deadline = time.monotonic() + 60  # the thread reads between its waits
    while count[0] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    assert not sampler.running
    assert count[0] >= 3  # two of the thread's, and the last
    sampler.start()  # not again after stop
    assert not sampler.running
    # a 30 s wait on the lock is cut short by stop(): far sooner than the wait, at any load
    waiting = Sampler(_scripted([1.0] * 10), interval_s=30.0, clock=Clock(), t0=0.0)
    waiting.start()
    _wait_for_readings(waiting, 1)  # the thread's first, taken as it starts
    started = time.perf_counter()
    waiting.stop()
    assert time.perf_counter() - started < 15.0
    assert waiting.readings == 2  # and the last, taken by stop()


def test_stop_cuts_the_wait_short_and_closes_the_pipe():
    import os

    sampler = Sampler(_scripted([1.0] * 10), interval_s=30.0, clock=Clock(), t0=0.0)
    sampler.start()
    read_fd, write_fd = sampler._pipe
    _wait_for_readings(sampler, 1)  # the thread's first, taken as it starts
    started = time.perf_counter()
    sampler.stop()
    assert time.perf_counter() - started < 15.0  # a 30 s wait was cut short, at any load
    assert sampler.readings == 2  # and the last, taken by stop()
    for fd in (read_fd, write_fd):
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(fd)


def _wait_for_readings(sampler: Sampler, readings: int) -> None:
    """Until the thread has taken ``readings`` (waited for, not timed: at any load)."""
    deadline = time.monotonic() + 60
    while sampler.readings < readings and time.monotonic() < deadline:
        time.sleep(0.005)
    assert sampler.readings >= readings


def test_the_thread_reads_as_it_starts_then_every_period():
    sampler = Sampler(_scripted([1.0] * 10), interval_s=30.0, clock=Clock(), t0=0.0)
    sampler.start()
    _wait_for_readings(sampler, 1)
    time.sleep(0.05)
    assert sampler.readings == 1  # the next comes after the 30 s period, not before
    sampler.stop()
