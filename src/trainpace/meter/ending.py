"""The end of a run: the last window written, the summary made and written, the outputs
closed, the report; or, at the interpreter's exit for a run never finished, its windows out."""

from __future__ import annotations

import atexit
import sys
import weakref
from collections.abc import Callable
from typing import TextIO

from trainpace.config import MeterConfig
from trainpace.job.events import FINISHED
from trainpace.measure.recorder import StepRecorder
from trainpace.measure.vitals import DeviceVitals
from trainpace.meter.distributed import JobRank
from trainpace.meter.ledger import RunInJob, end_of
from trainpace.meter.log_once import LogOnce
from trainpace.meter.loop import Loop
from trainpace.meter.meta import MetaLog
from trainpace.meter.pipeline import WindowPipeline
from trainpace.meter.probes import StepProbes
from trainpace.meter.signals import TermGuard
from trainpace.meter.summaries import Summaries
from trainpace.report.console import print_report
from trainpace.runlog import Record
from trainpace.sinks.background import Writer
from trainpace.sinks.base import FanOut
from trainpace.summary import Summary

# The longest the end of the run (or the interpreter's exit) waits for the run folder.
WRITER_CLOSE_S = 30.0


class RunEnd:
    """The Meter's end, once. ``status`` is the job ledger's run_end to write (said by
    whoever ends the run, before :meth:`finish`); after it, ``summary`` is the run's and
    ``shown`` what the report shows (the job's merged summary at rank 0, the run's own in
    one process, None on the other ranks of a job). Until then an exit hook, which does not
    keep it alive, gets a run never finished out at the interpreter's exit."""

    def __init__(self, *, run_id: str, config: MeterConfig, stream: TextIO | None,
                 clock: Callable[[], float], recorder: StepRecorder, loop: Loop,
                 probes: StepProbes, vitals: Callable[[], DeviceVitals | None], writer: Writer,
                 pipeline: WindowPipeline, summaries: Summaries, meta: MetaLog, sinks: FanOut,
                 job: JobRank, in_job: RunInJob | None, term: TermGuard,
                 log_once: LogOnce) -> None:
        self._run_id = run_id
        self._config = config
        self._stream = stream
        self._clock = clock
        self._recorder = recorder
        self._loop = loop
        self._probes = probes
        self._vitals = vitals
        self._writer = writer
        self._pipeline = pipeline
        self._summaries = summaries
        self._meta = meta
        self._sinks = sinks
        self._job = job
        self._in_job = in_job
        self._term = term
        self._log_once = log_once
        self.status: tuple[str, str | None] = (FINISHED, None)  # the run_end to write
        self.summary: Summary | None = None
        self.shown: Summary | None = None
        # a run never finished still gets its windows out; never waits on a user sink
        self._exit_hook = _at_exit_of(self)
        atexit.register(self._exit_hook)

    def finish(self) -> Summary:
        """Flush the last window, write the summary, print the report (once)."""
        if self.summary is not None:
            return self.summary
        self._term.finishing = True
        self._loop.finished = True
        self._probes.close()  # first, whatever happens next: no capture outlives the loop
        summary: Summary | None = None
        try:
            end_s = self._clock()
            vitals = self._vitals()
            if vitals is not None:
                vitals.stop()  # a last reading, then the thread is joined
            self._loop.boundary(final=True)
            self._close_writer()  # every window written; from here on, one thread
            self._summaries.first_ceilings()  # after the loop, before the summary
            summary = self._summaries.build(final=True, end_s=end_s)
            summary = self._summaries.with_profile(summary, self._pipeline.emit)
            if self._in_job is not None:
                # the run's end in the ledger first: the job's goodput counts this run whole
                self._in_job.end(*self.status, release=False)
                summary = self._summaries.with_goodput(summary, self._in_job.ledger.folder,
                                                       self._meta.last)
            summary = self._summaries.diagnosed(summary, self._meta.last)
            self._pipeline.emit(Record("summary", summary.to_dict(),
                                       self._recorder.steps_closed))
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._log_once.report("finishing the run", exc)
        self._close_outputs()
        if self._in_job is not None:
            self._in_job.end(*self.status)
        self.summary = summary if summary is not None else Summary(run_id=self._run_id)
        # rank 0: the job's merged summary, diagnosed with the job's meta
        self.shown = shown = self._job.finish(
            self.summary,
            # what a front-end noted (note()) is rank 0's, the job's meta has no place for it
            lambda merged, meta, steps: self._summaries.diagnosed(
                merged, {**meta, **self._meta.notes}, tune=False, steps=steps))
        if self._config.report and shown is not None:
            try:
                print_report(shown, file=self._stream)
            except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                self._log_once.report("printing the report", exc)
        self._term.finished()  # a SIGTERM that came meanwhile goes on now
        return self.summary

    def at_exit(self) -> None:
        """At interpreter exit, for a run never finished: its windows reach the run folder;
        no sink is waited for (a rank of a distributed job finishes: see below)."""
        if self.summary is not None or self._writer.closed:
            return
        if self._job.monitor is not None:
            # A rank of a job whose loop died (its collective failed when another rank did):
            # its summary, its last window to rank 0, and there the job's report, still come.
            self.finish()
            return
        try:
            self._loop.boundary(flush=True)
        except Exception as exc:  # noqa: BLE001 - at exit, nothing may raise
            self._log_once.report("writing the run at exit", exc)
        self._writer.close(WRITER_CLOSE_S)
        # the interpreter ends with the run never finished: an uncaught error, or a script
        # that did not call finish()
        failure = getattr(sys, "last_value", None)
        if self._in_job is not None:
            self._in_job.end(*(end_of(failure) if failure is not None else self.status))

    def _close_writer(self) -> None:
        if not self._writer.close(WRITER_CLOSE_S):
            self._log_once.warn_once("writer", f"the run folder's writer did not finish within "
                                     f"{WRITER_CLOSE_S:g}s; the run folder may miss the end")
        atexit.unregister(self._exit_hook)

    def _close_outputs(self) -> None:
        """The run's last meta, then each sink gets sink_timeout_s (together) to finish."""
        try:
            self._meta.log(finished=True)
            if self._pipeline.run_folder is not None:
                self._pipeline.run_folder.close()
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._log_once.report("closing the run folder", exc)
        self._sinks.close(self._config.sink_timeout_s)


def _at_exit_of(end: RunEnd) -> Callable[[], None]:
    """An exit hook that does not keep the run (its end, and the Meter) alive."""
    ref = weakref.ref(end)

    def hook() -> None:
        alive = ref()
        if alive is not None:
            alive.at_exit()

    return hook
