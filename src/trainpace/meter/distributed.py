"""The Meter as one rank of a distributed job: its folder, its window exchange, the merge.

A single process gets none of this (``JobRank.single``). Under torchrun each rank writes
``rank{r}/`` inside the job's one run folder (rank 0 picks the name, the others take it), posts
its window figures through :class:`~trainpace.dist.monitor.RankMonitor` on the writer thread,
and rank 0 writes the merged summary into the job's folder at the end.

The sinks that show the job (the console line and the dashboards, ``shows_job``) live at rank
0 only, behind a fan-out of their own: each window once the merge has it from every rank
(:func:`~trainpace.dist.job_window.job_window`), the merged summary as it is published, and
rank 0's own meta (the run's setup).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainpace.dist.folders import MIN_WINDOWS, read_distributed
from trainpace.dist.job_summary import rank_summary, summary_dict
from trainpace.dist.job_window import OWN_FIGURES, job_window
from trainpace.dist.merge import Merger, WindowRecord
from trainpace.dist.monitor import RankMonitor
from trainpace.dist.publication import Diagnose, JobSteps
from trainpace.dist.ranks import RankInfo, rank_info
from trainpace.dist.signs import vitals_signs
from trainpace.errors import ConfigError
from trainpace.meter.meta import usable_cpus
from trainpace.meter.outputs import shows_job
from trainpace.runlog import Record
from trainpace.sinks.base import FanOut, Sink
from trainpace.sinks.folder_claim import (
    claim_rank_folder,
    claim_run_folder,
    move_earlier_rank_run,
)
from trainpace.sinks.runfolder import RunFolderSink
from trainpace.summary import Summary

logger = logging.getLogger(__name__)

OWN_KEPT = 16  # rank 0's own windows kept for the merge to join (it runs a window or two late)
# After SIGTERM, rank 0 waits at most this long without news for the other ranks' last
# windows (they are being stopped too, and each sends its last window as it ends).
TERM_WAIT_S = 3.0


class JobRank:
    """This process's place in the job, and what it does because of it."""

    def __init__(self, info: RankInfo, vitals: Callable[[], Any], *,
                 monitor: RankMonitor | None = None) -> None:
        """``monitor``: the rank's exchange (made from ``info`` when None; tests give one)."""
        self.info = info
        self.monitor: RankMonitor | None = None
        self._merged_folder: RunFolderSink | None = None
        self._dashboards: FanOut | None = None  # rank 0's sinks that show the job
        self._dashboards_timeout_s = 0.0
        self._rank_figures = False
        self._own: dict[int, dict[str, Any]] = {}  # last step -> rank 0's own window figures
        self._shown_window = 0  # the newest merged window the dashboards were given
        self._failed = False
        if info.distributed:
            self.monitor = monitor or RankMonitor(info, run_id="", signs=vitals_signs(vitals),
                                                  cpu_count=usable_cpus())
            if info.rank == 0:
                self.monitor.publish = self._publish

    @classmethod
    def from_environment(cls, vitals: Callable[[], Any]) -> JobRank:
        return cls(rank_info(), vitals)

    def claim(self, out: Path | None) -> tuple[Path | None, Path | None]:
        """(this rank's folder, the job's run folder): the same folder for a single process."""
        if out is None:
            return None, None
        if self.monitor is None:
            path = claim_run_folder(out)
            return path, path
        path = self.monitor.run_folder(out, claim_run_folder)
        move_earlier_rank_run(path)  # a job continued: this rank's earlier run into runs/
        if self.info.rank == 0:  # its job folder was claimed (empty, or this job's)
            self._merged_folder = RunFolderSink(path.parent)
            return path, path.parent
        try:
            claim_rank_folder(path)
        except ConfigError as exc:  # monitoring never breaks training: this rank trains on
            logger.warning("trainpace: rank %d writes no run folder: %s", self.info.rank, exc)
            return None, None
        return path, path.parent

    def dashboards(self, sinks: Sequence[Sink], *, timeout_s: float,
                   rank_figures: bool = False) -> list[Sink]:
        """The sinks the Meter feeds itself. A single process: all of them. A job: those that
        show the job are taken out; at rank 0 they are fed here (and closed at
        :meth:`finish`, ``timeout_s`` for all), on the other ranks they get nothing.
        ``rank_figures``: the job's windows carry each rank's own figures too."""
        if self.monitor is None:
            return list(sinks)
        own = [sink for sink in sinks if not shows_job(sink)]
        job = [sink for sink in sinks if shows_job(sink)]
        if self.info.rank != 0:
            for sink in job:  # a sink made on every rank (sinks=): nothing reaches it here
                try:
                    sink.close()
                except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                    logger.warning("trainpace: closing %s on rank %d failed (%s: %s)",
                                   type(sink).__name__, self.info.rank, type(exc).__name__,
                                   exc)
            return own
        if not job:
            return own
        self._dashboards = FanOut(job)
        self._dashboards_timeout_s = timeout_s
        self._rank_figures = rank_figures
        if isinstance(self.monitor.merger, Merger):  # a two-level merge scores no windows here
            self.monitor.merger.on_scored = self._merged_window
        return [*own, _MetaTo(self._dashboards)]

    def name(self, run_id: str) -> str:
        """The run's id, rank 0's for every rank (a continued job's run is ``<id>.2`` on
        rank 0, which reads the job's ledger): each rank's meta.json says the same, and a
        later restart moves each rank's folder to the same ``runs/<run_id>/``."""
        if self.monitor is None:
            return run_id
        try:
            run_id = self.monitor.exchange.agree(f"run_id/{self.monitor.exchange.namespace}",
                                                 run_id if self.info.rank == 0 else None)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            logger.warning("trainpace: agreeing on the run id failed (%s: %s); this rank's "
                           "run is %r", type(exc).__name__, exc, run_id)
        self.monitor.run_id = run_id
        return run_id

    def window(self, figures: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> None:
        """A window observer (writer thread): post this rank's window; never raises."""
        if self.monitor is None:
            return
        dashboards = self._dashboards
        if dashboards is None:
            self.monitor.window(figures, records)
            return
        last_step = int(figures.get("last_step") or 0)
        self._own[last_step] = {key: figures[key] for key in OWN_FIGURES if key in figures}
        while len(self._own) > OWN_KEPT:
            del self._own[next(iter(self._own))]
        self.monitor.window(figures, records)  # at rank 0, the merge shows what it completes
        broken = self.monitor.broken is not None
        if broken or not figures.get("measured_steps"):
            # A warm-up window has no figures to merge; without the exchange rank 0 shows
            # its own, labelled as one rank of the job.
            shown = dict(figures)
            if broken:
                shown.update(ranks=1, world_size=self.info.world_size)
            dashboards.log(Record("window", {"window": shown, "steps": []}, last_step))

    def own_summary(self, summary: Summary) -> Summary:
        """This rank's summary in the job's terms (world size, its rank)."""
        return rank_summary(summary, self.info)

    def finish(self, summary: Summary, diagnose: Diagnose) -> Summary | None:
        """The summary to show: a single process's own; at rank 0 the merged job's; None on
        the other ranks (they stay quiet)."""
        if self.monitor is None:
            return summary
        shown = self.monitor.finish(summary, diagnose=diagnose)
        replayed = self._replayed(diagnose) if shown is not None else None
        if replayed is not None:
            shown = replayed
            if self._dashboards is not None:  # the job's summary as the report shows it
                self._dashboards.log(Record("summary", replayed.to_dict()))
        if self._merged_folder is not None:
            self._merged_folder.close()
        if self._dashboards is not None:
            self._dashboards.close(self._dashboards_timeout_s)
        return shown

    def hurry(self) -> None:
        """The job is being stopped: the end waits for the other ranks TERM_WAIT_S at most."""
        if self.monitor is not None:
            self.monitor.timeout_s = min(self.monitor.timeout_s, TERM_WAIT_S)

    def _replayed(self, diagnose: Diagnose) -> Summary | None:
        """Rank 0, at the end: when the live merge scored too few windows to tell a
        straggler (a short job, the default window), or a rank did not send its last window
        (it died: its folder may hold a window more than it sent), the job merged again from
        every rank's steps (each rank's folder is complete once it has sent its last window,
        or is all that is left of a rank that died). None when a rank's folder is not here
        (another node's) or the job is merged in two levels (too large to read at the end)."""
        monitor = self.monitor
        merger = monitor.merger if monitor is not None else None
        if (monitor is None or monitor.run is None or not isinstance(merger, Merger)
                or (merger.scored_windows >= MIN_WINDOWS and not merger.missing(done=True))):
            return None
        try:
            run = read_distributed(monitor.run)
            if run is None or run.merger is None or len(run.ranks_read) < self.info.world_size:
                return None
            meta = {**run.meta, "run_id": monitor.run_id}
            meta["dist"]["exchange"] = "store, then rank_folders (few windows or a rank gone)"
            # the steps of the rank that stands for the job, as the replay chose it
            merged = diagnose(run.summary, meta, JobSteps(
                rank=int(meta["dist"]["steps_rank"]), series=run.series, system=run.system))
            if self._merged_folder is not None:
                self._merged_folder.log(Record("summary", summary_dict(merged, run.merger,
                                                                      done=True)))
                self._merged_folder.log(Record("meta", meta))
            return merged
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            logger.warning("trainpace: merging the ranks' folders at the end failed (%s: %s); "
                           "the live merge is shown", type(exc).__name__, exc)
            return None

    # -- rank 0's dashboards (the writer thread) ------------------------------------------

    def _publish(self, record: Record) -> None:
        """The merged run's meta and summary: to the job's folder; the summary (the job's
        figures, as the report shows them) to the dashboards too."""
        if self._merged_folder is not None:
            self._merged_folder.log(record)
        if self._dashboards is not None and record.kind == "summary":
            self._dashboards.log(record)

    def _merged_window(self, records: Mapping[int, WindowRecord]) -> None:
        """A window the merge has from its ranks: the job's figures to the dashboards, once
        (a rank's late record of a window already shown is not shown again)."""
        try:
            window = max(record["window"] for record in records.values())
            if window <= self._shown_window or self._dashboards is None:
                return
            self._shown_window = window
            last_step = max(record["last_step"] for record in records.values())
            figures = job_window(records, world_size=self.info.world_size,
                                 own=self._own.get(last_step))  # the same steps, or none
            if not self._rank_figures:
                del figures["rank_figures"]
            self._dashboards.log(Record("window", {"window": figures, "steps": []}, last_step))
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            if not self._failed:
                self._failed = True
                logger.warning("trainpace: the job's window for the dashboards failed (%s: "
                               "%s); they miss it", type(exc).__name__, exc)


class _MetaTo:
    """In rank 0's own fan-out: its meta (the run's setup) to the dashboards too."""

    reads_steps = False

    def __init__(self, dashboards: FanOut) -> None:
        self._dashboards = dashboards

    def log(self, record: Record) -> None:
        if record.kind == "meta":
            self._dashboards.log(record)

    def close(self) -> None:
        """The dashboards are closed by the job (after its last summary)."""
