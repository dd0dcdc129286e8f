"""The merge of thousands of ranks in two levels: node leaders, then rank 0.

Flat, rank 0 reads and merges every rank's record every window: O(ranks) on its writer
thread, which shares the GIL with training (about 3 s per window at 4,096 ranks). In two
levels, the local rank 0 of each node (its *leader*) merges its node's ranks with the flat
:class:`~trainpace.dist.merge.Merger` and posts one :class:`NodeRecord`; rank 0 merges the
node records with :class:`TreeMerger`: O(nodes) per window.

What stays exact: a node record carries its ranks' running totals (samples, tokens, data
wait, measured seconds) and its slowest rank's seconds and steps, so the global figures —
Σ samples / max measured seconds, tokens/s, steps/s, the data wait share — are the flat
merge's (the sums only regrouped). What is bounded instead of complete:

- scores: a leader sends, per scored window, each rank's raw times only for its
  :data:`CANDIDATES` slowest ranks by the time before the collective ``Q`` and by the step
  time ``S`` (the global worst rank is the worst in ``Q`` or in ``S``, so it is always among
  them), and the largest ``Q`` and ``S`` of the rest (a floor for their scores). Rank 0
  scores the candidates against the fastest rank of all nodes; the step-time median is the
  median of the nodes' medians. It keeps a score history only for ranks that fell below
  :data:`TRACK_BELOW` (the straggler rule's candidates), not for every rank;
- ``ranks[]``: each leader posts its node's rank entries (a *view*) every
  :data:`VIEW_EVERY` node records and at the end; rank 0 reads them only when it publishes
  the merged run (time-budgeted) and keeps the newest per node.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from trainpace.dist.merge import (
    HISTORY_WINDOWS,
    STALE_WINDOWS,
    Merger,
    _score,
    merge_state,
)
from trainpace.stats import median

CANDIDATES = 2  # per node and window: this many slowest ranks by Q, and by S
TRACK_BELOW = 0.95  # rank 0 keeps the history of a rank scored below this (half the
# straggler rule's default 10% lost: the rule's candidates, not the noise of every rank)
VIEW_EVERY = 8  # a leader posts its node's rank entries every this many records
FLAT_MAX_RANKS = 64  # jobs up to this many ranks merge flat at rank 0 (one level)


class NodeRecord(TypedDict):
    """One node's merged figures, as its leader posts them (JSON-ready)."""

    rank: int  # the node's index (the exchange keys records by this id)
    window: int  # the leader's posts so far, 1-based (the exchange's sequence)
    leader: int
    ranks: list[int]  # the node's ranks
    reporting: int  # of them, how many have sent a record
    samples: int  # running totals over the node's ranks that measured steps
    tokens: int | None
    measured_s: float
    steps: int
    wait_s: float
    slowest_s: float  # the node's slowest rank: its measured seconds, steps and rank
    slowest_steps: int
    slowest_rank: int
    scored: list[dict[str, Any]]  # the windows scored at the node since the last record
    missing: list[dict[str, Any]]
    final: bool  # every rank of the node has finished (or the leader stopped waiting)
    t_unix: float


def node_ranks(world_size: int, local_world_size: int) -> dict[int, list[int]] | None:
    """The ranks of each node (torchrun numbers them node by node), or None when the job's
    nodes are uneven (then it merges flat)."""
    if local_world_size < 1 or world_size % local_world_size:
        return None
    return {n: list(range(n * local_world_size, (n + 1) * local_world_size))
            for n in range(world_size // local_world_size)}


def node_record(merger: Merger, *, node: int, leader: int, seq: int, final: bool,
                t_unix: float) -> NodeRecord:
    """The leader's record of its node: totals now, and the windows scored since last time."""
    states = [s for s in merger.ranks.values() if s.measured_s > 0]
    slowest_rank = merger.slowest_rank()
    slowest = merger.ranks[slowest_rank] if slowest_rank is not None else None
    tokens = [s.tokens for s in states]
    scored = [_compact(w) for w in (merger.scored_log or ())]
    if merger.scored_log is not None:
        merger.scored_log.clear()
    return NodeRecord(
        rank=node, window=seq, leader=leader, ranks=list(merger.ids),
        reporting=len(merger.ranks),
        samples=sum(s.samples for s in states),
        tokens=(sum(t for t in tokens if t is not None)
                if all(t is not None for t in tokens) else None),
        measured_s=sum(s.measured_s for s in merger.ranks.values()),
        steps=sum(s.steps for s in merger.ranks.values()),
        wait_s=sum(s.wait_s for s in merger.ranks.values()),
        slowest_s=slowest.measured_s if slowest else 0.0,
        slowest_steps=slowest.steps if slowest else 0,
        slowest_rank=slowest.rank if slowest else -1,
        scored=scored, missing=merger.missing(done=final), final=final, t_unix=t_unix)


def _compact(window: Mapping[str, Any]) -> dict[str, Any]:
    per_step: Mapping[int, tuple[float, float]] = window["per_step"]
    individual: Mapping[int, float] = window["individual"]
    by_q = sorted(per_step, key=lambda r: (-per_step[r][0], r))[:CANDIDATES]
    by_s = sorted(per_step, key=lambda r: (-per_step[r][1], r))[:CANDIDATES]
    chosen = sorted(set(by_q) | set(by_s))
    rest = [r for r in per_step if r not in chosen]
    return {
        "window": window["window"], "samples": window["samples"],
        "slowest_s": window["slowest_s"], "source": window["source"], "n": len(per_step),
        "q_min": min(q for q, _ in per_step.values()),
        "s_min": min(s for _, s in per_step.values()),
        "s_median": window["s_median"],
        "candidates": [[r, per_step[r][0], per_step[r][1], individual.get(r, 1.0)]
                       for r in chosen],
        # the rest: their largest Q and S, and their lowest individual score
        "rest": ([max(per_step[r][0] for r in rest), max(per_step[r][1] for r in rest),
                  min(individual.get(r, 1.0) for r in rest)] if rest else None),
    }


class TreeMerger:
    """Rank 0's merge of the node records (the same figures as :class:`Merger`)."""

    def __init__(self, world_size: int, nodes: Mapping[int, Sequence[int]]) -> None:
        self.world_size = world_size
        self.nodes = {n: list(r) for n, r in nodes.items()}
        self.latest: dict[int, NodeRecord] = {}
        self.views: dict[int, list[dict[str, Any]]] = {}  # node -> its ranks' entries
        self.tracked: dict[int, deque[tuple[int, float, float]]] = {}
        self._pending: dict[int, dict[int, dict[str, Any]]] = {}  # window -> node -> scored
        self._newest = 0
        self._ended: list[int] = []  # the last scored windows of the nodes that finished
        self._last_scored: dict[int, int] = {}
        self.scored_windows = 0
        self.source: str | None = None
        self.last_window_samples_per_s: float | None = None
        self._version = 0
        self._dicts: tuple[int, list[dict[str, Any]]] | None = None
        self._base: list[dict[str, Any]] | None = None  # the views' entries, by rank
        self._index: dict[int, int] = {}  # rank -> its place in _base

    def add(self, record: NodeRecord) -> None:
        node = record["rank"]
        seen = self.latest.get(node)
        if seen is not None and record["window"] <= seen["window"]:
            return  # read twice (the store's ring)
        self._version += 1
        self.latest[node] = record
        for window in record["scored"]:
            self._pending.setdefault(window["window"], {})[node] = window
            self._newest = max(self._newest, window["window"])
            self._last_scored[node] = max(self._last_scored.get(node, 0), window["window"])
        if record["final"] and (seen is None or not seen["final"]):
            bisect.insort(self._ended, self._last_scored.get(node, 0))
        self._score_ready()

    def set_view(self, node: int, entries: list[dict[str, Any]]) -> None:
        """The node's rank entries (its leader's ``Merger.rank_dicts()``)."""
        self.views[node] = entries
        self._base = None
        self._version += 1

    def _score_ready(self) -> None:
        for window in sorted(self._pending):
            expected = len(self.nodes) - bisect.bisect_left(self._ended, window)
            complete = len(self._pending[window]) >= expected
            if not complete and self._newest < window + STALE_WINDOWS:
                break
            self._score(window, self._pending.pop(window))

    def flush(self) -> None:
        for window in sorted(self._pending):
            self._score(window, self._pending.pop(window))

    def _score(self, window: int, nodes: Mapping[int, Mapping[str, Any]]) -> None:
        if not nodes:
            return
        windows = list(nodes.values())
        self.source = ("comm_hook" if all(w["source"] == "comm_hook" for w in windows)
                       else "data_wait")
        q_min = min(w["q_min"] for w in windows)
        s_min = min(w["s_min"] for w in windows)
        s_median = median([w["s_median"] for w in windows]) or 0.0
        for node, w in nodes.items():
            listed = set()
            for rank, q, s, individual in w["candidates"]:
                listed.add(rank)
                relative = _score(max(q - q_min, s - s_min), s_median)
                self._track(rank, (window, relative, individual))
            rest = w["rest"]
            if rest is not None:
                floor = _score(max(rest[0] - q_min, rest[1] - s_min), s_median)
                for rank in self.nodes.get(node, ()):
                    if rank in self.tracked and rank not in listed:
                        self._track(rank, (window, floor, rest[2]))
        slowest_s = max(w["slowest_s"] for w in windows)
        self.last_window_samples_per_s = (sum(w["samples"] for w in windows) / slowest_s
                                          if slowest_s > 0 else None)
        self.scored_windows += 1
        self._version += 1

    def _track(self, rank: int, score: tuple[int, float, float]) -> None:
        history = self.tracked.get(rank)
        if history is None:
            if score[1] >= TRACK_BELOW:
                return
            history = self.tracked[rank] = deque(maxlen=HISTORY_WINDOWS)
        history.append(score)
        if all(s[1] >= TRACK_BELOW for s in history):
            del self.tracked[rank]  # back with the others: no history kept

    # -- the merged figures (the flat Merger's, from the nodes' totals) ---------------------

    def slowest_rank(self) -> int | None:
        """The rank that holds the job's time (the slowest of the nodes' slowest ranks)."""
        nodes = [r for r in self.latest.values() if r["slowest_s"] > 0]
        if not nodes:
            return None
        return max(nodes, key=lambda r: (r["slowest_s"], -r["slowest_rank"]))["slowest_rank"]

    def steps_rank(self) -> int | None:
        """The rank whose steps stand for the job's: the slowest (the node records carry no
        per-rank wait to tell apart the ranks that hold the job's time together)."""
        return self.slowest_rank()

    @property
    def pending(self) -> bool:
        """Whether a window waits for a node's record before it can be scored."""
        return bool(self._pending)

    def throughput(self) -> dict[str, float | None]:
        nodes = [r for r in self.latest.values() if r["slowest_s"] > 0]
        if not nodes:
            return {"samples_per_s": None, "tokens_per_s": None, "steps_per_s": None}
        slowest = max(nodes, key=lambda r: (r["slowest_s"], -r["slowest_rank"]))
        tokens = [r["tokens"] for r in nodes]
        seconds = slowest["slowest_s"]
        return {
            "samples_per_s": sum(r["samples"] for r in nodes) / seconds,
            "tokens_per_s": (sum(t for t in tokens if t is not None) / seconds
                             if all(t is not None for t in tokens) and any(tokens) else None),
            "steps_per_s": slowest["slowest_steps"] / seconds,
        }

    def wait_pct(self) -> float | None:
        measured = sum(r["measured_s"] for r in self.latest.values())
        if measured <= 0:
            return None
        return 100.0 * sum(r["wait_s"] for r in self.latest.values()) / measured

    def wait_s_per_step(self) -> float | None:
        steps = sum(r["steps"] for r in self.latest.values())
        return sum(r["wait_s"] for r in self.latest.values()) / steps if steps else None

    def ranks_reporting(self) -> int:
        return sum(r["reporting"] for r in self.latest.values())

    def all_final(self) -> bool:
        return len(self.latest) >= len(self.nodes) and all(
            r["final"] for r in self.latest.values())

    def missing(self, *, done: bool) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for node, ranks in self.nodes.items():
            record = self.latest.get(node)
            if record is None:
                out.extend({"rank": r, "host": None, "last_window": 0, "last_step": 0,
                            "last_seen_unix": None,
                            "reason": f"never reported (node {node}'s leader sent nothing)"}
                           for r in ranks)
            elif record["final"] or not done:
                out.extend(record["missing"])
            else:  # the leader itself ended early: its view says who had finished
                view = {e["rank"]: e for e in self.views.get(node, ())}
                for r in ranks:
                    entry = view.get(r, {})
                    if not entry.get("final"):
                        out.append({"rank": r, "host": entry.get("host"),
                                    "last_window": entry.get("last_window", 0),
                                    "last_step": entry.get("last_step", 0),
                                    "last_seen_unix": entry.get("last_seen_unix"),
                                    "reason": f"ended early (node {node}'s leader sent no "
                                              "final record)"})
        return sorted(out, key=lambda m: int(m["rank"]))

    def rank_dicts(self) -> list[dict[str, Any]]:
        """Every rank's entry from the newest views, with rank 0's score histories."""
        if self._dicts is None or self._dicts[0] != self._version:
            if self._base is None:  # rebuilt when a view comes, not every window
                base = sorted(({**e, "scores": []} for v in self.views.values() for e in v),
                              key=lambda e: int(e["rank"]))
                self._base, self._index = base, {int(e["rank"]): i for i, e in enumerate(base)}
            entries = list(self._base)
            for rank, history in self.tracked.items():  # only the tracked ranks change
                if rank in self._index:
                    i = self._index[rank]
                    entries[i] = {**entries[i], "scores": [list(s) for s in history]}
            self._dicts = (self._version, entries)
        return self._dicts[1]

    def state(self, *, done: bool) -> dict[str, Any]:
        """The exchange's view (the merged run's ``meta.dist``), as the flat merge gives it."""
        return merge_state(self, done=done, ranks_reporting=self.ranks_reporting(), merge={
            "levels": 2, "nodes": len(self.nodes), "nodes_reporting": len(self.latest),
            "candidates_per_node": CANDIDATES, "tracked_ranks": sorted(self.tracked)})
