"""The merge of every rank's window records: global throughput, each rank's figures, scores.

Each rank sends one small :class:`WindowRecord` per window (its own figures, no history).
:class:`Merger` keeps, per rank, running totals and a bounded history of its scores, so the
merge costs O(ranks) per window and O(ranks × history) in memory, however long the run.

Global throughput is the sum over ranks of their samples over the wall time of the slowest
rank (``max`` over ranks of the measured seconds), never rank 0 × world size: a rank whose
steps took longer holds the job's time, and a rank that processed fewer samples adds fewer.

Scores (1.0 is best), per rank and window, from two times per step: the step time ``S`` and
the time before the collective ``Q`` — what the rank spends on its own before it can join
the gradient exchange (the DDP communication hook's measure when one is attached, else the
data wait, the part of it the Meter sees without help). The all-reduce makes ``S`` equal on
every rank of a synchronous job, so only ``Q`` can tell which rank the others wait for:

- ``relative_score`` = 1 − max(Q − Q_fastest, S − S_fastest) / S_median: the share of the
  step the job would keep if this rank were as fast as the fastest one;
- ``individual_score`` = 1 − max(Q − Q_own_best, S − S_own_best) / S: the same against its
  own best window (a rank that slowed down: heat, a neighbour process, a degraded link).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from trainpace.stats import median, share_pct
from trainpace.units import number_or_none

HISTORY_WINDOWS = 16  # scores kept per rank for the persistence check of the diagnosis
STALE_WINDOWS = 2  # a window is scored without the ranks this many windows behind the newest
SAME_TIME_PCT = 1.0  # ranks whose measured seconds are this close hold the job's time together


class WindowRecord(TypedDict):
    """One rank's figures over one window (what the exchange carries; JSON-ready)."""

    rank: int
    local_rank: int
    node: int
    host: str | None
    window: int  # 1-based window index on this rank (windows are the same steps on every rank)
    first_step: int
    last_step: int
    steps: int  # measured (non-warm-up) steps in the window
    samples: int
    tokens: int | None
    measured_s: float  # sum of the measured steps' step_s
    step_s_median: float | None
    wait_s: float  # sum of the measured steps' data wait
    pre_s: float | None  # sum of the time before the first collective (comm hook), else None
    comm_s: float | None  # sum of the time in collectives (comm hook), else None
    t_unix: float  # wall clock when the window was closed (comparable across hosts)
    util_pct: float | None
    temperature_c: float | None
    throttle_pct: float | None
    process_cpu_pct: float | None
    system_cpu_pct: float | None
    cpu_count: int | None  # CPUs the rank may run on (its host's, as its DataLoader sees them)
    final: bool  # the rank's last window: it finished


def window_record(
    *,
    rank: int,
    local_rank: int = 0,
    node: int = 0,
    host: str | None = None,
    window: int,
    steps: Iterable[Mapping[str, Any]],
    warmup: int = 0,
    t_unix: float,
    figures: Mapping[str, Any] | None = None,
    pre_s: float | None = None,
    comm_s: float | None = None,
    cpu_count: int | None = None,
    final: bool = False,
) -> WindowRecord:
    """A rank's record of one window, from its step records (warm-up steps left out)."""
    records = list(steps)
    measured = [r for r in records if r["step"] > warmup and not r.get("warmup")]
    step_s = [float(r["step_s"]) for r in measured]
    tokens = [r.get("tokens") for r in measured]
    figures = figures or {}
    return WindowRecord(
        rank=rank, local_rank=local_rank, node=node, host=host, window=window,
        first_step=int(records[0]["step"]) if records else 0,
        last_step=int(records[-1]["step"]) if records else 0,
        steps=len(measured),
        samples=sum(int(r.get("samples") or 0) for r in measured),
        tokens=(sum(int(t) for t in tokens if t is not None)
                if measured and all(t is not None for t in tokens) else None),
        measured_s=sum(step_s),
        step_s_median=median(step_s),
        wait_s=sum(float(r.get("wait_s") or 0.0) for r in measured),
        pre_s=pre_s, comm_s=comm_s, t_unix=t_unix,
        util_pct=number_or_none(figures.get("util_pct")),
        temperature_c=number_or_none(figures.get("temperature_c")),
        throttle_pct=number_or_none(figures.get("throttle_pct")),
        process_cpu_pct=number_or_none(figures.get("process_cpu_pct")),
        system_cpu_pct=number_or_none(figures.get("system_cpu_pct")),
        cpu_count=cpu_count,
        final=final,
    )


class ScoredWindow(TypedDict):
    """One window as a node's leader scored it (its ranks' raw times, for rank 0)."""

    window: int
    samples: int
    slowest_s: float
    source: str | None
    per_step: dict[int, tuple[float, float]]  # rank -> (Q, S) per step
    s_median: float
    individual: dict[int, float]  # rank -> its individual score this window


@dataclass
class RankState:
    """What the merge keeps about one rank: totals, its latest figures, its recent scores."""

    rank: int
    local_rank: int = 0
    node: int = 0
    host: str | None = None
    cpu_count: int | None = None
    windows: int = 0
    last_window: int = 0
    last_step: int = 0
    last_seen_unix: float | None = None
    final: bool = False
    samples: int = 0
    tokens: int | None = 0
    measured_s: float = 0.0
    steps: int = 0
    wait_s: float = 0.0
    pre_s: float | None = 0.0
    comm_s: float | None = 0.0
    step_s_medians: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY_WINDOWS))
    best_q_s: float | None = None  # its best (lowest) time before the collective per step
    best_step_s: float | None = None
    # (window, relative_score, individual_score), the most recent HISTORY_WINDOWS
    scores: deque[tuple[int, float, float]] = field(
        default_factory=lambda: deque(maxlen=HISTORY_WINDOWS))
    latest: WindowRecord | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form kept in the merged run's meta (``dist.ranks[]``)."""
        latest = self.latest
        return {
            "rank": self.rank, "local_rank": self.local_rank, "node": self.node,
            "host": self.host, "cpu_count": self.cpu_count, "windows": self.windows,
            "last_window": self.last_window,
            "last_step": self.last_step, "last_seen_unix": self.last_seen_unix,
            "final": self.final,
            "samples_per_s": self.samples / self.measured_s if self.measured_s > 0 else None,
            # the median of its recent windows' step medians (what the records carry), not of
            # its steps: the merged summary's ranks[] takes its steps' median where they
            # are read, and this figure under its own name elsewhere
            "window_step_s_median": median(list(self.step_s_medians)),
            "wait_pct": share_pct(self.wait_s, self.measured_s),
            "pre_collective_pct": (100.0 * self.pre_s / self.measured_s
                                   if self.pre_s is not None and self.measured_s > 0 else None),
            "communication_pct": (100.0 * self.comm_s / self.measured_s
                                  if self.comm_s is not None and self.measured_s > 0 else None),
            "util_pct": latest["util_pct"] if latest else None,
            "temperature_c": latest["temperature_c"] if latest else None,
            "throttle_pct": latest["throttle_pct"] if latest else None,
            "process_cpu_pct": latest["process_cpu_pct"] if latest else None,
            "system_cpu_pct": latest["system_cpu_pct"] if latest else None,
            "scores": [list(s) for s in self.scores],
        }


class Merger:
    """Every rank's window records, merged as they come (out of order and incomplete is fine).

    A window is scored across ranks once every rank still reporting has sent it, or when a
    later window of this merge is complete (a rank that is late or gone is left out of it).
    """

    def __init__(self, world_size: int, *, ids: Sequence[int] | None = None,
                 keep_scored: bool = False) -> None:
        self.world_size = world_size
        # the ranks this merge is for: every rank (rank 0), or one node's (its leader)
        self.ids: Sequence[int] = range(world_size) if ids is None else ids
        # a node's leader hands each scored window on to rank 0 (dist.tree.node_record)
        self.scored_log: list[ScoredWindow] | None = [] if keep_scored else None
        self.ranks: dict[int, RankState] = {}
        self._pending: dict[int, dict[int, WindowRecord]] = {}  # window -> rank -> record
        self.scored_windows = 0
        self.source: str | None = None  # what Q was measured from: "comm_hook" or "data_wait"
        self.last_window_samples_per_s: float | None = None
        self._newest = 0  # the newest window any rank has sent
        self._ended: list[int] = []  # sorted last windows of the ranks that finished
        self._version = 0  # records taken so far: the cache key of rank_dicts()
        self._dicts: tuple[int, list[dict[str, Any]]] | None = None
        # told each window once its ranks are merged (rank 0's dashboards: meter.distributed)
        self.on_scored: Callable[[Mapping[int, WindowRecord]], None] | None = None

    def add(self, record: WindowRecord) -> None:
        """Take one rank's window record."""
        self._version += 1
        state = self.ranks.get(record["rank"])
        if state is None:
            state = self.ranks[record["rank"]] = RankState(rank=record["rank"])
        if record["window"] <= state.last_window:
            return  # a record seen twice (the store keeps a ring of windows)
        state.local_rank, state.node, state.host = (record["local_rank"], record["node"],
                                                    record["host"])
        state.cpu_count = record.get("cpu_count", state.cpu_count)
        state.windows += 1
        state.last_window = record["window"]
        state.last_step = max(state.last_step, record["last_step"])  # a final one may be empty
        state.last_seen_unix, state.final = record["t_unix"], record["final"]
        if state.final:
            bisect.insort(self._ended, state.last_window)
        state.samples += record["samples"]
        no_tokens = record["tokens"] is None and record["steps"] > 0
        state.tokens = (None if state.tokens is None or no_tokens
                        else state.tokens + (record["tokens"] or 0))
        state.measured_s += record["measured_s"]
        state.steps += record["steps"]
        state.wait_s += record["wait_s"]
        if record["steps"] > 0:  # an empty (final) window says nothing of the hook
            state.pre_s = (None if state.pre_s is None or record["pre_s"] is None
                           else state.pre_s + record["pre_s"])
            state.comm_s = (None if state.comm_s is None or record["comm_s"] is None
                            else state.comm_s + record["comm_s"])
        if record["step_s_median"] is not None:
            state.step_s_medians.append(record["step_s_median"])
        if record["steps"] > 0 or state.latest is None:
            state.latest = record  # the latest figures of a window with steps
        self._newest = max(self._newest, record["window"])
        if record["steps"] > 0:
            self._pending.setdefault(record["window"], {})[record["rank"]] = record
        self._score_ready()

    def _expected(self, window: int) -> int:
        """Ranks that should send ``window``: all but those that finished before it."""
        return len(self.ids) - bisect.bisect_left(self._ended, window)

    def _score_ready(self) -> None:
        # Called per record: only the oldest pending windows can have become ready, and
        # the loop stops at the first that is not (a few dict lookups per record).
        for window in sorted(self._pending):
            complete = len(self._pending[window]) >= self._expected(window)
            # a rank late by STALE_WINDOWS (or gone) is left out of the window
            stale = self._newest >= window + STALE_WINDOWS
            if not complete and not stale:
                break  # windows are scored in order
            self._score(self._pending.pop(window))

    @property
    def pending(self) -> bool:
        """Whether a window waits for a rank's record before it can be scored."""
        return bool(self._pending)

    def flush(self) -> None:
        """Score every window still pending (the end of the run: nobody else is coming)."""
        for window in sorted(self._pending):
            self._score(self._pending.pop(window))

    def _score(self, records: Mapping[int, WindowRecord]) -> None:
        if len(records) < 1:
            return
        use_pre = all(r["pre_s"] is not None for r in records.values())
        self.source = "comm_hook" if use_pre else "data_wait"
        per_step = {rank: (float((r["pre_s"] if use_pre else r["wait_s"]) or 0.0) / r["steps"],
                           r["measured_s"] / r["steps"])
                    for rank, r in records.items()}
        q_min = min(q for q, _ in per_step.values())
        s_min = min(s for _, s in per_step.values())
        s_median = median([s for _, s in per_step.values()]) or 0.0
        for rank, (q, s) in per_step.items():
            state = self.ranks[rank]
            state.best_q_s = q if state.best_q_s is None else min(state.best_q_s, q)
            state.best_step_s = s if state.best_step_s is None else min(state.best_step_s, s)
            relative = _score(max(q - q_min, s - s_min), s_median)
            individual = _score(max(q - state.best_q_s, s - state.best_step_s), s)
            state.scores.append((records[rank]["window"], relative, individual))
        samples = sum(r["samples"] for r in records.values())
        slowest_s = max(r["measured_s"] for r in records.values())
        self.last_window_samples_per_s = samples / slowest_s if slowest_s > 0 else None
        if self.scored_log is not None:
            window = next(iter(records.values()))["window"]
            self.scored_log.append(ScoredWindow(
                window=window, samples=samples, slowest_s=slowest_s, source=self.source,
                per_step=per_step, s_median=s_median,
                individual={rank: state.scores[-1][2] for rank in per_step
                            if (state := self.ranks[rank]).scores}))
        self.scored_windows += 1
        self._version += 1
        if self.on_scored is not None:
            self.on_scored(records)

    # -- the merged figures -------------------------------------------------------------

    def slowest_rank(self) -> int | None:
        """The rank that holds the job's time: the most measured seconds (ties: the lowest
        rank); its steps are the job's step times."""
        states = [s for s in self.ranks.values() if s.measured_s > 0]
        if not states:
            return None
        return max(states, key=lambda s: (s.measured_s, -s.rank)).rank

    def steps_rank(self) -> int | None:
        """The rank whose steps stand for the job's (its step times, its diagnosis): the
        slowest, or, among the ranks within :data:`SAME_TIME_PCT` of its measured seconds
        (a synchronous job: the all-reduce makes their step times equal, and which is a hair
        slower is chance), the one the others wait for: the most time per step before the
        collective (the comm hook's, else the data wait). Ties: the lowest rank."""
        slowest = self.slowest_rank()
        if slowest is None:
            return None
        floor_s = self.ranks[slowest].measured_s * (1.0 - SAME_TIME_PCT / 100.0)
        together = [s for s in self.ranks.values() if s.measured_s >= floor_s and s.steps > 0]
        use_pre = all(s.pre_s is not None for s in together)

        def before_collective_s(s: RankState) -> float:
            return float((s.pre_s if use_pre else s.wait_s) or 0.0) / s.steps

        return max(together, key=lambda s: (before_collective_s(s), -s.rank)).rank

    def throughput(self) -> dict[str, float | None]:
        """Global samples/s and tokens/s: Σ samples over ranks / max measured seconds."""
        states = [s for s in self.ranks.values() if s.measured_s > 0]
        slowest_rank = self.slowest_rank()
        if slowest_rank is None:
            return {"samples_per_s": None, "tokens_per_s": None, "steps_per_s": None}
        slowest = self.ranks[slowest_rank]
        tokens = [s.tokens for s in states]
        return {
            "samples_per_s": sum(s.samples for s in states) / slowest.measured_s,
            "tokens_per_s": (sum(t for t in tokens if t is not None) / slowest.measured_s
                             if all(t is not None for t in tokens) and any(tokens) else None),
            "steps_per_s": slowest.steps / slowest.measured_s,
        }

    def wait_s_per_step(self) -> float | None:
        steps = sum(s.steps for s in self.ranks.values())
        return sum(s.wait_s for s in self.ranks.values()) / steps if steps else None

    def ranks_reporting(self) -> int:
        return len(self.ranks)

    def all_final(self) -> bool:
        """Every rank of this merge has sent its final window."""
        return (len(self.ranks) >= len(self.ids)
                and all(s.final for s in self.ranks.values()))

    def wait_pct(self) -> float | None:
        return share_pct(sum(s.wait_s for s in self.ranks.values()),
                         sum(s.measured_s for s in self.ranks.values()))

    def missing(self, *, done: bool) -> list[dict[str, Any]]:
        """Ranks not heard from (never, or not to their end when ``done``), since when."""
        out: list[dict[str, Any]] = []
        for rank in self.ids:
            state = self.ranks.get(rank)
            if state is None:
                out.append({"rank": rank, "host": None, "last_window": 0, "last_step": 0,
                            "last_seen_unix": None, "reason": "never reported"})
            elif done and not state.final:
                out.append({"rank": rank, "host": state.host, "last_window": state.last_window,
                            "last_step": state.last_step,
                            "last_seen_unix": state.last_seen_unix,
                            "reason": "ended early (no final window)"})
        return out

    def rank_dicts(self) -> list[dict[str, Any]]:
        """Every rank's :meth:`RankState.to_dict`, by rank (computed once per new record)."""
        if self._dicts is None or self._dicts[0] != self._version:
            self._dicts = (self._version, [self.ranks[r].to_dict() for r in sorted(self.ranks)])
        return self._dicts[1]

    def state(self, *, done: bool) -> dict[str, Any]:
        """The exchange's view (the merged run's ``meta.dist``): per-rank state and gaps."""
        return merge_state(self, done=done, ranks_reporting=len(self.ranks),
                           merge={"levels": 1})


def merge_state(merger: Any, *, done: bool, ranks_reporting: int,
                merge: dict[str, Any]) -> dict[str, Any]:
    """``meta.dist`` of a flat or two-level merge: what both say, and how it merged."""
    return {
        "world_size": merger.world_size,
        "ranks_reporting": ranks_reporting,
        "windows_scored": merger.scored_windows,
        "score_source": merger.source,
        "history_windows": HISTORY_WINDOWS,
        "last_window_samples_per_s": merger.last_window_samples_per_s,
        "missing": merger.missing(done=done),
        "ranks": merger.rank_dicts(),
        "merge": merge,
    }


def _score(excess_s: float, step_s: float) -> float:
    if step_s <= 0:
        return 1.0
    return max(0.0, min(1.0, 1.0 - max(0.0, excess_s) / step_s))
