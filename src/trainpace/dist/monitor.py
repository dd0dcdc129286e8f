"""One rank's distributed monitoring, as the Meter drives it: folder, windows, the end.

The Meter calls :meth:`RankMonitor.window` on its writer thread at every window and
:meth:`RankMonitor.finish` once with its own final summary. Every rank posts its window
record; rank 0 merges them and hands the merged run's ``meta`` and ``summary`` records to
``publish`` (the Meter's sink for the run folder's top level). Nothing here runs on the
training thread except :meth:`run_folder`, once, at construction.

Rank 0 reads the other ranks' records in the trip that posts its own; a rank whose writer
posts a moment later would then be merged only at rank 0's next boundary, one window late.
So while a window waits for a rank, rank 0's :class:`_Poller` thread reads the store again
(every few milliseconds at first, less and less often without news) and merges the window as
soon as its last record is there. No step waits on it: it runs beside the writer thread, the
two serialised by one lock, and only rank 0 has one.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainpace.dist.comm import CollectiveTimer
from trainpace.dist.exchange import Exchange, Store, tcp_store
from trainpace.dist.merge import Merger, WindowRecord, window_record
from trainpace.dist.ranks import RankInfo, rank_folder
from trainpace.dist.job_summary import Merged, merged_meta, merged_summary, summary_dict
from trainpace.dist.tree import (
    FLAT_MAX_RANKS,
    VIEW_EVERY,
    NodeRecord,
    TreeMerger,
    node_ranks,
    node_record,
)
from trainpace.errors import RunFolderError
from trainpace.measure.summarize import summary_for_run
from trainpace.runlog import Record, read_run
from trainpace.summary import Summary

logger = logging.getLogger(__name__)

TIMEOUT_ENV = "TRAINPACE_DIST_TIMEOUT_S"
FLAT_MAX_ENV = "TRAINPACE_DIST_FLAT_MAX_RANKS"  # more ranks than this: node leaders merge first
DEFAULT_TIMEOUT_S = 10.0
POLL_S = 0.1
# Rank 0's mid-run publication of the merged run takes at most this share of the time (at
# thousands of ranks it costs a second of the writer thread: it is then made less often).
# The writer's Python work holds the GIL the training thread needs after each of its torch
# calls: each publication is felt by the step it falls in (and, through the collectives, by
# every rank's), so it is kept rare (a millisecond's publication: every half second).
PUBLISH_BUDGET = 0.002
YIELD_EVERY = 256  # records merged between two yields of the GIL
# Rank 0's reads while a window waits for a rank: the first soon after its own post (the
# others' writers post within milliseconds of it), then twice as far apart each time nothing
# new came, up to POLL_MAX_S (a rank that is gone costs a read a second, not a busy loop).
POLL_FIRST_S = 0.005
POLL_MAX_S = 1.0


def timeout_from_env(env: Mapping[str, str] | None = None) -> float:
    """The exchange's bound (``TRAINPACE_DIST_TIMEOUT_S``; the launcher's environment is
    the one place every rank of a job reads the same setting from)."""
    raw = (os.environ if env is None else env).get(TIMEOUT_ENV)
    try:
        value = float(raw) if raw is not None else DEFAULT_TIMEOUT_S
    except ValueError:
        value = DEFAULT_TIMEOUT_S
    return value if value > 0 else DEFAULT_TIMEOUT_S


def flat_max_from_env(env: Mapping[str, str] | None = None) -> int:
    """``TRAINPACE_DIST_FLAT_MAX_RANKS``: the largest job rank 0 merges alone."""
    raw = (os.environ if env is None else env).get(FLAT_MAX_ENV, "")
    return int(raw) if raw.strip().isdigit() else FLAT_MAX_RANKS


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
    ) -> None:
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
        self.collectives: CollectiveTimer | None = None  # dist.comm.watch_ddp sets it
        self._unix = unix_clock
        self._posted = 0
        self._final_sent = False
        self._broken: str | None = None  # why the exchange stopped, once it has
        self.started_unix = unix_clock()
        self._published_s = -float("inf")
        self._publish_cost_s = 0.0
        self.run: Path | None = None  # the job's run folder, once run_folder() has agreed it
        # rank 0: the writer thread's window() and the poller's reads take turns on the merge
        self._lock = threading.Lock()
        self._poller = _Poller(self._poll) if self.merger is not None else None

    @property
    def broken(self) -> str | None:
        return self._broken

    def run_folder(self, out: Path, fresh: Callable[[Path], Path]) -> Path:
        """The job's one run folder (rank 0 picks a fresh name, the others take it) and
        this rank's ``rank{r}/`` in it. Without an answer a rank uses the name it would pick."""
        # The name is agreed, not the path: on other nodes (no shared filesystem) the same
        # out= may sit elsewhere; each rank keeps its own parent folder.
        name = fresh(out).name if self.info.rank == 0 else out.name
        try:
            name = self.exchange.agree(f"run_folder/{out.name}", name if self.info.rank == 0
                                       else None)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            # Rank 0 slow to start, or no store: the exchange may still work later (its
            # first post says); the folder is out= as given.
            logger.warning("trainpace: agreeing on the run folder failed (%s: %s); this "
                           "rank writes under %s", type(exc).__name__, exc, out.parent / name)
        if not _plain_run_name(name, out.name):
            # The store takes writes from anyone who can reach it: a name with a path in it
            # would send this rank's files outside out=.
            logger.warning("trainpace: the run folder name agreed through the job's store "
                           "(%r) is not a folder name beside %s; this rank writes under %s",
                           name, out, out)
            name = out.name
        run = out.parent / name
        self.exchange.namespace = f"{name}/"
        self.run = run
        return rank_folder(run, self.info.rank)

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
                t_unix=self._unix(), figures=signs, final=final)
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
                now = time.perf_counter()
                if not final and now - self._published_s >= self._publish_cost_s / PUBLISH_BUDGET:
                    self._publish(None, done=False)
                    self._published_s = time.perf_counter()
                    self._publish_cost_s = self._published_s - now
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._stop("exchanging window figures", exc)

    def finish(self, summary: Summary, *,
               diagnose: Callable[[Summary, Mapping[str, Any]], Summary] | None = None,
               ) -> Summary | None:
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
        if self.merger is None:
            return None
        try:
            if self._broken is None:
                self._wait_for_finals(self.merger, self._collect)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._stop("waiting for the other ranks", exc)
        try:
            self.merger.flush()
            return self._publish(summary, done=True, diagnose=diagnose)
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

    def _publish(self, summary: Summary | None, *, done: bool,
                 diagnose: Callable[[Summary, Mapping[str, Any]], Summary] | None = None,
                 ) -> Summary | None:
        if self.merger is None:
            return None
        if isinstance(self.merger, TreeMerger) and self.nodes is not None:
            # the rank entries: read only here (publication is budgeted), newest per node
            try:
                for node, entries in self.exchange.views(list(self.nodes)).items():
                    self.merger.set_view(node, entries)
            except Exception as exc:  # noqa: BLE001 - publish the totals without them
                logger.warning("trainpace: reading the nodes' rank entries failed (%s: %s)",
                               type(exc).__name__, exc)
        merged_of: Merged = self.merger
        meta = merged_meta(merged_of, info=self.info, run_id=self.run_id,
                           started_unix=self.started_unix, done=done,
                           exchange_error=self._broken)
        merged = merged_summary(merged_of, summary or Summary(run_id=self.run_id), done=done,
                                rank_summaries=self._rank_summaries(summary, done=done))
        if diagnose is not None:
            merged = diagnose(merged, meta)
        if self.publish is not None:  # the summary first: a finished meta means a final summary
            self.publish(Record("summary", summary_dict(merged, merged_of, done=done)))
            self.publish(Record("meta", meta))
        return merged

    def _rank_summaries(self, own: Summary | None, *, done: bool) -> dict[int, Summary]:
        """The ranks' own summaries, from their folders: the slowest rank's (the job's step
        times), and at the end of a flat job every rank's (their ``ranks[]`` step medians).
        A folder this host cannot read (another node's) is left out. Rank 0's own at the end
        is ``own``, complete in memory."""
        merger, run = self.merger, self.run
        out: dict[int, Summary] = {0: own} if own is not None else {}
        if merger is None or run is None:
            return out
        slowest = merger.slowest_rank()
        wanted = ({slowest} if slowest is not None else set())
        if done and self.nodes is None:
            wanted |= set(range(self.info.world_size))
        for rank in sorted(wanted - set(out)):
            try:
                out[rank] = summary_for_run(read_run(rank_folder(run, rank)))
            except (RunFolderError, OSError, ValueError) as exc:
                logger.debug("trainpace: rank %d's folder is not readable here (%s)", rank, exc)
        return out

    def _stop(self, where: str, exc: BaseException) -> None:
        self._broken = f"{where}: {type(exc).__name__}: {exc}"
        logger.warning("trainpace: %s failed (%s: %s); this rank's own folder is still "
                       "written, the merge goes without it", where, type(exc).__name__, exc)


class _Poller:
    """Rank 0's reads of the store while a window waits for a rank: a daemon thread, started
    on the first wake, that calls ``poll`` (True: still waiting) at growing intervals until
    nothing waits, then sleeps until the next wake."""

    def __init__(self, poll: Callable[[], bool]) -> None:
        self._poll = poll
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        if self._stopping.is_set():
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="trainpace-dist-poll",
                                            daemon=True)
            self._thread.start()
        self._wake.set()

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            if self._stopping.is_set():
                return
            self._wake.clear()
            interval_s = POLL_FIRST_S
            # a wake while waiting (a new window) starts the intervals again
            while not self._stopping.wait(interval_s):
                if not self._poll():
                    break
                interval_s = POLL_FIRST_S if self._wake.is_set() else min(2 * interval_s,
                                                                         POLL_MAX_S)
                self._wake.clear()


def _plain_run_name(name: str, given: str) -> bool:
    """Whether ``name`` is a run folder's name that rank 0 could have picked for ``out``
    named ``given``: ``given`` itself or ``given-N``, one path component."""
    if name == given:
        return True
    number = name.removeprefix(f"{given}-")
    return number != name and number.isdigit() and number.isascii()


Signs = Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]]


def vitals_signs(vitals: Callable[[], Any]) -> Signs:
    """A window's device and host signs (throttling, temperature, CPU of this process and of
    the host) from the Meter's sampler, over the window's time span."""
    def signs(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        sampler = vitals()
        if sampler is None or not records:
            return {}
        start_s = float(records[0]["t_s"]) - float(records[0]["step_s"])
        signs: dict[str, Any] = sampler.window_signs(start_s, float(records[-1]["t_s"]))
        return signs

    return signs
