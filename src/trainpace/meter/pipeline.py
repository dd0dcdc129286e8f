"""The writer side of a window: records, figures, the run folder, sinks, observers, refreshes.

Runs on the writer thread (:class:`~trainpace.sinks.background.BackgroundWriter`). Windows that
arrive faster than they are written come in together and are written as one: one append to
``steps.jsonl``, one set of figures, one line. The run folder is written here, directly; every
other sink gets the record through its own :class:`~trainpace.sinks.background.SinkThread`,
so none of them can hold the run folder back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from trainpace.measure.recorder import StepRecorder
from trainpace.measure.summarize import window_figures
from trainpace.measure.vitals import DeviceVitals
from trainpace.meter.faults import Faults
from trainpace.meter.state import RunState
from trainpace.records import StepRecord, WindowFigures
from trainpace.runlog import Record
from trainpace.sinks.background import SinkThread
from trainpace.sinks.runfolder import RunFolderSink
from trainpace.summary import Summary

SYSTEM_LOG_INTERVAL_S = 1.0  # system.jsonl: one reading a second (a GPU row is ~1 kB)
# Step rows made ahead at each window boundary (a longer window makes the rest as it goes).
ROWS_STOCKED = 1000
# A mid-run summary refresh may take at most this share of the time since the previous one.
REFRESH_BUDGET = 0.002
# More windows than this waiting for the writer are written as one.
MERGE_AFTER = 4

WindowObserver = Callable[[WindowFigures, list[StepRecord]], None]
"""Called on the writer thread with each window's figures and records (e.g. to exchange
window statistics across ranks); what it raises is contained and reported once."""


@dataclass(frozen=True)
class Window:
    """One window handed over by the training thread."""

    make_records: Callable[[], list[StepRecord]]
    final: bool
    last_step: int  # the steps closed when it was handed over


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
        """The windows handed over since the last call: each its own figures and records,
        or, when more than ``MERGE_AFTER`` wait (steps far shorter than the writer's work),
        all of them as one window, so that the writer catches up."""
        final = windows[-1].final
        if not final:  # the next window's step rows (popped by the training thread)
            self._recorder.stock_rows(self._stock)
        groups = [windows] if len(windows) > MERGE_AFTER else [[w] for w in windows]
        for group in groups:
            records: list[StepRecord] = []
            for window in group:
                records.extend(window.make_records())
            if records:
                self._window(records, final)
            self._yield_gil()
        self._system(windows[-1].last_step)
        if not final:
            self._maybe_refresh(windows[-1].last_step)

    def _window(self, records: list[StepRecord], final: bool) -> None:
        state = self.state
        state.series.extend(records)
        figures = window_figures(records, state.warmup(final=final))
        if state.tracker is not None:
            state.tracker.add_records(records)
            progress = state.tracker.progress()
            figures["time_to_target_s"] = progress.time_to_target_s
            figures["eta_to_target_s"] = progress.eta_s
        figures["device_kind"] = state.device.type
        price = state.config.price_per_hour
        if price is not None:  # the window's money per million, at its throughput
            samples, tokens = figures.get("samples_per_s"), figures.get("tokens_per_s")
            figures["usd_per_million_samples"] = price / 3600 / samples * 1e6 if samples else None
            figures["usd_per_million_tokens"] = price / 3600 / tokens * 1e6 if tokens else None
        figures.update(self._device_window(records))  # type: ignore[typeddict-item]
        self.emit(Record("window", {"window": figures, "steps": records}, records[-1]["step"]))
        for observer in self.observers:
            try:
                observer(figures, records)
            except BaseException as exc:  # noqa: BLE001 - an observer never ends the writer
                self._faults.report(f"window observer {_name(observer)}", exc)

    def _device_window(self, records: list[StepRecord]) -> dict[str, float | None]:
        """The sampler's means over the window. A window shorter than the sampler's period
        holds one reading at most: the last figures are kept, not aggregated again."""
        vitals = self._vitals()
        if vitals is None:
            return {}
        t_end_s = float(records[-1]["t_s"])
        if t_end_s - self._device_figures_s >= self.state.config.sample_interval_s:
            first = records[0]
            t_start_s = min(float(first["t_s"] - first["step_s"]), self._device_figures_s)
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
        self._yield_gil()
        summary = self._refresh(now)
        self._yield_gil()
        self.emit(Record("summary", summary.to_dict(), last_step))
        self._last_refresh_s = self._clock()
        self._refresh_cost_s = self._last_refresh_s - now


def _name(fn: object) -> str:
    return str(getattr(fn, "__qualname__", type(fn).__name__))
