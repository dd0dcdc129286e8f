"""The Meter as one rank of a distributed job: its folder, its window exchange, the merge.

A single process gets none of this (``JobRank.single``). Under torchrun each rank writes
``rank{r}/`` inside the job's one run folder (rank 0 picks the name, the others take it), posts
its window figures through :class:`~trainpace.dist.monitor.RankMonitor` on the writer thread,
and rank 0 writes the merged summary into the job's folder at the end. At rank 0, the sinks
that watch the job (:meth:`JobRank.watch`) get the job's records: each window once the merge has
scored it (global figures), and the merged summary as it is published.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainpace.dist.folders import MIN_WINDOWS, read_distributed
from trainpace.dist.job_summary import rank_summary, summary_dict
from trainpace.dist.merge import JOB_WINDOWS_KEPT, JobWindow, Merger
from trainpace.dist.monitor import RankMonitor, vitals_signs
from trainpace.dist.ranks import RankInfo, rank_info
from trainpace.runlog import Record
from trainpace.sinks.base import Sink
from trainpace.sinks.runfolder import RunFolderSink, claim_run_folder
from trainpace.summary import Summary

logger = logging.getLogger(__name__)

# After SIGTERM or Ctrl-C, rank 0 waits at most this long without news for the other ranks'
# last windows (they are being stopped too, and each sends its last window as it ends).
TERM_WAIT_S = 3.0

# A job window's figures that are the job's (the rest of the line is rank 0's own: its loss,
# its ETA to the target).
_JOB_FIGURES = ("last_step", "samples_per_s", "tokens_per_s", "step_s_median", "step_s_p90",
                "wait_pct", "device_util_pct")


class JobRank:
    """This process's place in the job, and what it does because of it."""

    def __init__(self, info: RankInfo, vitals: Callable[[], Any]) -> None:
        self.info = info
        self.monitor: RankMonitor | None = None
        self._merged_folder: RunFolderSink | None = None
        self._watchers: list[Sink] = []
        self._own_figures: dict[int, Mapping[str, Any]] = {}  # rank 0's, by window
        self._windows = 0
        if info.distributed:
            self.monitor = RankMonitor(info, run_id="", signs=vitals_signs(vitals))

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
        if self.info.rank == 0:
            self._merged_folder = RunFolderSink(path.parent)
            self.monitor.publish = self._publish
        return path, path.parent

    def watch(self, sink: Sink) -> bool:
        """At rank 0 of a distributed job, ``sink`` gets the job's records from now on
        (True); elsewhere there is no job to watch (False: give it the rank's own)."""
        if self.monitor is None or self.info.rank != 0:
            return False
        self._watchers.append(sink)
        return True

    def hurry(self) -> None:
        """The job is being stopped: the end waits for the other ranks TERM_WAIT_S at most."""
        if self.monitor is not None:
            self.monitor.timeout_s = min(self.monitor.timeout_s, TERM_WAIT_S)

    def _publish(self, record: Record) -> None:
        if self._merged_folder is not None:
            self._merged_folder.log(record)
        self._to_watchers(record)

    def _to_watchers(self, record: Record) -> None:
        for sink in self._watchers:
            try:
                sink.log(record)
            except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                logger.warning("trainpace: a sink watching the job failed (%s: %s)",
                               type(exc).__name__, exc)

    def _send_job_windows(self) -> None:
        """The windows the merge has scored since the last call, to the watchers."""
        merger = self.monitor.merger if self.monitor is not None else None
        take = getattr(merger, "take_job_windows", None)  # (the two-level merge has none)
        if not self._watchers or take is None:
            return
        for job in take():
            own = self._own_figures.pop(job["window"], {})
            self._to_watchers(Record("window", {"window": job_figures(job, own), "steps": []},
                                     job["last_step"]))

    def name(self, run_id: str) -> None:
        if self.monitor is not None:
            self.monitor.run_id = run_id

    def window(self, figures: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> None:
        """A window observer (writer thread): post this rank's window; never raises."""
        if self.monitor is None:
            return
        self._windows += 1
        if self._watchers:
            self._own_figures[self._windows] = figures
            self._own_figures.pop(self._windows - JOB_WINDOWS_KEPT, None)  # never scored
        self.monitor.window(figures, records)
        self._send_job_windows()

    def own_summary(self, summary: Summary) -> Summary:
        """This rank's summary in the job's terms (world size, its rank)."""
        return rank_summary(summary, self.info)

    def finish(self, summary: Summary,
               diagnose: Callable[[Summary, Mapping[str, Any]], Summary]) -> Summary | None:
        """The summary to show: a single process's own; at rank 0 the merged job's; None on
        the other ranks (they stay quiet)."""
        if self.monitor is None:
            return summary
        shown = self.monitor.finish(summary, diagnose=diagnose)
        self._send_job_windows()
        if shown is not None:
            shown = self._replayed(diagnose) or shown
        if self._merged_folder is not None:
            self._merged_folder.close()
        return shown

    def _replayed(self, diagnose: Callable[[Summary, Mapping[str, Any]], Summary],
                  ) -> Summary | None:
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
            meta["dist"]["exchange"] = "store, then rank_folders (few windows)"
            merged = diagnose(run.summary, meta)
            if self._merged_folder is not None:
                self._merged_folder.log(Record("summary", summary_dict(merged, run.merger,
                                                                      done=True)))
                self._merged_folder.log(Record("meta", meta))
            return merged
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            logger.warning("trainpace: merging the ranks' folders at the end failed (%s: %s); "
                           "the live merge is shown", type(exc).__name__, exc)
            return None


def job_figures(job: JobWindow, own: Mapping[str, Any]) -> dict[str, Any]:
    """A window line's figures for the job: the job's throughput, the slowest rank's step
    time, the worst wait, over ``own`` (rank 0's figures of the same window)."""
    figures = dict(own)
    figures.update({key: job[key] for key in _JOB_FIGURES})  # type: ignore[literal-required]
    figures.setdefault("measured_steps", job["steps"])
    figures["ranks"] = job["ranks"]
    figures["slowest_rank"] = job["slowest_rank"]
    return figures
