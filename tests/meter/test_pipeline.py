"""The writer side of a window: its record's work comes in parts, paced by the loop's steps."""

import pytest
import torch

from trainpace.config import MeterConfig
from trainpace.meter import pipeline
from trainpace.meter.log_once import LogOnce
from trainpace.meter.pipeline import (
    LOOK_PAST_HAND_OVER,
    PART_PAUSE_MAX_S,
    PART_PAUSE_MIN_S,
    POLL_MAX_S,
    POLL_MIN_S,
    REFRESH_BUDGET,
    REFRESH_FIRST_COST_S,
    Window,
    WindowPipeline,
)
from trainpace.meter.state import RunState
from trainpace.records import STEP_FIELDS
from trainpace.sinks.base import FanOut


class RealTime:
    """Stands for the real clock the pause is measured on."""

    def __init__(self):
        self.now_s = 64.0  # exact in binary: the differences below are too

    def perf_counter(self):
        return self.now_s


class Recording:
    reads_steps = False

    def __init__(self):
        self.kinds = []

    def log(self, record):
        self.kinds.append(record.kind)

    def close(self):
        pass


class Refreshed:
    def to_dict(self):
        return {}


def step_values(first, count, step_s):
    """``count`` plain steps of ``step_s`` each from step ``first`` (run time = step * step_s)."""
    fields = dict.fromkeys(STEP_FIELDS)
    rows = []
    for step in range(first, first + count):
        fields.update(step=step, t_s=step * step_s, step_s=step_s, wait_s=0.0, samples=4,
                      micro_batches=1)
        rows.append(tuple(fields[name] for name in STEP_FIELDS))
    return rows


def make_pipeline(monkeypatch, sink, window=100, steps_to_hand_over=None):
    real = RealTime()
    monkeypatch.setattr(pipeline, "time", real)
    sinks = FanOut([sink])
    made = WindowPipeline(state=RunState(MeterConfig(window=window), torch.device("cpu"), "r"),
                          run_folder=None, sinks=sinks, log_once=LogOnce(),
                          clock=lambda: 0.0, vitals=lambda: None,
                          refresh=lambda now: Refreshed(),
                          steps_to_hand_over=steps_to_hand_over)
    return made, real, sinks


def window(rows, *, final=False):
    return Window(lambda: rows, final=final, last_step=rows[-1][0])


def test_the_pause_is_the_loops_real_time_per_step_within_bounds(monkeypatch):
    made, real, sinks = make_pipeline(monkeypatch, Recording())
    real.now_s += 0.0390625  # 20 steps in 39 ms of real time: 1.95 ms a step
    made.write([window(step_values(1, 20, 0.1))])
    assert made.part_pause_s() == 0.0390625 / 20
    real.now_s += 0.001  # 20 steps in 1 ms: far below the least pause
    made.write([window(step_values(21, 20, 0.1))])
    assert made.part_pause_s() == PART_PAUSE_MIN_S
    real.now_s += 5.0  # an evaluation between two windows: at most the longest pause
    made.write([window(step_values(41, 20, 0.1))])
    assert made.part_pause_s() == PART_PAUSE_MAX_S
    sinks.close(5.0)


def test_the_writer_looks_for_work_at_three_quarters_of_the_loops_time_per_half_window(
        monkeypatch):
    made, real, sinks = make_pipeline(monkeypatch, Recording(), window=20)
    assert made.poll_s() == POLL_MAX_S  # no steps yet: the time before them is start-up
    real.now_s += 0.0390625  # ten steps (a half window) came in 39 ms
    made.write([window(step_values(1, 10, 0.1))])
    assert made.poll_s() == pytest.approx(0.0390625 * 0.75)
    real.now_s += 0.0009765625  # twenty steps taken together, 1 ms after the last look
    made.write([window(step_values(11, 10, 0.1)), window(step_values(21, 10, 0.1))])
    assert made.poll_s() == POLL_MIN_S
    real.now_s += 5.0  # an evaluation between two windows: at most the longest
    made.write([window(step_values(31, 10, 0.1))])
    assert made.poll_s() == POLL_MAX_S
    sinks.close(5.0)


def test_a_writer_that_counts_the_windows_looks_a_quarter_half_window_past_the_hand_over(
        monkeypatch):
    to_hand_over = [10]
    made, real, sinks = make_pipeline(monkeypatch, Recording(), window=20,
                                      steps_to_hand_over=lambda: to_hand_over[0])
    assert made.poll_s() == POLL_MAX_S  # no steps yet
    real.now_s += 0.0390625  # ten steps in 39 ms: 3.90625 ms a step
    made.write([window(step_values(1, 10, 0.1))])
    to_hand_over[0] = 7  # taken up to 3 steps past a hand-over: 7 steps to the next
    assert made.poll_s() == pytest.approx(0.00390625 * (7 + 10 * LOOK_PAST_HAND_OVER))
    to_hand_over[0] = 10_000  # an evaluation ahead, say: at most the longest sleep
    assert made.poll_s() == POLL_MAX_S
    sinks.close(5.0)


def test_a_window_record_goes_out_in_parts_and_the_runs_last_in_one(monkeypatch):
    sink = Recording()
    made, _real, sinks = make_pipeline(monkeypatch, sink)
    made.write([window(step_values(1, 20, 0.01))])  # 0.2 s of run time: its own record
    parts = list(made.send())
    assert len(parts) >= 3  # columns, run series, figures, ... each a part
    made.write([window(step_values(21, 20, 0.01), final=True)])
    assert list(made.send()) == []  # the end of the run: no step left to give way to
    sinks.close(5.0)
    assert sink.kinds.count("window") == 2


def test_the_summary_is_refreshed_within_its_budget_from_the_first_window(monkeypatch):
    # A refresh is taken to cost REFRESH_FIRST_COST_S until one is timed: none in a short
    # run's first windows; then the next comes when the last one's cost is REFRESH_BUDGET
    # of the time since it.
    monkeypatch.setattr(pipeline, "time", RealTime())
    clock = RealTime()
    refreshed_at = []

    def refresh(now):
        refreshed_at.append(now)
        clock.now_s += 0.0078125  # the refresh takes 7.8 ms of the run's clock
        return Refreshed()

    made = WindowPipeline(state=RunState(MeterConfig(), torch.device("cpu"), "r"),
                          run_folder=None, sinks=FanOut([Recording()]), log_once=LogOnce(),
                          clock=clock.perf_counter, vitals=lambda: None, refresh=refresh)
    start_s = clock.now_s
    for k in range(1, 161):  # windows of 16 steps of 1/128 s: 0.125 s each, 20 s in all
        clock.now_s = start_s + k * 0.125
        made.write([window(step_values(16 * k - 15, 16, 0.0078125))])
        list(made.send())
    # none in the first 10 s (REFRESH_FIRST_COST_S / REFRESH_BUDGET); at the first window
    # ending after them
    assert REFRESH_FIRST_COST_S / REFRESH_BUDGET == 10.0
    assert refreshed_at[0] - start_s == 10.0
    # the next when 7.8 ms is REFRESH_BUDGET of the time since the first ended (3.9 s):
    # at the first window after that
    since_s = refreshed_at[1] - (refreshed_at[0] + 0.0078125)
    assert 0.0078125 / REFRESH_BUDGET <= since_s < 0.0078125 / REFRESH_BUDGET + 0.125


def test_a_summary_shown_live_is_refreshed_from_the_first_window(monkeypatch):
    monkeypatch.setattr(pipeline, "time", RealTime())

    class Panel(Recording):
        shows_summary = True

    panel = Panel()
    sinks = FanOut([panel, Recording()])
    made = WindowPipeline(state=RunState(MeterConfig(), torch.device("cpu"), "r"),
                          run_folder=None, sinks=sinks, log_once=LogOnce(),
                          clock=lambda: 0.0, vitals=lambda: None, refresh=lambda now: Refreshed())
    made.write([window(step_values(1, 20, 0.01))])
    list(made.send())
    sinks.close(5.0)
    assert panel.kinds == ["window", "summary"]


def test_no_window_record_is_made_for_nobody_and_one_is_for_an_observer(monkeypatch):
    # no sink and no observer (a quiet run): the steps reach the run's columns once they hold
    # QUIET_HOLD_S of run time, and no figures are computed for a record nobody reads; an
    # observer gets its record at each window
    monkeypatch.setattr(pipeline, "time", RealTime())
    computed = []
    real_figures = pipeline.figures

    def counting(steps, warmup):
        computed.append(len(steps))
        return real_figures(steps, warmup)

    monkeypatch.setattr(pipeline, "figures", counting)
    made = WindowPipeline(state=RunState(MeterConfig(), torch.device("cpu"), "r"),
                          run_folder=None, sinks=FanOut([]), log_once=LogOnce(),
                          clock=lambda: 0.0, vitals=lambda: None, refresh=lambda now: Refreshed())
    assert pipeline.QUIET_HOLD_S == 5.0
    made.write([window(step_values(1, 20, 0.01))])  # 0.2 s of run: held back
    list(made.send())
    assert (computed, len(made.state.series), made.holding) == ([], 0, True)
    made.write([window(step_values(21, 479, 0.01))])  # to 4.99 s of run: still held
    list(made.send())
    assert (len(made.state.series), made.holding) == (0, True)
    made.write([window(step_values(500, 20, 0.01))])  # 5.19 s: the 519 steps join the run
    list(made.send())
    assert (computed, len(made.state.series), made.holding) == ([], 519, False)
    observed = []
    made.observers.append(lambda figures, records: observed.append(
        (figures["steps"], [r["step"] for r in records])))
    made.write([window(step_values(520, 20, 0.01))])
    list(made.send())
    assert (computed, len(made.state.series)) == ([20], 539)
    assert observed == [(20, list(range(520, 540)))]


def test_a_quiet_run_holds_at_most_quiet_hold_steps_of_tiny_steps(monkeypatch):
    # steps of 10 us: 5,000 of them are 0.05 s of run, far from QUIET_HOLD_S; their values,
    # held as lists, would take the memory of every step in 5 s (about 500,000)
    monkeypatch.setattr(pipeline, "time", RealTime())
    monkeypatch.setattr(pipeline, "QUIET_HOLD_STEPS", 300)
    made = WindowPipeline(state=RunState(MeterConfig(), torch.device("cpu"), "r"),
                          run_folder=None, sinks=FanOut([]), log_once=LogOnce(),
                          clock=lambda: 0.0, vitals=lambda: None, refresh=lambda now: Refreshed())
    made.write([window(step_values(1, 200, 1e-5))])
    list(made.send())
    assert (len(made.state.series), made.holding) == (0, True)
    made.write([window(step_values(201, 100, 1e-5))])  # 300 steps held: they join the run
    list(made.send())
    assert (len(made.state.series), made.holding) == (300, False)
    made.write([window(step_values(301, 100, 1e-5))])
    list(made.send())
    assert len(made.state.series) == 300


def test_a_quiet_runs_held_steps_join_the_run_when_no_window_follows_and_at_its_end(
        monkeypatch):
    monkeypatch.setattr(pipeline, "time", RealTime())
    made = WindowPipeline(state=RunState(MeterConfig(), torch.device("cpu"), "r"),
                          run_folder=None, sinks=FanOut([]), log_once=LogOnce(),
                          clock=lambda: 0.0, vitals=lambda: None, refresh=lambda now: Refreshed())
    assert made.hold_s == pipeline.QUIET_HOLD_S
    made.write([window(step_values(1, 20, 0.01))])
    list(made.send())
    list(made.send_held())  # the writer's idle work: nothing came for hold_s
    assert (len(made.state.series), made.holding) == (20, False)
    made.write([window(step_values(21, 20, 0.01)), window(step_values(41, 3, 0.01),
                                                           final=True)])
    list(made.send())  # the run's end sends whatever was held
    assert [s["step"] for s in made.state.series] == list(range(1, 44))
    made.sinks = FanOut([Recording()])
    assert made.hold_s == pipeline.SINK_WINDOW_S
