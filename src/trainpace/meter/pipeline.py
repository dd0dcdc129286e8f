"""The writer side of a window: records, columns, figures, the run folder, sinks, observers.

Runs on the writer thread (:class:`~trainpace.sinks.background.Writer`). The writer takes the
steps closed since its last look, as they are (see :mod:`trainpace.meter.handover`); here they
become ``steps.jsonl`` records (their values, no dict per step), whose lines go to the run
folder at once (one append for all the windows taken together). The records wait for the
end of their window; then they become columns once (a :class:`~trainpace.series.StepSeries`,
appended to the run's), and the window's figures come from the function that computes the
run's. Each window's figures go to the sinks (one :class:`~trainpace.sinks.base.FanOut`) and
the window observers as its window record (with neither, no record is made: the steps are on
disk, and join the run's columns every ``QUIET_HOLD_S`` or ``QUIET_HOLD_STEPS``); windows
shorter than ``SINK_WINDOW_S`` go out together (their columns made in one pass too). That work
comes in parts (:meth:`WindowPipeline.send` yields between two), which the writer paces
(:meth:`WindowPipeline.part_pause_s`), so that no step waits for all of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import starmap
from typing import Any

from trainpace.config import half_window
from trainpace.measure.summarize import Goal, figures
from trainpace.measure.vitals import DeviceVitals
from trainpace.meter.log_once import LogOnce
from trainpace.meter.state import RunState
from trainpace.records import STEP_FIELDS, Figures, StepLine, StepValues
from trainpace.runlog import Record
from trainpace.series import StepSeries
from trainpace.sinks.base import FanOut
from trainpace.sinks.runfolder import RunFolderSink
from trainpace.summary import Summary

SYSTEM_LOG_INTERVAL_S = 1.0  # system.jsonl: one reading a second (a GPU row is ~1 kB)
# A mid-run summary refresh may take at most this share of the time since the previous one.
REFRESH_BUDGET = 0.002
# What a refresh is taken to cost until one has been timed: the first comes after
# REFRESH_FIRST_COST_S / REFRESH_BUDGET (10 s) of run, not in the run's first window, where
# a summary of a few steps would cost a short run more than its budget (a refresh of a CPU
# run's first window took 5-8 ms of the writer's CPU, with the GIL, on a 2-core machine).
# A sink that shows the summary as it comes (a live panel) has it from the first window.
REFRESH_FIRST_COST_S = 0.02
# The least run time a window record holds: windows of steps far shorter than the writer's
# work (and than a reader's eye) go to the sinks together, one console line, not hundreds a
# second. A window at least this long has its own record, as documented.
SINK_WINDOW_S = 0.05
# Where nobody reads window records (no sink and no window observer: `trainpace run --quiet`,
# `Meter(console=False)`), the steps written wait this much run time (or the run's end) before
# they join the run's columns, with the sampler's rows (``system.jsonl``) and a summary
# refresh when one is due. Every part of that work is Python touched once per look, and a
# script whose DataLoader forks its workers again each epoch makes each page it touches a
# copy-on-write fault after every fork (9 us each, on a 2-core virtual machine): in `dcgan`
# (a fork four times a second) the writer took 12,800-13,200 faults and 0.11-0.14 s of CPU
# over 3,000 steps with that work every 5 s, 16,300-16,500 and 0.17 s with it at every
# window. The steps' lines are written at every look all the same.
QUIET_HOLD_S = 5.0
# ... or as many steps, whichever comes first: held steps are lists of Python values, about
# 0.3 kB a step, and 5 s of the writer benchmark's 10 us steps (about 290,000) took the
# process's memory 115 MB above a run with a sink; 5,000 steps hold about 1.5 MB (steps of a
# millisecond or more reach QUIET_HOLD_S first).
QUIET_HOLD_STEPS = 5_000
# The writer's pause between two parts of a window record's work (see
# :mod:`trainpace.sinks.background`): the loop's recent real time per step, so that a step
# pays for one part at most, within these bounds (the record is at the sinks a few pauses
# later).
PART_PAUSE_MIN_S = 0.0005
PART_PAUSE_MAX_S = 0.01
# How often the idle writer looks for steps (it is not woken), where it does not know when the
# loop hands over (a device clock's windows): this share of the loop's recent real time per
# half window, so that a half window's lines are written before the next half ends (the
# training thread waits for a writer a whole half behind) while the loop's pace holds within a
# third, within these bounds. Each look costs: a sleeping thread woken by a timer took 30-130
# µs of CPU on a 2-core virtual machine (0.7% of a core at 50 looks a second), and a look that
# finds steps writes their lines (a fixed part and a part per step, all of it cold after a
# training step). The longest sleep bounds how late the lines of slow steps reach the run
# folder and a live view; at 0.1 s the looks were half the writer's CPU on 30 ms steps (0.6% of
# a core against 0.3% at 1 s, where a 2-core script's torch threads want both cores).
POLL_SHARE = 0.75
# Where the writer counts the windows itself (the host clock: it takes the steps from the
# recorder), its sleep ends this share of a half window past the loop's next hand-over: one
# look a half window, which finds that half's steps closed, and writes them well before the
# next hand-over checks for them (the loop may run up to 1.75x faster than its recent pace
# meanwhile; a slower loop costs a look that comes early, and the next). Looks timed by
# POLL_SHARE came 1.33 times a half window, at any phase: with dcgan's 10-14 ms steps (a
# DataLoader worker, window 100, no sink) the writer took 0.44-0.52% of a core at POLL_SHARE's
# pace, 0.41-0.43% at the hand-overs (four pairs of 2,000 steps).
LOOK_PAST_HAND_OVER = 0.25
POLL_MIN_S = 0.001
POLL_MAX_S = 1.0
_STEP, _T_S = STEP_FIELDS.index("step"), STEP_FIELDS.index("t_s")

WindowObserver = Callable[[Figures, list[dict[str, Any]]], None]
"""Called on the writer thread with each window's figures and records (e.g. to exchange
window statistics across ranks); what it raises is contained and reported once."""


@dataclass(frozen=True)
class Window:
    """Steps of one window, as the writer takes them (all of it, or a part)."""

    make_records: Callable[[], list[StepValues]]  # called on the writer thread
    final: bool
    last_step: int  # the steps closed up to its end
    flush: bool = False  # its window record goes out now (a loader ran out)
    ends_window: bool = True  # the window's last steps (else: its first ones)


class WindowPipeline:
    """Turns the windows handed over into the run folder, the sinks' records and refreshes."""

    def __init__(self, *, state: RunState,
                 run_folder: RunFolderSink | None, sinks: FanOut, log_once: LogOnce,
                 clock: Callable[[], float], vitals: Callable[[], DeviceVitals | None],
                 refresh: Callable[[float], Summary],
                 steps_to_hand_over: Callable[[], int] | None = None) -> None:
        self.state = state
        self.run_folder = run_folder
        self.sinks = sinks
        self.observers: list[WindowObserver] = []
        self._log_once = log_once
        self._clock = clock
        self._vitals = vitals
        self._refresh = refresh
        self._device_figures: dict[str, float | None] = {}
        self._device_figures_s = -float("inf")
        self._system_written_s = -float("inf")
        self._last_refresh_s = clock()
        self._refresh_cost_s = 0.0 if sinks.shows_summary else REFRESH_FIRST_COST_S
        # The steps written and not in a window record yet: their values, a list per field
        # in STEP_FIELDS order; of them, the first _unsent are of windows send() went over.
        self._columns: list[list[Any]] = [[] for _ in STEP_FIELDS]
        self._made: list[tuple[Window, int]] = []  # written, not sent yet (and their steps)
        self._unsent = 0
        self._in_run = 0  # of them, those already in the run's columns (a new goal)
        self._ended = 0  # of them, those up to the last window's end (held back: a short one)
        self._sent_t_s = 0.0  # the run time the last window record reached
        # real time per step between the last two calls of write(), for part_pause_s():
        # the pause is about the GIL, in real time, whatever clock the run is timed by
        self._written_at_s = time.perf_counter()
        self._step_s_real = 0.0
        self._half_window = half_window(state.config.window)  # steps, for poll_s()
        self._steps_to_hand_over = steps_to_hand_over

    def emit(self, record: Record) -> None:
        """To the run folder (now, here) and to the sinks."""
        if self.run_folder is not None:
            try:
                self.run_folder.log(record)
            except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                self._log_once.report(f"writing the run folder ({record.kind})", exc)
        self.sinks.log(record)

    def write(self, windows: list[Window]) -> None:
        """The windows taken since the last call, together: their records made,
        their lines into the run folder (one append), their values kept as columns for
        :meth:`send` (both made while the values are in the CPU's caches). What a SIGKILL
        would lose waits for this only."""
        now = time.perf_counter()
        rows: list[StepValues] = []
        made: list[tuple[Window, int]] = []
        for window in windows:
            records = window.make_records()
            rows += records
            made.append((window, len(records)))
        if rows and self.run_folder is not None:
            try:
                self.run_folder.append_steps(list(starmap(StepLine, rows)))
            except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                self._log_once.report("writing the run folder (window)", exc)
        if rows:
            for column, values in zip(self._columns, zip(*rows, strict=True), strict=True):
                column.extend(values)
        self._made += made  # with their values in the columns, for send()
        if rows:
            self._step_s_real = (now - self._written_at_s) / len(rows)
            self._written_at_s = now

    @property
    def records_read(self) -> bool:
        """Whether a sink or a window observer reads the window records."""
        return bool(self.observers) or not self.sinks.empty

    @property
    def hold_s(self) -> float:
        """How long the ended windows held back may wait for a window that comes
        (``SINK_WINDOW_S``, or ``QUIET_HOLD_S`` where nobody reads their records)."""
        return SINK_WINDOW_S if self.records_read else QUIET_HOLD_S

    def send(self) -> Iterator[None]:
        """The steps written since the last call wait for their window's end. Once those
        hold ``SINK_WINDOW_S`` of run time (``QUIET_HOLD_S`` where nobody reads window
        records) or ``QUIET_HOLD_STEPS`` steps (at once at the end, or when a loader ran out
        and its record is read), they become the run's columns, and a window record to the
        sinks and observers, and the sampler's rows are taken. In parts: it yields between
        two of them (the writer's pause)."""
        made, self._made = self._made, []
        t_s = self._columns[_T_S]
        read, hold_s = self.records_read, self.hold_s
        for window, steps in made:
            self._unsent += steps
            if window.flush:  # a loader ran out: the loop's next windows count from here
                self.state.window_ended(window.last_step)
            ends = window.ends_window or window.final or window.flush
            if ends:
                self._ended = self._unsent
            if self._unsent and (window.final or (window.flush and read) or (
                    ends and (t_s[self._unsent - 1] - self._sent_t_s >= hold_s
                              or self._unsent >= QUIET_HOLD_STEPS))):
                yield from self._send(window.final)

    @property
    def holding(self) -> bool:
        """Ended windows wait for their window record (less than ``SINK_WINDOW_S`` of them so
        far); the first half of an open window is not held back, it is on its way."""
        return self._ended > 0

    def send_held(self) -> Iterator[None]:
        """No window came for :attr:`hold_s` (the loop stopped between windows: an
        evaluation, a hang), or the writer closes: the ended windows held back go out now, as
        for any window."""
        if self._ended:
            yield from self._send(final=False, upto=self._ended)

    def follow(self, goal: Goal) -> None:
        """A new goal, followed from the run's first step (every step written so far)."""
        if self._unsent > self._in_run:
            self._into_run(StepSeries.from_columns(
                [column[self._in_run:self._unsent] for column in self._columns]))
            self._in_run = self._unsent
        self.state.follow(goal)

    def part_pause_s(self) -> float:
        """The writer's pause between two parts of a window record's work: the loop's real
        time per step lately, within ``PART_PAUSE_MIN_S``..``PART_PAUSE_MAX_S``."""
        return min(max(self._step_s_real, PART_PAUSE_MIN_S), PART_PAUSE_MAX_S)

    def poll_s(self) -> float:
        """How long the idle writer sleeps before it looks for work again: until
        ``LOOK_PAST_HAND_OVER`` of a half window past the loop's next hand-over, at the loop's
        real time per step lately, where the writer knows when that comes (else
        ``POLL_SHARE`` of the loop's time per half window), within
        ``POLL_MIN_S``..``POLL_MAX_S`` (the longest until the first steps came: the time before
        them holds the run's start-up, and a short first half window finds the writer woken by
        the training thread's wait for it at the second)."""
        if not self._step_s_real:
            return POLL_MAX_S
        if self._steps_to_hand_over is not None:
            steps = self._steps_to_hand_over() + self._half_window * LOOK_PAST_HAND_OVER
        else:
            steps = self._half_window * POLL_SHARE
        return min(max(self._step_s_real * steps, POLL_MIN_S), POLL_MAX_S)

    def _send(self, final: bool, upto: int | None = None) -> Iterator[None]:
        """The steps not sent yet (the first ``upto`` of them): into the run's columns (made
        once, here), the sampler's rows taken, and a window record to the sinks and observers;
        then, now and then, a refreshed summary. Yields between its parts, but at the end of
        the run (``final``: no step left to give way to)."""
        upto = self._unsent if upto is None else upto
        columns = [column[:upto] for column in self._columns]
        for column in self._columns:
            del column[:upto]
        done = min(self._in_run, upto)
        self._unsent, self._in_run = self._unsent - upto, max(self._in_run - upto, 0)
        self._ended = 0
        last_step = int(columns[_STEP][-1])
        self._sent_t_s = float(columns[_T_S][-1])
        if not final:
            yield
        steps = StepSeries.from_columns(columns)
        if done < len(steps):
            self._into_run(steps if not done else StepSeries.from_columns(
                [column[done:] for column in columns]))
        self._system(last_step)
        if not final:
            yield
        # a window record only for those that read one (no sink and no observer: a quiet
        # run's writer makes none), its step records only for those that read them
        if self.records_read:
            read = bool(self.observers or self.sinks.reads_steps)
            yield from self._window(steps, steps.records() if read else [], last_step, final)
        if not final:
            yield
            self._maybe_refresh(last_step)

    def _into_run(self, steps: StepSeries) -> None:
        self.state.series.append(steps)
        if self.state.tracker is not None:
            self.state.tracker.add(steps)

    def _window(self, steps: StepSeries, records: list[dict[str, Any]], last_step: int,
                final: bool) -> Iterator[None]:
        """The window record (figures, and the step records when someone reads them) of
        ``steps`` to the sinks, and to the window observers (in parts, as :meth:`_send`)."""
        state = self.state
        warmup = state.warmup(final=final)
        if not final:
            yield
        window = figures(steps, warmup)
        if state.tracker is not None:
            progress = state.tracker.progress()
            window["time_to_target_s"] = progress.time_to_target_s
            window["eta_to_target_s"] = progress.eta_s
        window["device_kind"] = state.device.type
        price = state.config.price_per_hour
        if price is not None:  # the window's money per million, at its throughput
            samples, tokens = window.get("samples_per_s"), window.get("tokens_per_s")
            window["usd_per_million_samples"] = price / 3600 / samples * 1e6 if samples else None
            window["usd_per_million_tokens"] = price / 3600 / tokens * 1e6 if tokens else None
        if not final:
            yield
        t_s = steps.column("t_s")
        window.update(self._device_window(  # type: ignore[typeddict-item]
            float(t_s[0] - steps.column("step_s")[0]), float(t_s[-1])))
        # the steps go only to those that read them (the records were kept for them)
        self.sinks.log(Record("window", {"window": window, "steps": records}, last_step))
        for observer in self.observers:
            if not final:
                yield
            try:
                observer(window, records)
            except BaseException as exc:  # noqa: BLE001 - an observer never ends the writer
                self._log_once.report(f"window observer {_name(observer)}", exc)

    def _device_window(self, t_start_s: float, t_end_s: float) -> dict[str, float | None]:
        """The sampler's means over the window (from its first step's start to its end). A
        window shorter than the sampler's period holds one reading at most: the last figures
        are kept, not aggregated again."""
        vitals = self._vitals()
        if vitals is None:
            return {}
        if t_end_s - self._device_figures_s >= vitals.interval_s:
            t_start_s = min(t_start_s, self._device_figures_s)
            self._device_figures = vitals.window_figures(max(t_start_s, 0.0), t_end_s)
            self._device_figures_s = t_end_s
        return self._device_figures

    def _system(self, last_step: int) -> None:
        vitals = self._vitals()
        if vitals is None:
            return
        rows = vitals.drain_rows()
        if not rows:  # most hand-overs: the sampler reads at most ten times a second
            return
        self.state.keep_system_rows(rows)
        # Every reading feeds the aggregates; the file keeps about one a second.
        written = []
        for row in rows:
            if row["t_s"] - self._system_written_s >= SYSTEM_LOG_INTERVAL_S:
                written.append(row)
                self._system_written_s = row["t_s"]
        if written:
            self.emit(Record("system", {"rows": written}, last_step))

    def _maybe_refresh(self, last_step: int) -> None:
        now = self._clock()
        if now - self._last_refresh_s < self._refresh_cost_s / REFRESH_BUDGET:
            return
        summary = self._refresh(now)
        self.emit(Record("summary", summary.to_dict(), last_step))
        self._last_refresh_s = self._clock()
        self._refresh_cost_s = self._last_refresh_s - now


def _name(fn: object) -> str:
    return str(getattr(fn, "__qualname__", type(fn).__name__))
