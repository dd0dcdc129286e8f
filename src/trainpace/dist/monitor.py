"""One rank's distributed monitoring, as the Meter drives it: folder, windows, the end.

The Meter calls :meth:`RankMonitor.window` on its writer thread at every window and
:meth:`RankMonitor.finish` once with its own final summary. Every rank posts its window
record; rank 0 merges them and hands the merged run's ``meta`` and ``summary`` records to
``publish`` (the Meter's sink for the run folder's top level). Nothing here runs on the
training thread except :meth:`run_folder`, once, at construction.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainpace.dist.comm import CollectiveTimer
from trainpace.dist.exchange import Exchange, Store, tcp_store
from trainpace.dist.merge import Merger, WindowRecord, window_record
from trainpace.dist.ranks import RankInfo, rank_folder
from trainpace.dist.summary import merged_meta, merged_summary, summary_dict
from trainpace.runlog import Record
from trainpace.summary import Summary

logger = logging.getLogger("trainpace")

TIMEOUT_ENV = "TRAINPACE_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 10.0
POLL_S = 0.1
# Rank 0's mid-run publication of the merged run takes at most this share of the time (at
# thousands of ranks it costs a second of the writer thread: it is then made less often).
PUBLISH_BUDGET = 0.05
YIELD_EVERY = 256  # records merged between two yields of the GIL


def timeout_from_env(env: Mapping[str, str] | None = None) -> float:
    """The exchange's bound (``TRAINPACE_DIST_TIMEOUT_S``; the launcher's environment is
    the one place every rank of a job reads the same setting from)."""
    raw = (os.environ if env is None else env).get(TIMEOUT_ENV)
    try:
        value = float(raw) if raw is not None else DEFAULT_TIMEOUT_S
    except ValueError:
        value = DEFAULT_TIMEOUT_S
    return value if value > 0 else DEFAULT_TIMEOUT_S


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
    ) -> None:
        self.info = info
        self.run_id = run_id
        self.publish = publish
        self.timeout_s = timeout_s if timeout_s is not None else timeout_from_env()
        self.exchange = Exchange(info, timeout_s=self.timeout_s, connect=connect)
        self.merger = Merger(info.world_size) if info.rank == 0 else None
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
        run = out.parent / name
        self.exchange.namespace = f"{name}/"
        self.run = run
        return rank_folder(run, self.info.rank)

    # -- the writer thread -----------------------------------------------------------------

    def window(self, figures: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
               *, final: bool = False) -> None:
        """Post this window's record; at rank 0, merge what has come and publish it."""
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
            self.exchange.post(record)
            if self.merger is not None:
                self._merge(self.exchange.collect())
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
        if not self._final_sent:
            self.window({}, [], final=True)
        if self.merger is None:
            return None
        try:
            if self._broken is None:
                self._wait_for_finals()
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._stop("waiting for the other ranks", exc)
        try:
            self.merger.flush()
            return self._publish(summary, done=True, diagnose=diagnose)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._stop("merging the ranks", exc)
            return None

    # -- rank 0 ----------------------------------------------------------------------------

    def _merge(self, records: list[WindowRecord]) -> bool:
        assert self.merger is not None
        for i, record in enumerate(records, start=1):
            self.merger.add(record)
            if i % YIELD_EVERY == 0:
                time.sleep(0)  # let the training thread have the GIL between chunks
        return bool(records)

    def _wait_for_finals(self) -> None:
        """Read until every rank has sent its final window, or ``timeout_s`` without news."""
        assert self.merger is not None
        quiet_since = self._unix()
        while True:
            ranks = self.merger.ranks
            if len(ranks) >= self.info.world_size and all(s.final for s in ranks.values()):
                return
            if self._merge(self.exchange.collect()):
                quiet_since = self._unix()
            elif self._unix() - quiet_since >= self.timeout_s:
                return
            time.sleep(POLL_S)

    def _publish(self, summary: Summary | None, *, done: bool,
                 diagnose: Callable[[Summary, Mapping[str, Any]], Summary] | None = None,
                 ) -> Summary | None:
        if self.merger is None:
            return None
        meta = merged_meta(self.merger, info=self.info, run_id=self.run_id,
                           started_unix=self.started_unix, done=done,
                           exchange_error=self._broken)
        merged = merged_summary(self.merger, summary or Summary(run_id=self.run_id), done=done)
        if diagnose is not None:
            merged = diagnose(merged, meta)
        if self.publish is not None:  # the summary first: a finished meta means a final summary
            self.publish(Record("summary", summary_dict(merged, self.merger, done=done)))
            self.publish(Record("meta", meta))
        return merged

    def _stop(self, where: str, exc: BaseException) -> None:
        self._broken = f"{where}: {type(exc).__name__}: {exc}"
        logger.warning("trainpace: %s failed (%s: %s); this rank's own folder is still "
                       "written, the merge goes without it", where, type(exc).__name__, exc)



Signs = Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]]


def vitals_signs(vitals: Callable[[], Any]) -> Signs:
    """A window's device and host signs (throttling, temperature, CPU of this process and of
    the host) from the Meter's sampler, over the window's time span."""
    def signs(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        sampler = vitals()
        if sampler is None or not records:
            return {}
        start_s = float(records[0]["t_s"]) - float(records[0]["step_s"])
        device, _, _, host = sampler.sections(t_start_s=start_s,
                                              t_end_s=float(records[-1]["t_s"]),
                                              step_s=None, samples_per_s=None)
        return {"util_pct": device.util_pct, "temperature_c": device.temperature_c,
                "throttle_pct": device.throttle_pct, "process_cpu_pct": host.process_cpu_pct,
                "system_cpu_pct": host.system_cpu_pct}

    return signs
