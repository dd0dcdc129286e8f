"""What the merge of thousands of ranks costs rank 0: flat against two levels, same run.

Simulates ``--ranks`` ranks (default 4,096 = 512 nodes × 8) sending their window records,
as the exchange carries them (orjson bytes), for ``--windows`` windows, with one rank slowed
by its data, and merges them twice:

- flat: rank 0 decodes and merges every rank's record (:class:`Merger`);
- two levels (:mod:`trainpace.dist.tree`): each node's leader merges its node's records and
  posts a node record; rank 0 decodes and merges the node records (:class:`TreeMerger`).

Per window, at rank 0: ``merge_ms`` (decode + merge + scoring), ``publish_ms`` (the merged
summary's JSON and the run's meta; in two levels also decoding the nodes' rank entries — a
publication rank 0 makes at most 5% of the time), ``store_collect_ms`` (reading a window
from a real TCPStore on this machine after every rank or node posted), the merge's Python
heap (tracemalloc, score histories full), the JSON sizes; and a leader's own cost per
window. Ratios are flat / two levels, measured in the same run.

    python benchmarks/dist_merge.py                 # 4,096 ranks, 512 × 8, 20 windows
    python benchmarks/dist_merge.py --ranks 512 --per-node 8 --windows 5
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
import time
import tracemalloc
from typing import Any

import orjson

from trainpace.dist.exchange import Exchange
from trainpace.dist.job_summary import merged_meta, merged_summary, summary_dict
from trainpace.dist.merge import HISTORY_WINDOWS, Merger, WindowRecord
from trainpace.dist.ranks import RankInfo
from trainpace.dist.tree import VIEW_EVERY, TreeMerger, node_ranks, node_record
from trainpace.summary import Summary


def record(rank: int, window: int, slow: int) -> WindowRecord:
    wait_s = 0.5 if rank == slow else 0.001 * (rank % 7)
    return WindowRecord(
        rank=rank, local_rank=rank % 8, node=rank // 8, host=f"node{rank // 8}", window=window,
        first_step=(window - 1) * 100 + 1, last_step=window * 100, steps=100, samples=3200,
        tokens=3200 * 512, measured_s=1.0 + 0.001 * (rank % 13), step_s_median=0.01,
        wait_s=wait_s, pre_s=None, comm_s=None, t_unix=1.7e9 + window, util_pct=90.0,
        temperature_c=60.0, throttle_pct=0.0, process_cpu_pct=100.0, system_cpu_pct=50.0,
        cpu_count=64, final=False)


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3


def _publish(merger: Any, world: int) -> tuple[int, int]:
    summary = merged_summary(merger, Summary(run_id="bench"), done=False)
    summary_bytes = len(orjson.dumps(summary_dict(summary, merger, done=False)))
    meta = merged_meta(merger, info=RankInfo(world_size=world), run_id="bench",
                       started_unix=0.0, done=False)
    return summary_bytes, len(orjson.dumps(meta))


def _heap_since(base: int) -> float:
    return (tracemalloc.get_traced_memory()[0] - base) / 1e6 if tracemalloc.is_tracing() else 0.0


def _pass(world: int, per_node: int, slow: int, nodes: dict[int, list[int]], windows: range,
          *, memory: bool) -> dict[str, Any]:
    """One pass over the windows; ``memory``: under tracemalloc (its times are not kept)."""
    if memory:
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    flat = Merger(world)
    flat_merge_ms, flat_publish_ms, flat_sizes = [], [], (0, 0)
    for window in windows:
        payloads = [orjson.dumps(record(r, window, slow)) for r in range(world)]
        t0 = time.perf_counter()
        for raw in payloads:
            flat.add(orjson.loads(raw))
        flat_merge_ms.append(_ms(t0))
        del payloads
        t0 = time.perf_counter()
        flat_sizes = _publish(flat, world)
        flat_publish_ms.append(_ms(t0))
    flat_heap_mb = _heap_since(base)

    # -- two levels: the leaders (each merges its node), then rank 0 --------------------------
    base = tracemalloc.get_traced_memory()[0]
    leaders = {n: Merger(world, ids=ranks, keep_scored=True) for n, ranks in nodes.items()}
    posted: dict[int, list[bytes]] = {}  # window -> the node records, as the store holds them
    views: dict[int, bytes] = {}
    leader_ms = []
    for window in windows:
        payloads = [orjson.dumps(record(r, window, slow)) for r in range(world)]
        t0 = time.perf_counter()
        out = []
        for n, leader in leaders.items():
            for r in nodes[n]:
                leader.add(orjson.loads(payloads[r]))
            out.append(orjson.dumps(node_record(leader, node=n, leader=n * per_node,
                                                seq=window, final=False, t_unix=1.7e9)))
            if window % VIEW_EVERY == 1:
                views[n] = orjson.dumps([{k: v for k, v in d.items() if k != "scores"}
                                         for d in leader.rank_dicts()])
        leader_ms.append(_ms(t0) / len(nodes))
        posted[window] = out
        del payloads
    leader_heap_kb = _heap_since(base) * 1e3 / len(nodes)
    del leaders, out

    base = tracemalloc.get_traced_memory()[0]
    tree = TreeMerger(world, nodes)
    tree_merge_ms, tree_publish_ms, tree_sizes = [], [], (0, 0)
    for window in windows:
        t0 = time.perf_counter()
        for raw in posted[window]:
            tree.add(orjson.loads(raw))
        tree_merge_ms.append(_ms(t0))
        t0 = time.perf_counter()
        for n, raw in views.items():
            tree.set_view(n, orjson.loads(raw))
        tree_sizes = _publish(tree, world)
        tree_publish_ms.append(_ms(t0))
    tree_heap_mb = _heap_since(base)
    tracemalloc.stop()
    return locals()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--per-node", type=int, default=8)
    parser.add_argument("--windows", type=int, default=20)
    args = parser.parse_args(argv)
    world, per_node, slow = args.ranks, args.per_node, args.ranks // 3
    nodes = node_ranks(world, per_node)
    if nodes is None:
        parser.error(f"--ranks {world} is not a multiple of --per-node {per_node}")
    windows = range(1, args.windows + 1)
    # times without tracemalloc (it slows every allocation), then the heap in a second pass
    t = _pass(world, per_node, slow, nodes, windows, memory=False)
    m = _pass(world, per_node, slow, nodes, windows, memory=True)
    flat, tree = t["flat"], t["tree"]
    flat_merge_ms, flat_publish_ms = t["flat_merge_ms"], t["flat_publish_ms"]
    tree_merge_ms, tree_publish_ms = t["tree_merge_ms"], t["tree_publish_ms"]
    flat_sizes, tree_sizes, leader_ms = t["flat_sizes"], t["tree_sizes"], t["leader_ms"]
    flat_heap_mb, tree_heap_mb = m["flat_heap_mb"], m["tree_heap_mb"]
    leader_heap_kb = m["leader_heap_kb"]
    flat_store, tree_store = _store_collect_ms(world, slow, nodes)
    med = statistics.median
    rates = tree.throughput(), flat.throughput()
    lowest = min(flat.ranks.values(), key=lambda s: s.scores[-1][1])
    tree_lowest = min(tree.tracked, key=lambda r: tree.tracked[r][-1][1])
    result = {
        "bench": "dist_merge", "ranks": world, "nodes": len(nodes), "per_node": per_node,
        "windows": args.windows, "history_windows": HISTORY_WINDOWS,
        "flat": {"merge_ms": med(flat_merge_ms), "publish_ms": med(flat_publish_ms),
                 "store_collect_ms": flat_store, "heap_mb": flat_heap_mb,
                 "summary_json_mb": flat_sizes[0] / 1e6, "meta_json_mb": flat_sizes[1] / 1e6,
                 "lowest_relative_score_rank": lowest.rank},
        "tree": {"merge_ms": med(tree_merge_ms), "publish_ms": med(tree_publish_ms),
                 "store_collect_ms": tree_store, "heap_mb": tree_heap_mb,
                 "summary_json_mb": tree_sizes[0] / 1e6, "meta_json_mb": tree_sizes[1] / 1e6,
                 "lowest_relative_score_rank": tree_lowest,
                 "tracked_ranks": len(tree.tracked),
                 "leader_ms_per_window": med(leader_ms), "leader_heap_kb": leader_heap_kb},
        "ratio_flat_over_tree": {
            "merge": med(flat_merge_ms) / med(tree_merge_ms),
            "publish": med(flat_publish_ms) / med(tree_publish_ms),
            "store_collect": med(flat_store) / med(tree_store),
            "heap": flat_heap_mb / tree_heap_mb,
        },
        # Σ samples / max seconds: equal; the wait share's float sums only regrouped
        "throughput_equal": rates[0] == rates[1],
        "wait_pct_rel_diff": abs(tree.wait_pct() - flat.wait_pct()) / flat.wait_pct(),
        "slowed_rank": slow, "cpu_count": os.cpu_count(), "load_1min": os.getloadavg()[0],
    }
    print(json.dumps(result))
    from results import write_result

    write_result("dist_merge", quick=world < 4096, rows=[
        {"merge": way, **{k: v for k, v in result[way].items() if k != "leader_heap_kb"}}
        for way in ("flat", "tree")], figures={
        f"flat / two levels, {k}": v for k, v in result["ratio_flat_over_tree"].items()})
    return 0


def _store_collect_ms(world: int, slow: int,
                      nodes: dict[int, list[int]]) -> tuple[list[float], list[float]]:
    """Rank 0's read of one window from a real TCPStore, after every rank (flat) or every
    node's leader (two levels) posted."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=_dt.timedelta(seconds=30))
    info = RankInfo(rank=0, world_size=world, master_addr="127.0.0.1", master_port=server.port)
    poster = Exchange(info, timeout_s=30.0)
    reader = Exchange(info, timeout_s=30.0)
    times = []
    for window in (1, 2, 3):
        for r in range(world):
            poster.post(record(r, window, slow))
        t0 = time.perf_counter()
        got: list[Any] = reader.collect()
        times.append((time.perf_counter() - t0) * 1e3)
        assert len(got) == world, len(got)
    node_times = []
    leaders = {n: Merger(world, ids=ranks, keep_scored=True) for n, ranks in nodes.items()}
    for window in (1, 2, 3):
        for n, leader in leaders.items():
            for r in nodes[n]:
                leader.add(record(r, window, slow))
            poster.post_node(node_record(leader, node=n, leader=n * len(nodes[n]), seq=window,
                                         final=False, t_unix=1.7e9))
        t0 = time.perf_counter()
        got = reader.collect_nodes(list(nodes))
        node_times.append((time.perf_counter() - t0) * 1e3)
        assert len(got) == len(nodes), len(got)
    return times, node_times


if __name__ == "__main__":
    sys.exit(main())
