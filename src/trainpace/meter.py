"""The Meter: what a training loop uses. A facade over the recorder, the sinks and the samplers.

::

    meter = trainpace.Meter(out="runs/exp1")
    for batch in meter.loader(train_loader):
        with meter.step(batch):
            loss = model(batch).loss
            loss.backward(); optimizer.step(); optimizer.zero_grad()
            meter.observe(loss=loss)
    summary = meter.finish()

The Meter sits above the measurement core (it owns sinks and prints the report), so it lives
at the front-end layer, beside the integrations. Nothing it does may raise into the loop: a
failure of trainpace's own work is logged once and the training goes on.
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime as _dt
import logging
import math
import os
import platform
import socket
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

import torch

from trainpace._loop import MeteredLoader, StepContext
from trainpace._version import __version__
from trainpace.config import MeterConfig, WarmupSetting, is_int_at_least
from trainpace.devices.ceilings import cpu_name
from trainpace.devices.specs import canonical_dtype, override_peaks
from trainpace.diagnose import diagnose
from trainpace.dist.monitor import RankMonitor, vitals_signs
from trainpace.dist.ranks import rank_info
from trainpace.errors import ConfigError
from trainpace.measure.clock import device_timer_for, resolve_device
from trainpace.measure.loader import loader_settings
from trainpace.measure.recorder import StepRecorder
from trainpace.measure.summarize import (
    Goal,
    TargetTracker,
    summarize,
    warmup_steps,
    window_figures,
)
from trainpace.report.console import print_report
from trainpace.runlog import META_SCHEMA, Record
from trainpace.series import StepSeries
from trainpace.sinks.background import BackgroundWriter
from trainpace.sinks.base import FanOut, Sink
from trainpace.sinks.console import ConsoleSink
from trainpace.sinks.options import sinks_from_options
from trainpace.sinks.runfolder import RunFolderSink, fresh_run_folder
from trainpace.summary import Device, Summary
from trainpace.trace.capture import ProfileWindow
from trainpace.trace.evidence import with_trace_evidence
from trainpace.vitals import DeviceVitals

logger = logging.getLogger("trainpace")

# Sampler readings kept in memory for the diagnosis (about 3 hours at 10 Hz); all of them
# are in system.jsonl.
SYSTEM_ROWS_KEPT = 100_000
SYSTEM_LOG_INTERVAL_S = 1.0  # system.jsonl: one reading a second (a GPU row is ~1 kB)
SYSTEM_ROW_KEYS = ("t_s", "device_util_pct", "memory_used_pct", "temperature_c",
                   "bandwidth_util_pct")

# Step rows made ahead at each window boundary (a longer window makes the rest as it goes).
ROWS_STOCKED = 1000
# A mid-run summary refresh may take at most this share of the time since the previous one.
REFRESH_BUDGET = 0.002
# Auto warm-up is re-detected each time the number of steps doubles (and at the end): its
# cost stays negligible however long the run.


class Meter:
    """Measures a training loop: throughput, training time, device use, data wait.

    Args:
        out: run folder to write; ``None`` writes none (the summary is still returned).
        window: steps per window (console line, TensorBoard point, file flush).
        warmup: steps to exclude from the steady figures, or ``"auto"``.
        target_loss: time the run to the first time the smoothed loss is at or below this.
        smoothing: EMA weight of the past for the value timed to a target.
        samples: ``batch -> int`` override of the sample count.
        tokens: ``batch -> int`` override of the token count.
        device: the device whose clock times the steps (default: the accelerator, else CPU).
        tensorboard: folder for TensorBoard event files (extra ``trainpace[tensorboard]``).
        wandb, mlflow, prometheus, prometheus_host: the dashboard sinks
            (:func:`trainpace.sinks.options.sinks_from_options`).
        console: print one line per window.
        report: print the report at :meth:`finish`.
        sample_interval_s: period of the background device and host sampler.
        count_flops: count FLOPs and bytes of one warm-up step (MFU and roofline).
        flops_per_step: FLOPs of one optimizer step, if you know them (they replace the
            counted FLOPs; bytes are still counted for the roofline).
        profile_steps: ``(start, stop)``: capture a profiler trace of those steps.
        peaks: your device's peaks, over the spec table and measured ceilings:
            ``{"bandwidth_gb_s": 900, "tflops": {"bf16": 120}}``.
        dtype: the dtype whose peak MFU is measured against (default: the one that carried
            most of the counted FLOPs).
        run_id: name of the run (default: the run folder's name, else a timestamp).
        sinks: more sinks (objects with ``log(record)`` and ``close()``).
        stream: where the console line and the report go (default: stderr).
        clock: the host clock (seconds); injectable for tests.
    """

    def __init__(
        self,
        out: str | os.PathLike[str] | None = None,
        *,
        window: int = 100,
        warmup: WarmupSetting = "auto",
        target_loss: float | None = None,
        smoothing: float = 0.9,
        samples: Callable[[Any], int] | None = None,
        tokens: Callable[[Any], int] | None = None,
        device: str | torch.device | None = None,
        tensorboard: str | os.PathLike[str] | None = None,
        wandb: Any = None,
        mlflow: bool | str | None = None,
        prometheus: int | None = None,
        prometheus_host: str | None = None,
        console: bool = True,
        report: bool = True,
        sample_interval_s: float = 0.1,
        count_flops: bool = True,
        flops_per_step: float | None = None,
        profile_steps: tuple[int, int] | None = None,
        peaks: Mapping[str, Any] | None = None,
        dtype: str | None = None,
        run_id: str | None = None,
        sinks: Sequence[Sink] = (),
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.config = MeterConfig(
            out=Path(out) if out is not None else None,
            window=window,
            warmup=warmup,
            target_loss=target_loss,
            smoothing=smoothing,
            samples=samples,
            tokens=tokens,
            device=str(device) if device is not None else None,
            tensorboard=Path(tensorboard) if tensorboard is not None else None,
            console=console,
            report=report,
            sample_interval_s=sample_interval_s,
            count_flops=count_flops,
            flops_per_step=flops_per_step,
            profile_steps=tuple(profile_steps) if profile_steps is not None else None,  # type: ignore[arg-type]
            run_id=run_id,
        )
        # Checked now, so a bad override fails here and not in the middle of the training.
        self._peaks = override_peaks(peaks) if peaks is not None else None
        self._dtype = canonical_dtype(dtype) if dtype is not None else None
        self._stream = stream
        self._clock = clock
        self._faults: set[str] = set()
        self.device = resolve_device(self.config.device)
        timer = device_timer_for(self.device)
        self._recorder = StepRecorder(clock=clock, timer=timer, samples=samples, tokens=tokens)
        self._recorder.stock_rows(min(window, ROWS_STOCKED))
        self._series = StepSeries()
        self._goal: Goal | None = (
            Goal(name="loss", value=float(target_loss), smoothing=smoothing)
            if target_loss is not None else None
        )
        # Follows the goal window by window on the writer thread (rebuilt if the goal changes).
        self._tracker = TargetTracker(self._goal) if self._goal is not None else None
        self._loader: dict[str, Any] | None = None
        self._flushed_step = 0
        self._window = self.config.window
        self._warmup_count = 0
        self._warmup_at_steps = 0
        self._last_refresh_s = 0.0
        self._refresh_cost_s = 0.0
        self._summary: Summary | None = None
        # The sampler's headline readings, kept (bounded) for the diagnosis at the end.
        self._system_rows: deque[dict[str, Any]] = deque(maxlen=SYSTEM_ROWS_KEPT)
        self._vitals: DeviceVitals | None = None
        self._vitals_started = False
        self._system_written_s = -math.inf
        self._flop_count: AbstractContextManager[Any] | None = None
        if count_flops and flops_per_step is None and warmup == 0:
            logger.info("trainpace: FLOPs are not counted with warmup=0: the counted step would "
                        "be measured; pass flops_per_step= or leave a warm-up step")
        self._meta: dict[str, Any] = {}
        self._profile: ProfileWindow | None = None
        self._profile_begun = 0  # the last step whose profile span was opened
        self._profile_path: Path | None = None
        self._started_at = _dt.datetime.now(_dt.timezone.utc)
        # One rank of several: rank{r}/ in the job's run folder, the window exchange.
        self._rank = rank_info()
        self._dist: RankMonitor | None = None
        run_sink: RunFolderSink | None = None
        self.path: Path | None = (fresh_run_folder(self.config.out)
                                  if self.config.out and not self._rank.distributed else None)
        if self._rank.distributed:
            self._dist = RankMonitor(self._rank, run_id=run_id or "",
                                     signs=vitals_signs(lambda: self._vitals))
            if self.config.out is not None:
                self.path = self._dist.run_folder(self.config.out, fresh_run_folder)
                if self._rank.rank == 0:
                    run_sink = RunFolderSink(self.path.parent)
                    self._dist.publish = run_sink.log
        run_folder = self.path.parent if self._dist is not None and self.path else self.path
        self.run_id = run_id or (run_folder.name if run_folder else self._started_at.strftime(
            "run-%Y%m%d-%H%M%S"))
        if self._dist is not None:
            self._dist.run_id = self.run_id
        if self.config.profile_steps is not None:
            start, stop = self.config.profile_steps
            folder = (self.path / "profile" if self.path is not None
                      else Path(tempfile.mkdtemp(prefix="trainpace-profile-")))
            self._profile = ProfileWindow(start, stop, folder)
        outputs: list[Sink] = []
        if self.path is not None:
            outputs.append(RunFolderSink(self.path))
        if console:
            outputs.append(ConsoleSink(stream))
        if self.config.tensorboard is not None:
            from trainpace.sinks.tensorboard import TensorBoardSink

            outputs.append(TensorBoardSink(self.config.tensorboard))
        outputs.extend(sinks_from_options(wandb=wandb, mlflow=mlflow, prometheus=prometheus,
                                          prometheus_host=prometheus_host, run_id=self.run_id))
        outputs.extend(sinks)
        self._run_sink = run_sink
        self._sink = FanOut(outputs)
        self._writer = BackgroundWriter(lambda exc: self._fault("writing the run", exc))
        atexit.register(self._writer.close)  # a run never finished still gets its windows out
        self._step_context = StepContext(self)
        self._log_meta()

    # -- the loop's API -------------------------------------------------------------------

    def loader(self, iterable: Iterable[Any], *, device: str | torch.device | None = None,
               non_blocking: bool | None = None) -> Iterable[Any]:
        """Wrap an iterable of batches to time the wait for each one.

        With ``device``, each batch is moved there (and the copy timed): non-blocking when the
        batch is in pinned memory, unless ``non_blocking`` says otherwise.
        """
        try:
            settings = loader_settings(iterable)
            if settings is not None and settings != self._loader:
                self._loader = settings
                self._log_meta()
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("reading the DataLoader settings", exc)
        target = torch.device(device) if device is not None else None
        return MeteredLoader(self, iterable, target, non_blocking)

    def step(self, batch: Any = None, *, accumulate: int = 1) -> StepContext:
        """Context for one optimizer step (or one of ``accumulate`` micro-steps of it).

        Samples and tokens are counted from the batches pulled from :meth:`loader` for this
        step; when none were, from ``batch``.
        """
        if accumulate != 1 and not is_int_at_least(accumulate, 1):
            raise ConfigError("accumulate", accumulate, "must be an integer >= 1")
        context = self._step_context
        context.batch = batch
        context.accumulate = accumulate
        return context

    def observe(self, *, loss: Any = None, metric: Any = None, target: float | None = None,
                higher_is_better: bool | None = None) -> None:
        """Record the loss and/or a metric of the current step; read at the window boundary.

        ``target`` times the run to the metric (or, without a metric, the loss) reaching it:
        at or above it when ``higher_is_better``, at or below it otherwise. The loss is
        smoothed (``smoothing``) before it is compared; a metric is compared as it is.
        """
        try:
            if target is not None:
                name = "metric" if metric is not None else "loss"
                better = bool(higher_is_better) if higher_is_better is not None else False
                # An evaluation metric is already an average over a dataset: it is compared
                # as it is. The per-step training loss is noisy: it is smoothed.
                smoothing = self.config.smoothing if name == "loss" else 0.0
                goal = Goal(name=name, value=float(target), higher_is_better=better,
                            smoothing=smoothing)
                if goal != self._goal:
                    self._goal = goal
                    self._writer.submit(self._follow, goal)
                    self._log_meta()
            self._recorder.observe(loss=loss, metric=metric)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("observe()", exc)

    def finish(self) -> Summary:
        """End the run: flush the last window, write the summary, print the report."""
        if self._summary is not None:
            return self._summary
        summary: Summary | None = None
        try:
            end_s = self._clock()
            if self._vitals is not None:
                self._vitals.stop()  # a last reading, then the thread is joined
            self._boundary(final=True)
            self._close_writer()  # every window written; from here on, one thread
            summary = self._build_summary(final=True, end_s=end_s)
            summary = self._with_profile(summary)
            summary = self._diagnosed(summary)
            self._emit(Record("summary", summary.to_dict(), self._recorder.steps_closed))
            self._log_meta(finished=True)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("finishing the run", exc)
        self._close_writer()
        self._sink.close()
        if summary is None:
            summary = Summary(run_id=self.run_id)
        self._summary = summary
        shown: Summary | None = summary
        if self._dist is not None:  # rank 0 shows the merged run; the other ranks stay quiet
            shown = self._dist.finish(summary, diagnose=self._diagnosed_merged)
            if self._run_sink is not None:
                self._run_sink.close()
        if self.config.report and shown is not None:
            try:
                print_report(shown, file=self._stream)
            except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                self._fault("printing the report", exc)
        return summary

    def _start_vitals(self) -> None:
        """Start the device and host sampler at the first step (its clock zero is the run's)."""
        self._vitals_started = True
        t0 = self._recorder.t0
        if t0 is None:
            return
        config = self.config
        self._vitals = DeviceVitals(
            device=self.device, interval_s=config.sample_interval_s, clock=self._clock, t0=t0,
            flops_per_step=config.flops_per_step, peaks=self._peaks, dtype=self._dtype,
            count_flops=config.count_flops and config.warmup != 0,
        )
        self._vitals.start()

    def _profile_begin(self) -> None:
        """Open the profiler span of the step about to start (before its batch is fetched)."""
        rec, profile = self._recorder, self._profile
        if profile is not None and not rec.in_step and self._profile_begun <= rec.steps_closed:
            self._profile_begun = rec.steps_closed + 1
            profile.step_begin(self._profile_begun)

    def _with_profile(self, summary: Summary) -> Summary:
        """Analyze the profiled steps' trace; its kernel (and communication) evidence joins."""
        if self._profile is None:
            return summary
        analysis = self._profile.analyze()
        self._profile_path = self._profile.trace_path
        if analysis is None:
            return summary
        self._emit(Record("profile", analysis.to_dict(), self._recorder.steps_closed))
        return with_trace_evidence(summary, analysis.summary)

    def _diagnosed(self, summary: Summary) -> Summary:
        try:
            diagnosis = diagnose(summary, steps=self._series.records(), system=self._system_rows,
                                 meta=self._meta)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("diagnosing the run", exc)
            return summary
        return dataclasses.replace(summary, diagnosis=diagnosis)

    def _diagnosed_merged(self, merged: Summary, meta: Mapping[str, Any]) -> Summary:
        diagnosis = diagnose(merged, steps=self._series.records(), system=self._system_rows,
                             meta=meta)
        return dataclasses.replace(merged, diagnosis=diagnosis)

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.finish()

    # -- inside ---------------------------------------------------------------------------

    def _fault(self, where: str, exc: BaseException) -> None:
        """Log a failure of trainpace's own work once per place; the training goes on."""
        if where in self._faults:
            return
        self._faults.add(where)
        logger.warning(
            "trainpace: %s failed (%s: %s); training goes on, the figures may miss it",
            where, type(exc).__name__, exc,
        )

    def _boundary(self, *, final: bool = False) -> None:
        """Window boundary, on the training thread: hand the finished steps to the writer."""
        rec = self._recorder
        make_records = rec.take_ready(final=final)
        self._flushed_step = rec.steps_closed  # steps not resolved yet go with the next window
        if rec.tokens_counted != self._meta.get("tokens_counted"):
            self._log_meta()  # learnt from the first token batch: a killed run keeps it
        self._writer.submit(self._window_work, make_records, final)

    def _window_work(self, make_records: Callable[[], list[dict[str, Any]]],
                     final: bool) -> None:
        """On the writer thread: the window's records, figures, files and lines; the next
        window's step rows; now and then a summary refresh."""
        records = make_records()
        if not final:  # the next window's step rows (popped by the training thread)
            self._recorder.stock_rows(min(self._window, ROWS_STOCKED))
        _yield_gil()
        if records:
            self._series.extend(records)
            _yield_gil()
            figures = window_figures(records, self._warmup(final=final))
            if self._tracker is not None:
                self._tracker.add_records(records)
                progress = self._tracker.progress()
                figures["time_to_target_s"] = progress.time_to_target_s
                figures["eta_to_target_s"] = progress.eta_s
            figures["device_kind"] = self.device.type
            if self._vitals is not None:
                figures.update(self._vitals.window_figures(
                    float(records[0]["t_s"] - records[0]["step_s"]), float(records[-1]["t_s"])))
            _yield_gil()
            self._sink.log(Record("window", {"window": figures, "steps": records},
                                  records[-1]["step"]))
            _yield_gil()
            if self._dist is not None:
                self._dist.window(figures, records)  # contained: never raises
        if self._vitals is not None:
            rows = self._vitals.drain_rows()
            self._system_rows.extend({key: row.get(key) for key in SYSTEM_ROW_KEYS}
                                     for row in rows)
            # Every reading feeds the aggregates; the file keeps about one a second.
            written = []
            for row in rows:
                if row["t_s"] - self._system_written_s >= SYSTEM_LOG_INTERVAL_S:
                    written.append(row)
                    self._system_written_s = row["t_s"]
            if written:
                self._sink.log(Record("system", {"rows": written}, self._flushed_step))
        if final:
            return
        now = self._clock()
        if now - self._last_refresh_s >= self._refresh_cost_s / REFRESH_BUDGET:
            _yield_gil()
            summary = self._build_summary(final=False, end_s=now)
            _yield_gil()
            self._sink.log(Record("summary", summary.to_dict(), self._flushed_step))
            self._last_refresh_s = self._clock()
            self._refresh_cost_s = self._last_refresh_s - now

    def _follow(self, goal: Goal) -> None:
        """On the writer thread: a new goal, followed from the run's first step."""
        self._tracker = TargetTracker(goal)
        self._tracker.add_records(self._series.records())

    def _emit(self, record: Record) -> None:
        """To the sinks: through the writer while it runs (order kept), directly after."""
        if self._writer.closed:
            self._sink.log(record)
        else:
            self._writer.submit(self._sink.log, record)

    def _close_writer(self) -> None:
        self._writer.close()
        atexit.unregister(self._writer.close)

    def _warmup(self, *, final: bool = False) -> int:
        """Warm-up steps of the steps so far (cached between doublings of the run)."""
        n = len(self._series)
        if final or n >= 2 * self._warmup_at_steps:
            self._warmup_count = warmup_steps(self._series.column("step_s"), self.config.warmup)
            self._warmup_at_steps = n
        return self._warmup_count

    def _build_summary(self, *, final: bool, end_s: float) -> Summary:
        rec = self._recorder
        t0 = rec.t0
        summary = summarize(
            self._series,
            warmup=self.config.warmup,
            excluded=self._warmup(final=final),
            goal=self._goal,
            progress=self._tracker.progress() if self._tracker is not None else None,
            run_id=self.run_id,
            wall_s=(end_s - t0) if final and t0 is not None else None,
            clock=rec.timer.name if rec.timer is not None else "host",
            tokens_counted=rec.tokens_counted,
            loader=self._loader,
            host=socket.gethostname(),
        )
        if self._vitals is None:
            return dataclasses.replace(
                summary, device=Device(kind=self.device.type, name=_device_name(self.device)))
        # Device figures over the measured steps: from the end of warm-up to the last step.
        t_s = self._series.column("t_s")
        warmup = summary.steps.warmup
        t_start_s = float(t_s[warmup - 1]) if 0 < warmup <= len(t_s) else 0.0
        t_end_s = float(t_s[-1]) if len(t_s) else end_s - (t0 or end_s)
        device, bandwidth, flops, host = self._vitals.sections(
            t_start_s=t_start_s, t_end_s=t_end_s, step_s=summary.time.step_s_median,
            samples_per_s=summary.throughput.samples_per_s)
        return dataclasses.replace(summary, device=device, bandwidth=bandwidth, flops=flops,
                                   host=host)

    def _log_meta(self, *, finished: bool = False) -> None:
        config = self.config
        meta = {
            "schema": META_SCHEMA,
            "run_id": self.run_id,
            "started_at": self._started_at.isoformat(),
            "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat() if finished else None,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "argv": list(sys.argv),
            "versions": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "trainpace": __version__,
            },
            "device": {"kind": self.device.type, "index": self.device.index,
                       "name": _device_name(self.device)},
            "clock": self._recorder.timer.name if self._recorder.timer is not None else "host",
            "world_size": self._rank.world_size,
            "rank": self._rank.rank,
            "local_rank": self._rank.local_rank,
            "node": self._rank.node,
            "cpu_count": _usable_cpus(),
            "config": {
                "window": config.window,
                "warmup": config.warmup,
                "target_loss": config.target_loss,
                "smoothing": config.smoothing,
                "sample_interval_s": config.sample_interval_s,
                "count_flops": config.count_flops,
                "flops_per_step": config.flops_per_step,
                "profile_steps": list(config.profile_steps) if config.profile_steps else None,
                "device": config.device,
                "samples_override": config.samples is not None,
                "tokens_override": config.tokens is not None,
            },
            "target": dataclasses.asdict(self._goal) if self._goal is not None else None,
            "loader": self._loader,
            "tokens_counted": self._recorder.tokens_counted,
            "vitals": self._vitals.meta() if self._vitals is not None else None,
            "profile": None if self._profile is None else {
                "steps": list(self.config.profile_steps or ()),
                "trace": str(self._profile_path) if self._profile_path else None,
            },
        }
        self._meta = meta
        self._emit(Record("meta", meta, self._recorder.steps_closed))


def _yield_gil() -> None:
    """Let the training thread run if it is waiting for the GIL.

    The writer's work is Python and holds the GIL; CPython makes a waiting thread wait up to
    the switch interval (5 ms) before it forces a switch. Yielding between the stages of a
    window keeps the training thread's wait to one stage.
    """
    time.sleep(0)


def _device_name(device: torch.device) -> str | None:
    try:
        if device.type == "cuda" and torch.cuda.is_available():
            return str(torch.cuda.get_device_name(device))
        if device.type == "cpu":
            return cpu_name()
    except Exception:  # noqa: BLE001 - a name is nice to have, never required
        return None
    return None


def _usable_cpus() -> int | None:
    """CPUs this process may run on (its affinity), which bounds useful DataLoader workers."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count()
