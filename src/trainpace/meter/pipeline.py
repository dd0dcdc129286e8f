"""The writer side of a window: records, figures, the run folder, sinks, observers, refreshes.

Runs on the writer thread (:class:`~trainpace.sinks.background.BackgroundWriter`). Windows that
arrive together (faster than they are written, or written on the training thread by
:mod:`~trainpace.meter.handover` when they are tiny) are taken in one pass: one append to
``steps.jsonl`` for the lines not on disk yet, one extension of the columns. Each window's
figures go out as its window record, unless it holds less than ``SINK_WINDOW_S`` of steps:
then with the next (0 by default: one record per window, as documented); more than
``MERGE_AFTER`` windows taken together go out as one record (a sink's queue is bounded). The
run folder is written here, directly; every other sink gets the record through its own
:class:`~trainpace.sinks.background.SinkThread`, so none of them can hold the run folder back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from trainpace.measure.recorder import StepRecorder
from trainpace.measure.summarize import Goal, window_figures
from trainpace.measure.vitals import DeviceVitals
from trainpace.meter.faults import Faults
from trainpace.meter.state import RunState
from trainpace.records import StepRecord, WindowFigures
from trainpace.runlog import Record
from trainpace.sinks.background import SinkThread
from trainpace.sinks.runfolder import RunFolderSink
from trainpace.stepcolumns import StepBatch, StepColumns
from trainpace.summary import Summary

SYSTEM_LOG_INTERVAL_S = 1.0  # system.jsonl: one reading a second (a GPU row is ~1 kB)
# Step rows made ahead at each window boundary (a longer window makes the rest as it goes).
ROWS_STOCKED = 1000
# A mid-run summary refresh may take at most this share of the time since the previous one.
REFRESH_BUDGET = 0.002
# The least run time a window record to the sinks and observers holds, unless it is the last
# one or a loader ran out: above 0, windows of steps far shorter than the writer's work go out
# together, fewer records and console lines. 0 keeps the documented one record (and console
# line) per window, which the CLI's tests and the README promise; the run folder gets every
# window's lines either way, as soon as they are taken.
SINK_WINDOW_S = 0.0
# More windows than this taken together go to the sinks as one window record.
MERGE_AFTER = 4

WindowObserver = Callable[[WindowFigures, list[StepRecord]], None]
"""Called on the writer thread with each window's figures and records (e.g. to exchange
window statistics across ranks); what it raises is contained and reported once."""


@dataclass(frozen=True)
class Window:
    """One window handed over by the training thread."""

    make_records: Callable[[], StepBatch]
    final: bool
    last_step: int  # the steps closed when it was handed over
    flush: bool = False  # its window record goes out now (a loader ran out)
    # Windows before it whose lines the training thread wrote itself (see meter.handover)
    written: tuple[StepBatch, ...] = ()


class WindowPipeline:
    """Turns the windows handed over into the run folder, the sinks' records and refreshes."""

    def __init__(self, *, state: RunState, recorder: StepRecorder,
                 run_folder: RunFolderSink | None, sinks: list[SinkThread], faults: Faults,
                 clock: Callable[[], float], vitals: Callable[[], DeviceVitals | None],
                 refresh: Callable[[float], Summary],
                 waited_on: Callable[[], bool] = lambda: False) -> None:
        self.state = state
        self.run_folder = run_folder
        self.sinks = sinks
        self.observers: list[WindowObserver] = []
        self._recorder = recorder
        self._faults = faults
        self._clock = clock
        self._vitals = vitals
        self._refresh = refresh
        self._waited_on = waited_on
        self._device_figures: dict[str, float | None] = {}
        self._device_figures_s = -float("inf")
        self._stock = min(state.config.window, ROWS_STOCKED)
        self._system_written_s = -float("inf")
        self._last_refresh_s = 0.0
        self._refresh_cost_s = 0.0
        # Steps written but not yet in a sink's window record, and the run time (t_s) the
        # last window record reached: a window record holds at least sink_window_s of steps.
        self._unsent: list[StepBatch] = []
        self._sent_t_s = 0.0
        self.sink_window_s = SINK_WINDOW_S
        self._not_in_columns: list[StepColumns] = []  # written, not yet in state.series

    def emit(self, record: Record) -> None:
        """To the run folder (now, here) and to each sink's queue."""
        if self.run_folder is not None:
            try:
                self.run_folder.log(record)
            except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                self._faults.report(f"writing the run folder ({record.kind})", exc)
        for sink in self.sinks:
            sink.log(record)

    def windows(self, windows: list[Window]) -> None:
        """The windows handed over since the last call, taken together: their lines go to the
        run folder now (one append); each window's figures go to the sinks and observers as
        its window record, unless it holds less than ``sink_window_s`` of steps: then they
        go with the next window's (at once when a window ``flush``es, the last one too).
        Steps far shorter than the writer's work per window thus cost the writer one pass,
        not one per window, and the console a line every ``sink_window_s`` at most."""
        last = windows[-1]
        final = last.final
        if not final:  # the next window's step rows (popped by the training thread)
            self._recorder.stock_rows(self._stock)
        # (window, its records): the windows written on the training thread come first
        parts: list[tuple[Window | None, StepBatch]] = []
        new: list[msgspec.Struct | StepRecord] = []
        for window in windows:
            parts.extend((None, batch) for batch in window.written)
            made = window.make_records()
            parts.append((window, made))
            new.extend(made.lines)
        if new:
            self._steps(new)  # every line not on disk yet, in one append
        for _, batch in parts:
            if batch.columns.n:
                self._not_in_columns.append(batch.columns)
        # The window records: each window's own, unless it holds less than sink_window_s of
        # steps; then it goes out with the next ones.
        tracker = self.state.tracker
        for handed, batch in parts:
            if batch.columns.n:
                if tracker is not None:  # the goal's progress as of this window's end
                    tracker.add_records(batch.records)
                self._unsent.append(batch)
            unsent = self._unsent
            now = handed is not None and (handed.final or handed.flush)
            due = unsent and (unsent[-1].columns.column("t_s")[-1] - self._sent_t_s
                              >= self.sink_window_s)
            if unsent and (now or (due and len(parts) <= MERGE_AFTER)
                           or (handed is windows[-1] and len(parts) > MERGE_AFTER)):
                self._unsent = []
                self._yield_gil()
                self._window(unsent, handed is not None and handed.final)
        self._yield_gil()
        self._system(last.last_step)
        if not final:
            self._maybe_refresh(last.last_step)

    @property
    def holding(self) -> bool:
        """Steps wait for their window record (less than ``sink_window_s`` of them so far)."""
        return bool(self._unsent)

    def idle(self, parts: tuple[StepBatch, ...]) -> None:
        """Nothing was handed over for a while: the windows whose lines the training thread
        wrote (``parts``) and the steps held back go out now, as for any window."""
        if parts or self._unsent:
            last = parts[-1] if parts else self._unsent[-1]
            self.windows([Window(StepBatch.empty, False, last.last_step(), flush=True,
                                 written=parts)])

    def follow(self, goal: Goal) -> None:
        """A new goal, followed from the run's first step (every step written so far)."""
        self._to_columns()
        self.state.follow(goal)

    def _steps(self, records: list[msgspec.Struct | StepRecord]) -> None:
        """The steps' lines in the run folder; their columns come with their window record."""
        if self.run_folder is not None:
            try:
                self.run_folder.append_steps(records)
            except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                self._faults.report("writing the run folder (window)", exc)

    def _to_columns(self) -> None:
        """The steps written since the last call into the run's columns. Done once per window
        record and before each read of the columns, not per window: appending has a cost
        per call (a pass per column) that windows of tiny steps would pay a thousand times
        a second."""
        if self._not_in_columns:
            chunks, self._not_in_columns = self._not_in_columns, []
            self.state.series.append(StepColumns.concat(chunks))

    def _window(self, batches: list[StepBatch], final: bool) -> None:
        """One window record (figures and steps) to each sink, and the window observers.
        Its steps are made into records only for the sinks and observers that read them."""
        state = self.state
        self._to_columns()
        columns = StepColumns.concat([batch.columns for batch in batches])
        t_s = columns.column("t_s")
        self._sent_t_s = t_s[-1]
        last_step = batches[-1].last_step()
        figures = window_figures(columns, state.warmup(final=final))
        if state.tracker is not None:
            progress = state.tracker.progress()
            figures["time_to_target_s"] = progress.time_to_target_s
            figures["eta_to_target_s"] = progress.eta_s
        figures["device_kind"] = state.device.type
        price = state.config.price_per_hour
        if price is not None:  # the window's money per million, at its throughput
            samples, tokens = figures.get("samples_per_s"), figures.get("tokens_per_s")
            figures["usd_per_million_samples"] = price / 3600 / samples * 1e6 if samples else None
            figures["usd_per_million_tokens"] = price / 3600 / tokens * 1e6 if tokens else None
        figures.update(self._device_window(  # type: ignore[typeddict-item]
            t_s[0] - columns.column("step_s")[0], t_s[-1]))
        # the steps as records, made only for those that read them
        wanted = self.observers or any(getattr(t.sink, "reads_steps", True) for t in self.sinks)
        records = [r for batch in batches for r in batch.records] if wanted else []
        record = Record("window", {"window": figures, "steps": records}, last_step)
        for sink in self.sinks:  # the run folder has the lines already
            sink.log(record)
        for observer in self.observers:
            try:
                observer(figures, records)
            except BaseException as exc:  # noqa: BLE001 - an observer never ends the writer
                self._faults.report(f"window observer {_name(observer)}", exc)

    def _device_window(self, t_start_s: float, t_end_s: float) -> dict[str, float | None]:
        """The sampler's means over the window (from its first step's start to its end). A
        window shorter than the sampler's period holds one reading at most: the last figures
        are kept, not aggregated again."""
        vitals = self._vitals()
        if vitals is None:
            return {}
        if t_end_s - self._device_figures_s >= self.state.config.sample_interval_s:
            t_start_s = min(t_start_s, self._device_figures_s)
            self._device_figures = vitals.window_figures(max(t_start_s, 0.0), t_end_s)
            self._device_figures_s = t_end_s
        return self._device_figures

    def _yield_gil(self) -> None:
        """Let the training thread run if it is waiting for the GIL (not when it is waiting
        for this thread: then the GIL is free, and yielding gives it to other processes).

        The writer's work is Python and holds the GIL; CPython makes a waiting thread wait up
        to the switch interval (5 ms) before it forces a switch. Yielding between the windows
        keeps the training thread's wait short.
        """
        if not self._waited_on():
            time.sleep(0)

    def _system(self, last_step: int) -> None:
        vitals = self._vitals()
        if vitals is None:
            return
        rows = vitals.drain_rows()
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
        self._to_columns()
        self._yield_gil()
        summary = self._refresh(now)
        self._yield_gil()
        self.emit(Record("summary", summary.to_dict(), last_step))
        self._last_refresh_s = self._clock()
        self._refresh_cost_s = self._last_refresh_s - now


def _name(fn: object) -> str:
    return str(getattr(fn, "__qualname__", type(fn).__name__))
