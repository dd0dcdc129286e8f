"""The Meter: what a training loop uses. A thin facade that wires the parts and owns their
lifetimes; it holds no measuring logic.

::

    meter = trainpace.Meter(out="runs/exp1")
    for batch in meter.loader(train_loader):
        with meter.step(batch):
            loss = model(batch).loss
            loss.backward(); optimizer.step(); optimizer.zero_grad()
            meter.observe(loss=loss)
    summary = meter.finish()

A step's one path: the training thread fills a :class:`~trainpace.measure.steprow.StepRow`
and, halfway through each window and at its end, hands the rows over as they are (no writing there);
the one writer thread makes them ``steps.jsonl`` records (:class:`~trainpace.records.StepRecord`,
the lines) and columns (:class:`~trainpace.series.StepSeries`, the window's and the run's), whose
figures one function computes (:func:`~trainpace.measure.summarize.figures`), and gives the
window records to one :class:`~trainpace.sinks.base.FanOut`. The time all of this takes on the
training thread is in the step times: what is reported is what the loop achieved.

The parts, one job each:

- training thread: :class:`~trainpace.meter.loop.Loop` (step contexts, metered loaders) over
  the :class:`~trainpace.measure.recorder.StepRecorder`,
  :class:`~trainpace.meter.probes.StepProbes` (profiler, FLOP counter) and
  :class:`~trainpace.meter.handover.WriterHandOver` (the steps to the writer);
- writer thread (:class:`~trainpace.sinks.background.Writer`):
  :class:`~trainpace.meter.pipeline.WindowPipeline` (records, columns, figures, the run folder,
  summary refreshes, window observers), the sinks behind the fan-out;
- :class:`~trainpace.meter.state.RunState` (the steps as columns, the goal, the summary),
  :class:`~trainpace.meter.summaries.Summaries` (the summaries made of them),
  :class:`~trainpace.meter.meta.MetaLog` (meta.json) and
  :class:`~trainpace.meter.ending.RunEnd` (the end of the run, or the interpreter's exit).

Nothing here may raise into the loop once it is made: a failure of trainpace's own work is
logged once and the training goes on.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from threading import get_ident
from types import TracebackType
from typing import Any, TextIO

import torch

from trainpace.config import MeterConfig, half_window, is_int_at_least
from trainpace.devices.specs import canonical_dtype, override_peaks
from trainpace.errors import ConfigError
from trainpace.job.process import redacted_argv
from trainpace.measure.clock import device_timer_for, resolve_device
from trainpace.measure.loader import find_dataloader, loader_settings
from trainpace.measure.recorder import StepRecorder
from trainpace.measure.summarize import Goal
from trainpace.measure.vitals import DeviceVitals
from trainpace.meter.checkpoints import CheckpointPatches
from trainpace.meter.distributed import JobRank
from trainpace.meter.ending import RunEnd
from trainpace.meter.handover import ClosedRows, HandedWindows, WriterHandOver
from trainpace.meter.ledger import JobLedger, RunInJob, end_of
from trainpace.meter.log_once import LogOnce
from trainpace.meter.loop import NULL_STEP, Loop, MeteredLoader, NullStep, StepContext
from trainpace.meter.meta import MADE_BY, MetaLog
from trainpace.meter.outputs import checked_sinks, keyword_sinks
from trainpace.meter.pipeline import WindowPipeline
from trainpace.meter.probes import StepProbes, profile_window
from trainpace.meter.signals import TermGuard
from trainpace.meter.signature import with_the_settings
from trainpace.meter.state import RunState
from trainpace.meter.summaries import Summaries
from trainpace.sinks.background import Writer
from trainpace.sinks.base import FanOut, Sink
from trainpace.sinks.folder_claim import release_run_folder
from trainpace.sinks.runfolder import RunFolderSink
from trainpace.summary import Summary

logger = logging.getLogger(__name__)


class Meter:
    """Measures a training loop: throughput, training time, device use, data wait.

    ``Meter(out="runs/x", window=50, ...)``: ``out`` and the keywords are the settings of
    :class:`~trainpace.config.MeterConfig`, each written and documented there once (this
    signature and the list below are made from its fields); besides them

        sinks: more sinks (objects with ``log(record)`` and ``close()``), each fed from its
            own thread.
        stream: where the console line and the report go (default: stderr).
        clock: the host clock (seconds); injectable for tests.
        made_by: the front-end that makes this Meter (``"meter"``, a loop's own; ``"run"``,
            ``"demo"``, ``"lightning"``, ``"hf"``), written to meta.json: the diagnosis names
            that front-end's way to change a setting.
    """

    def __init__(self, out: str | os.PathLike[str] | None = None, *, sinks: Sequence[Sink] = (),
                 stream: TextIO | None = None, clock: Callable[[], float] = time.perf_counter,
                 made_by: str = "meter", **settings: Any) -> None:
        if made_by not in MADE_BY:
            raise ConfigError("made_by", made_by, f"must be one of {', '.join(MADE_BY)}")
        self.config = config = MeterConfig.of(out=out, **settings)
        self.device = resolve_device(config.device)
        extra_sinks = checked_sinks(sinks)
        self._peaks = override_peaks(config.peaks) if config.peaks is not None else None
        self._dtype = canonical_dtype(config.dtype) if config.dtype is not None else None
        self._clock = clock
        self._log_once = LogOnce()
        started_at = dt.datetime.now(dt.timezone.utc)
        # Under torchrun: rank{r}/ in the job's run folder, the window exchange, the merge.
        self._job = JobRank.from_environment(lambda: self._vitals)
        job_folder: Path | None
        self.path, job_folder = self._job.claim(config.out)
        # the job's run folder (under torchrun: the one holding rank{r}/; else self.path)
        self.job_path: Path | None = job_folder
        # after finish(): what the report shows (the job's merged summary at rank 0, the
        # run's own in one process, None on the other ranks of a job)
        self.job_summary: Summary | None = None
        self.run_id: str = config.run_id or (job_folder.name if job_folder else
                                             started_at.strftime("run-%Y%m%d-%H%M%S"))
        self._recorder = recorder = StepRecorder(
            clock=clock, timer=device_timer_for(self.device), samples=config.samples,
            tokens=config.tokens)
        self._ledger: JobLedger | None = None
        if job_folder is not None and self._job.info.rank == 0:
            # the job's ledger (the single process, or rank 0): which run of the job this is
            self._ledger = JobLedger(job_folder, run_id=self.run_id,
                                     world_size=self._job.info.world_size,
                                     steps_done=lambda: recorder.steps_closed,
                                     log_once=self._log_once, clock=clock)
            self.run_id = self._ledger.run_id
        self.run_id = self._job.name(self.run_id)
        try:
            outputs = self._job.dashboards(  # under DDP: the job's figures, at rank 0
                [*keyword_sinks(config, stream, self.run_id, rank=self._job.info.rank),
                 *extra_sinks], timeout_s=config.sink_timeout_s,
                rank_figures=config.rank_figures)
        except BaseException:
            if self.path is not None and job_folder == self.path:
                release_run_folder(self.path)  # nothing was written: the name is free again
            raise
        if config.count_flops and config.flops_per_step is None and config.warmup == 0:
            logger.info("trainpace: FLOPs are not counted with warmup=0: the counted step "
                        "would be measured; pass flops_per_step= or leave a warm-up step")
        self._probes = StepProbes(profile_window(config.profile_steps, self.path),
                                 self._log_once, clock)
        self._vitals: DeviceVitals | None = None
        self._state = RunState(config, self.device, self.run_id)
        self._goal = self._state.goal  # the latest goal asked for (the writer follows it)
        self._sinks = FanOut(outputs)
        self._summaries = Summaries(recorder=self._recorder, state=self._state, job=self._job,
                               probes=self._probes, log_once=self._log_once, device=self.device,
                               vitals=lambda: self._vitals, peaks_given=self._peaks is not None,
                               tune_loader_s=config.tune_loader_s)
        # the host clock's steps are taken by the writer, which times its looks by the
        # windows it counts; a device clock's are read back on the training thread, which
        # issues the copies (see meter.handover)
        source = (ClosedRows(recorder, config.window) if recorder.timer is None
                  else HandedWindows(recorder))
        self._pipeline = WindowPipeline(
            state=self._state,
            run_folder=RunFolderSink(self.path) if self.path is not None else None,
            sinks=self._sinks, log_once=self._log_once, clock=clock,
            vitals=lambda: self._vitals, refresh=self._summaries.refresh,
            steps_to_hand_over=(source.steps_to_hand_over
                                if isinstance(source, ClosedRows) else None))
        if self._job.monitor is not None:  # a rank of a distributed job
            self._pipeline.observers.append(self._job.window)
        self._writer = Writer(self._pipeline.write,
                              lambda exc: self._log_once.report("writing the run", exc),
                              take_windows=source.take,
                              after_windows=self._pipeline.send,
                              on_idle=self._pipeline.send_held,
                              holding=lambda: self._pipeline.holding,
                              idle_s=lambda: self._pipeline.hold_s,
                              pause_s=self._pipeline.part_pause_s,
                              poll_s=self._pipeline.poll_s, due=source.due)
        self._meta = MetaLog(
            config=config, made_by=made_by, run_id=self.run_id, started_at=started_at,
            # The command as the Meter was made: under `trainpace run` the script's own
            # sys.argv replaces it while the script runs, and the job's ledger (and a
            # restart's match) keep this one.
            argv=redacted_argv(sys.argv), device=self.device, recorder=recorder,
            probes=self._probes, sinks=self._sinks, writer=self._writer,
            emit=self._pipeline.emit, goal=lambda: self._goal,
            loader=lambda: self._state.loader, vitals=lambda: self._vitals,
            ceilings=lambda: self._summaries.ceilings)
        hand_over = WriterHandOver(recorder=recorder, source=source, writer=self._writer,
                                   meta=self._meta, half_window=half_window(config.window))
        self._loop = Loop(recorder=self._recorder, probes=self._probes, log_once=self._log_once,
                          window=config.window, hand_over=hand_over.hand_over,
                          first_step=self._begin_run)
        self._context = self._loop.context
        self._in_job: RunInJob | None = None
        if self._ledger is not None:
            self._in_job = RunInJob(
                self._ledger, recorder=recorder, loop=self._loop,
                checkpoints=CheckpointPatches(self._ledger) if config.checkpoints else None,
                log_once=self._log_once)
            self._in_job.open()
        # SIGTERM (a launcher stopping this rank): the end and the report first, then the
        # signal goes on to the handler that was there before
        self._term = TermGuard(self.finish, self._job.hurry)
        # finish(), or at the interpreter's exit a run never finished: its windows out
        self._end = RunEnd(
            run_id=self.run_id, config=config, stream=stream, clock=clock, recorder=recorder,
            loop=self._loop, probes=self._probes, vitals=lambda: self._vitals,
            writer=self._writer, pipeline=self._pipeline, summaries=self._summaries,
            meta=self._meta, sinks=self._sinks, job=self._job, in_job=self._in_job,
            term=self._term, log_once=self._log_once)
        self._meta.log()
        self._term.install()

    # -- the loop's API -------------------------------------------------------------------

    def loader(self, iterable: Iterable[Any], *, device: str | torch.device | None = None,
               non_blocking: bool | None = None) -> Iterable[Any]:
        """Wrap an iterable of batches to time the wait for each one.

        With ``device``, each batch is moved there (and the copy timed): non-blocking when the
        batch is in pinned memory, unless ``non_blocking`` says otherwise.
        """
        if self._loop.finished:
            self._after_finish("meter.loader()")
            return iterable
        try:
            if self.config.tune_loader_s is not None:
                # kept to be tuned at finish()
                self._summaries.dataloader = find_dataloader(iterable)
            settings = loader_settings(iterable)
            if settings is not None and settings != self._state.loader:
                self._state.loader = settings
                self._meta.log()
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._log_once.report("reading the DataLoader settings", exc)
        target = torch.device(device) if device is not None else None
        return MeteredLoader(self._loop, iterable, target, non_blocking)

    def step(self, batch: Any = None, *, accumulate: int = 1) -> StepContext | NullStep:
        """Context for one optimizer step (or one of ``accumulate`` micro-steps of it).

        Samples and tokens are counted from the batches pulled from :meth:`loader` for this
        step; when none were, from ``batch``. After :meth:`finish` it records nothing.
        """
        if accumulate != 1 and not is_int_at_least(accumulate, 1):
            raise ConfigError("accumulate", accumulate, "must be an integer >= 1")
        context = self._context
        if context.depth or self._loop.finished or self._recorder.step_thread != get_ident():
            unusual = self._nested_or_finished(context)
            if unusual is not None:
                return unusual
        context.batch = batch
        context.accumulate = accumulate
        return context

    def _nested_or_finished(self, context: StepContext) -> StepContext | NullStep | None:
        """The step context for a step that is not a plain one (None: it is, the first
        step of the thread that trains)."""
        if self._loop.finished:
            self._after_finish("meter.step()")
            return NULL_STEP
        rec = self._recorder
        if rec.from_other_thread():
            # Its steps would interleave with the first thread's and be taken for nested ones.
            self._log_once.warn_once(
                "threads", f"meter.step() in thread {threading.current_thread().name!r}: the "
                f"steps recorded are those of thread {rec.step_thread_name!r}, the first to step; "
                "steps of other threads are not measured (a Meter per thread measures each)")
            return NULL_STEP
        if not context.depth:
            return None
        self._log_once.warn_once("nested", "meter.step() inside meter.step(): steps do not nest; "
                               "the inner block is ignored (the outer one is the step)")
        return context

    def observe(self, *, loss: Any = None, metric: Any = None, target: float | None = None,
                higher_is_better: bool | None = None) -> None:
        """Record the loss and/or a metric of the current step; read at the window boundary.

        ``target`` times the run to the metric (or, without a metric, the loss) reaching it:
        at or above it when ``higher_is_better``, at or below it otherwise. The loss is
        smoothed (``smoothing``) before it is compared; a metric is compared as it is.
        """
        if self._loop.finished:
            self._after_finish("meter.observe()")
            return
        if self._loop.off_the_step_thread("meter.observe()"):
            return  # its values would land in the training thread's open step
        try:
            if target is not None:
                self._follow(target, higher_is_better, "metric" if metric is not None else "loss")
            self._recorder.observe(loss, metric)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._log_once.report("observe()", exc)

    def _follow(self, target: float, higher_is_better: bool | None, name: str) -> None:
        """Time the run to ``target`` (see :meth:`observe`)."""
        better = bool(higher_is_better) if higher_is_better is not None else False
        # An evaluation metric is already an average over a dataset: it is compared as it is.
        # The per-step training loss is noisy: it is smoothed.
        smoothing = self.config.smoothing if name == "loss" else 0.0
        goal = Goal(name=name, value=float(target), higher_is_better=better, smoothing=smoothing)
        if goal != self._goal:
            self._goal = goal
            self._writer.submit(self._pipeline.follow, goal)
            self._meta.log()

    def note(self, key: str, facts: Mapping[str, Any] | None) -> None:
        """Keep what a front-end measured about the run (an integration's framework work per
        step) in meta.json under ``key``, where the diagnosis reads it; None removes it. A key
        of the Meter's own meta (``config``, ``device``, ...) is refused."""
        if self._loop.finished:
            self._after_finish("meter.note()")
            return
        try:
            self._meta.note(key, facts)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._log_once.report("note()", exc)

    def finish(self) -> Summary:
        """End the run: flush the last window, write the summary, print the report."""
        summary = self._end.finish()
        self.job_summary = self._end.shown
        return summary

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:
            self._end.status = end_of(exc)
        self.finish()

    # -- for the front-ends that drive a Meter (``trainpace run``, the integrations); not
    # the loop's API, so not public: what they need, named, instead of the parts inside

    def _end_as(self, status: str, signal_name: str | None = None) -> None:
        """How the run ended, for the job's ledger, when it did not finish: said by whoever
        ends it (``trainpace run``, a signal handler) before :meth:`finish`."""
        self._end.status = (status, signal_name)

    @property
    def _job_ledger(self) -> JobLedger | None:
        """The ledger of the job this run is in (None: no run folder, or not rank 0), where a
        front-end times the job's events (checkpoint saves and loads, evaluations, steps)."""
        return self._ledger

    def _take_back(self, batch: Any) -> None:
        """``batch``, the latest counted into the open step, was fetched and never trained on
        (``trainpace run`` saw ``next(iter(loader))``): its samples, tokens and micro-batch
        leave the step's counts; the wait for it stays. Nothing after :meth:`finish`."""
        if not self._loop.finished:
            self._recorder.uncount(batch)

    def _leave_signals(self) -> None:
        """The front-end owns the process's signals (``trainpace run``): the Meter's SIGTERM
        handler goes, and the front-end ends the run itself."""
        self._term.uninstall()

    def _hurry(self) -> None:
        """The process is being stopped while the run ends: rank 0 of a job waits for the
        other ranks' last windows TERM_WAIT_S at most."""
        self._job.hurry()

    # -- the training thread's side -------------------------------------------------------

    def _begin_run(self) -> Any:
        """The first step begins: the sampler starts (its clock zero is the run's); returns
        the FLOP counter for this step, or None."""
        t0 = self._recorder.t0
        config = self.config
        if t0 is None:
            return None
        if self._ledger is not None:
            self._ledger.first_step(t0)
        self._vitals = DeviceVitals(
            device=self.device, interval_s=config.sample_interval_s, clock=self._clock, t0=t0,
            flops_per_step=config.flops_per_step, peaks=self._peaks, dtype=self._dtype,
            count_flops=config.count_flops and config.warmup != 0,
        )
        self._vitals.start()
        return self._vitals.flop_counter(samples=self._recorder.open_samples or None)

    def _after_finish(self, call: str) -> None:
        self._log_once.warn_once("after-finish", f"{call} after meter.finish(): the run is over, "
                               "nothing more is recorded (make a new Meter for another run)")


with_the_settings(Meter)
