"""The Meter as one rank of a distributed job: its folder, its window exchange, the merge.

A single process gets none of this (``JobRank.single``). Under torchrun each rank writes
``rank{r}/`` inside the job's one run folder (rank 0 picks the name, the others take it), posts
its window figures through :class:`~trainpace.dist.monitor.RankMonitor` on the writer thread,
and rank 0 writes the merged summary into the job's folder at the end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainpace.dist.job_summary import rank_summary
from trainpace.dist.monitor import RankMonitor, vitals_signs
from trainpace.dist.ranks import RankInfo, rank_info
from trainpace.sinks.runfolder import RunFolderSink, claim_run_folder, move_earlier_rank_run
from trainpace.summary import Summary

logger = logging.getLogger(__name__)


class JobRank:
    """This process's place in the job, and what it does because of it."""

    def __init__(self, info: RankInfo, vitals: Callable[[], Any]) -> None:
        self.info = info
        self.monitor: RankMonitor | None = None
        self._merged_folder: RunFolderSink | None = None
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
        move_earlier_rank_run(path)  # a job continued: this rank's earlier run into runs/
        if self.info.rank == 0:
            self._merged_folder = RunFolderSink(path.parent)
            self.monitor.publish = self._merged_folder.log
        return path, path.parent

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
        if self.monitor is not None:
            self.monitor.window(figures, records)

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
        if self._merged_folder is not None:
            self._merged_folder.close()
        return shown
