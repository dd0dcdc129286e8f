"""One rank's distributed monitoring as the Meter drives it: its window posts, and at rank 0
the merge of every rank's and the end's wait for them.

The Meter calls :meth:`RankMonitor.window` on its writer thread at every window and
:meth:`RankMonitor.finish` once with its own final summary. Every rank posts its window
record; rank 0 merges them (its :class:`~trainpace.dist.poller.Poller` reads again while a
window waits for a rank) and publishes the merged run
(:class:`~trainpace.dist.publication.Publication`). Nothing here runs on the training thread
except :meth:`RankMonitor.run_folder`, once, at construction.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainpace.dist.comm import CollectiveTimer
from trainpace.dist.exchange import Exchange, Store, tcp_store
from trainpace.dist.merge import Merger, WindowRecord, window_record
from trainpace.dist.poller import Poller
from trainpace.dist.publication import Diagnose, Publication
from trainpace.dist.ranks import RankInfo, rank_folder
from trainpace.dist.run_name import agree_run_folder
from trainpace.dist.settings import flat_max_from_env, timeout_from_env
from trainpace.dist.tree import VIEW_EVERY, NodeRecord, TreeMerger, node_ranks, node_record
from trainpace.runlog import Record
from trainpace.summary import Summary

logger = logging.getLogger(__name__)

POLL_S = 0.1  # the end's reads while it waits for the ranks' last windows
YIELD_EVERY = 256  # records merged between two yields of the GIL


class RankMonitor:
    """This rank's end of the exchange, and at rank 0 the merge of all ranks."""

    def __init__(
        self,
        info: RankInfo,
        *,
        run_id: str,
        publish: Callable[[Record], None] | None = None,
        timeout_s: float | None = None,
        connect: Callable[[RankInfo, float], Store] = tcp_store,
        unix_clock: Callable[[], float] = time.time,
        signs: Callable[[Sequence[Mapping[str, Any]]], Mapping[str, Any]] | None = None,
        flat_max_ranks: int | None = None,
        cpu_count: int | None = None,
    ) -> None:
        """``cpu_count``: the CPUs this rank may run on, carried in its window records (the
        job's meta lists each host's)."""
        self.info = info
        self.run_id = run_id
        self.publish = publish
        self.timeout_s = timeout_s if timeout_s is not None else timeout_from_env()
        self.exchange = Exchange(info, timeout_s=self.timeout_s, connect=connect)
        flat_max = flat_max_ranks if flat_max_ranks is not None else flat_max_from_env()
        # Past flat_max ranks, two levels: each node's local rank 0 merges its node first.
        self.nodes = (node_ranks(info.world_size, info.local_world_size)
                      if info.world_size > flat_max else None)
        self.node = info.rank // info.local_world_size if self.nodes else 0
        self.node_merger = (Merger(info.world_size, ids=self.nodes[self.node], keep_scored=True)
                            if self.nodes and info.local_rank == 0 else None)
        self._node_posts = 0
        self.merger: Merger | TreeMerger | None = None
        if info.rank == 0:
            self.merger = (TreeMerger(info.world_size, self.nodes) if self.nodes
                           else Merger(info.world_size))
        self.signs = signs
        self.cpu_count = cpu_count
        self.collectives: CollectiveTimer | None = None  # dist.comm.watch_ddp sets it
        self._unix = unix_clock
        self._posted = 0
        self._final_sent = False
        self._broken: str | None = None  # why the exchange stopped, once it has
        self.publication = (Publication(info, self.merger, started_unix=unix_clock())
                            if self.merger is not None else None)
        self.run: Path | None = None  # the job's run folder, once run_folder() has agreed it
        # rank 0: the writer thread's window() and the poller's reads take turns on the merge
        self._lock = threading.Lock()
        self._poller = Poller(self._poll) if self.merger is not None else None

    @property
    def broken(self) -> str | None:
        return self._broken

    def run_folder(self, out: Path, fresh: Callable[[Path], Path]) -> Path:
        """The job's one run folder (rank 0 picks a fresh name, the others take it) and
        this rank's ``rank{r}/`` in it."""
        self.run = agree_run_folder(self.exchange, self.info, out, fresh)
        return rank_folder(self.run, self.info.rank)

    # -- the writer thread -----------------------------------------------------------------

    def window(self, figures: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
               *, final: bool = False) -> None:
        """Post this window's record; at rank 0, merge what has come and publish it."""
        with self._lock:
            self._window(figures, records, final=final)
        if self._poller is not None and not final and self._broken is None and (
                self.merger is not None and self.merger.pending):
            self._poller.wake()  # a rank's record is still to come: read again soon

    def _poll(self) -> bool:
        """Rank 0, beside the writer: read the records that came since, merge them; whether
        a window still waits for a rank (then the poller reads again later)."""
        with self._lock:
            merger = self.merger
            if merger is None or self._broken is not None or not merger.pending:
                return False
            try:
                self._merge(merger, self._collect())
            except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                self._stop("reading the other ranks' windows", exc)
                return False
            return merger.pending

    def _window(self, figures: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
                *, final: bool) -> None:
        if self._broken is not None:
            return
        try:
            self._posted += 1
            self._final_sent = final
            signs = dict(figures)
            if self.signs is not None and records:
                signs.update(self.signs(records))
            if "util_pct" not in signs:
                signs["util_pct"] = signs.get("device_util_pct")
            info = self.info
            record = window_record(
                rank=info.rank, local_rank=info.local_rank, node=info.node, host=info.host,
                window=self._posted, steps=records, warmup=int(figures.get("warmup_steps") or 0),
                t_unix=self._unix(), figures=signs, cpu_count=self.cpu_count, final=final)
            if self.collectives is not None:
                # the hook's per-iteration means, over the window's measured steps
                pre_s, comm_s, n = self.collectives.take()
                if n and record["steps"]:
                    record["pre_s"] = pre_s / n * record["steps"]
                    record["comm_s"] = comm_s / n * record["steps"]
            arrived = self._post(record)
            if self.node_merger is not None and self.nodes is not None:
                self._merge(self.node_merger, arrived)
                self._post_node(final=False)
            if self.merger is not None:
                self._merge(self.merger, self._collect() if self.nodes is not None else arrived)
                if not final and self.publication is not None:
                    self.publication.mid_run(self.publish, run=self.run, run_id=self.run_id,
                                             exchange=self.exchange, nodes=self.nodes,
                                             broken=self._broken)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._stop("exchanging window figures", exc)

    def finish(self, summary: Summary, *,
               diagnose: Diagnose | None = None) -> Summary | None:
        """Post the last window; at rank 0, wait (bounded) for every rank's, publish the
        merged summary (diagnosed by ``diagnose`` when given) and return it. Never raises."""
        if self._poller is not None:
            self._poller.stop()  # from here on this thread reads until every rank is in
        if not self._final_sent:
            self.window({}, [], final=True)
        if self.node_merger is not None and self.nodes is not None:
            try:  # a leader: its node's last windows first, then its final node record
                if self._broken is None:
                    node = self.nodes[self.node]
                    self._wait_for_finals(self.node_merger,
                                          lambda: self.exchange.collect_ranks(node))
                self.node_merger.flush()
                if self._broken is None:
                    self._post_node(final=True)
            except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                self._stop("merging this node's ranks", exc)
        if self.merger is None or self.publication is None:
            return None
        try:
            if self._broken is None:
                self._wait_for_finals(self.merger, self._collect)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._stop("waiting for the other ranks", exc)
        try:
            self.merger.flush()
            return self.publication.merged(self.publish, summary, run=self.run,
                                           run_id=self.run_id, exchange=self.exchange,
                                           nodes=self.nodes, broken=self._broken, done=True,
                                           diagnose=diagnose)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._stop("merging the ranks", exc)
            return None

    def _post(self, record: WindowRecord) -> list[WindowRecord]:
        """Post this rank's window record. A reader of ranks (rank 0 of a flat job, a node's
        leader) reads their new records in the same trip to the store: each trip wakes the
        store's thread and then this one, and each waits for the GIL the training holds."""
        if self.node_merger is not None and self.nodes is not None:
            return self.exchange.post_and_collect(record, self.nodes[self.node])
        if self.merger is not None and self.nodes is None:
            return self.exchange.post_and_collect(record, range(self.info.world_size))
        self.exchange.post(record)
        return []

    # -- rank 0 ----------------------------------------------------------------------------

    def _collect(self) -> list[Any]:
        """Rank 0's read: every rank's records (flat), or every node's record."""
        if self.nodes is not None:
            return self.exchange.collect_nodes(list(self.nodes))
        return self.exchange.collect()

    def _merge(self, merger: Merger | TreeMerger, records: Sequence[Any]) -> bool:
        for i, record in enumerate(records, start=1):
            merger.add(record)
            if i % YIELD_EVERY == 0:
                time.sleep(0)  # let the training thread have the GIL between chunks
        return bool(records)

    def _post_node(self, *, final: bool) -> None:
        """A leader posts its node's record when windows were scored (and at the end), and
        its ranks' entries every VIEW_EVERY records."""
        merger = self.node_merger
        if merger is None or (not final and not merger.scored_log):
            return
        self._node_posts += 1
        record: NodeRecord = node_record(merger, node=self.node, leader=self.info.rank,
                                         seq=self._node_posts, final=final, t_unix=self._unix())
        self.exchange.post_node(record)
        if final or self._node_posts % VIEW_EVERY == 1:
            # the node's own scores stay here: rank 0 scores against every node
            self.exchange.post_view(self.node, [{k: v for k, v in d.items() if k != "scores"}
                                                for d in merger.rank_dicts()])

    def _wait_for_finals(self, merger: Merger | TreeMerger,
                         collect: Callable[[], Sequence[Any]]) -> None:
        """Read until everyone has sent a final record, or ``timeout_s`` without news."""
        quiet_since = self._unix()
        while True:
            if merger.all_final():
                return
            if self._merge(merger, collect()):
                quiet_since = self._unix()
            elif self._unix() - quiet_since >= self.timeout_s:
                return
            time.sleep(POLL_S)

    def _stop(self, where: str, exc: BaseException) -> None:
        self._broken = f"{where}: {type(exc).__name__}: {exc}"
        logger.warning("trainpace: %s failed (%s: %s); this rank's own folder is still "
                       "written, the merge goes without it", where, type(exc).__name__, exc)
