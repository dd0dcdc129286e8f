"""Rank 0's publication of the merged run: its summary and meta, mid-run within a time
budget and once at the end (diagnosed), from the merge and the ranks' own summaries."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainpace.dist.exchange import Exchange
from trainpace.dist.job_summary import Merged, merged_meta, merged_summary, summary_dict
from trainpace.dist.merge import Merger
from trainpace.dist.ranks import RankInfo, rank_folder
from trainpace.dist.tree import TreeMerger
from trainpace.errors import RunFolderError
from trainpace.measure.summarize import summary_for_run
from trainpace.runlog import Record, RunData, read_json, read_run
from trainpace.series import StepSeries
from trainpace.summary import Summary

logger = logging.getLogger(__name__)

# Rank 0's mid-run publication of the merged run takes at most this share of the time (at
# thousands of ranks it costs a second of the writer thread: it is then made less often).
# The writer's Python work holds the GIL the training thread needs after each of its torch
# calls: each publication is felt by the step it falls in (and, through the collectives, by
# every rank's), so it is kept rare (a millisecond's publication: every half second).
PUBLISH_BUDGET = 0.002


@dataclass(frozen=True)
class JobSteps:
    """What the job's diagnosis reads beside its summary: the steps and sampler rows of the
    rank whose steps stand for the job (``Merger.steps_rank``), read from its folder."""

    rank: int
    series: StepSeries
    system: list[dict[str, Any]]


Diagnose = Callable[[Summary, Mapping[str, Any], JobSteps | None], Summary]
"""(the merged summary, the job's meta, the job's steps; None: this process's own) -> the
summary diagnosed."""
Publish = Callable[[Record], None]


class Publication:
    """Rank 0's merged run, made from ``merger`` and handed to ``publish`` (the Meter's sink
    for the run folder's top level)."""

    def __init__(self, info: RankInfo, merger: Merger | TreeMerger, *,
                 started_unix: float) -> None:
        self.info = info
        self.merger = merger
        self.started_unix = started_unix
        self._published_s = -float("inf")
        self._cost_s = 0.0

    def mid_run(self, publish: Publish | None, *, run: Path | None, run_id: str,
                exchange: Exchange, nodes: Mapping[int, Any] | None,
                broken: str | None) -> None:
        """Publish the merge so far, when the budget allows it."""
        now = time.perf_counter()
        if now - self._published_s < self._cost_s / PUBLISH_BUDGET:
            return
        self.merged(publish, None, run=run, run_id=run_id, exchange=exchange, nodes=nodes,
                    broken=broken, done=False)
        self._published_s = time.perf_counter()
        self._cost_s = self._published_s - now

    def merged(self, publish: Publish | None, summary: Summary | None, *, run: Path | None,
               run_id: str, exchange: Exchange, nodes: Mapping[int, Any] | None,
               broken: str | None, done: bool, diagnose: Diagnose | None = None) -> Summary:
        """The merged summary (``summary``: rank 0's own, at the end), published."""
        merger = self.merger
        if isinstance(merger, TreeMerger) and nodes is not None:
            # the rank entries: read only here (publication is budgeted), newest per node
            try:
                for node, entries in exchange.views(list(nodes)).items():
                    merger.set_view(node, entries)
            except Exception as exc:  # noqa: BLE001 - publish the totals without them
                logger.warning("trainpace: reading the nodes' rank entries failed (%s: %s)",
                               type(exc).__name__, exc)
        merged_of: Merged = merger
        summaries, steps = self._rank_summaries(summary, run=run, nodes=nodes, done=done)
        steps_rank = merger.steps_rank()
        # every rank runs the same script: rank 0's setup where that rank's folder is elsewhere
        rank_meta = (steps.meta if steps is not None
                     else _rank_meta(run, steps_rank or 0) or _rank_meta(run, 0))
        meta = merged_meta(merged_of, info=self.info, run_id=run_id,
                           started_unix=self.started_unix, done=done, exchange_error=broken,
                           rank_meta=rank_meta)
        merged = merged_summary(merged_of, summary or Summary(run_id=run_id), done=done,
                                rank_summaries=summaries)
        if diagnose is not None:
            if steps is None and steps_rank not in (None, 0):
                meta["dist"]["steps_rank"] = 0  # its folder is another node's: rank 0's read
            merged = diagnose(merged, meta, None if steps is None else JobSteps(
                rank=steps_rank or 0, series=steps.series, system=steps.system))
        if publish is not None:  # the summary first: a finished meta means a final summary
            publish(Record("summary", summary_dict(merged, merged_of, done=done)))
            publish(Record("meta", meta))
        return merged

    def _rank_summaries(self, own: Summary | None, *, run: Path | None,
                        nodes: Mapping[int, Any] | None,
                        done: bool) -> tuple[dict[int, Summary], RunData | None]:
        """The ranks' own summaries, from their folders: the one of the rank whose steps stand
        for the job (its step times), and at the end every rank's of a flat job, or of rank
        0's node in a two-level one (their ``ranks[]`` step medians); and that rank's folder as
        read (None: rank 0's own, or not readable here). A folder this host cannot read
        (another node's) is left out. Rank 0's own at the end is ``own``, complete in memory."""
        out: dict[int, Summary] = {0: own} if own is not None else {}
        steps_rank = self.merger.steps_rank()
        steps: RunData | None = None
        if run is None:
            return out, None
        wanted = ({steps_rank} if steps_rank is not None else set())
        if done:
            wanted |= set(range(self.info.world_size) if nodes is None else nodes.get(0, ()))
        for rank in sorted(wanted - set(out)):
            try:
                folder = read_run(rank_folder(run, rank))
                out[rank] = summary_for_run(folder)
            except (RunFolderError, OSError, ValueError) as exc:
                logger.debug("trainpace: rank %d's folder is not readable here (%s)", rank, exc)
                continue
            if rank == steps_rank:
                steps = folder
        return out, steps


def _rank_meta(run: Path | None, rank: int) -> dict[str, Any] | None:
    """A rank's meta.json, when its folder is readable here."""
    if run is None:
        return None
    try:
        meta = read_json(rank_folder(run, rank) / "meta.json")
    except (RunFolderError, OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None
