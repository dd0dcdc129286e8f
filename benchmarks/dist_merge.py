"""What the merge of thousands of ranks costs rank 0: time and memory per window.

Simulates ``--ranks`` ranks (default 4,096) sending their window records, as the exchange
carries them (orjson bytes), for ``--windows`` windows, with one rank slowed by its data. At
rank 0 it measures, per window:

- ``parse_merge_ms``: decoding every record and :meth:`Merger.add` (the scoring included);
- ``publish_ms``: the merged summary, its JSON form and the run's meta (what rank 0 writes);
- ``store_collect_ms``: :meth:`Exchange.collect` against a real TCPStore on this machine after
  every simulated rank has posted (two ``multi_get`` round trips whatever the world size);
- ``memory``: the merge's Python heap (tracemalloc) once every rank's score history is full,
  and the JSON sizes of the summary and the meta.

    python benchmarks/dist_merge.py                 # 4,096 ranks, 20 windows
    python benchmarks/dist_merge.py --ranks 512 --windows 5
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
from trainpace.dist.merge import HISTORY_WINDOWS, Merger, WindowRecord
from trainpace.dist.ranks import RankInfo
from trainpace.dist.summary import merged_meta, merged_summary, summary_dict
from trainpace.summary import Summary


def record(rank: int, window: int, slow: int) -> WindowRecord:
    wait_s = 0.5 if rank == slow else 0.001 * (rank % 7)
    return WindowRecord(
        rank=rank, local_rank=rank % 8, node=rank // 8, host=f"node{rank // 8}", window=window,
        first_step=(window - 1) * 100 + 1, last_step=window * 100, steps=100, samples=3200,
        tokens=3200 * 512, measured_s=1.0 + 0.001 * (rank % 13), step_s_median=0.01,
        wait_s=wait_s, pre_s=None, comm_s=None, t_unix=1.7e9 + window, util_pct=90.0,
        temperature_c=60.0, throttle_pct=0.0, process_cpu_pct=100.0, system_cpu_pct=50.0,
        final=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--windows", type=int, default=20)
    args = parser.parse_args(argv)
    world, slow = args.ranks, args.ranks // 3
    tracemalloc.start()
    merger = Merger(world)
    parse_ms, publish_ms = [], []
    summary_bytes = meta_bytes = 0
    for window in range(1, args.windows + 1):
        payloads = [orjson.dumps(record(r, window, slow)) for r in range(world)]
        t0 = time.perf_counter()
        for raw in payloads:
            merger.add(orjson.loads(raw))
        t1 = time.perf_counter()
        summary = merged_summary(merger, Summary(run_id="bench"), done=False)
        summary_bytes = len(orjson.dumps(summary_dict(summary, merger, done=False)))
        meta = merged_meta(merger, info=RankInfo(world_size=world), run_id="bench",
                           started_unix=0.0, done=False)
        meta_bytes = len(orjson.dumps(meta))
        t2 = time.perf_counter()
        parse_ms.append((t1 - t0) * 1e3)
        publish_ms.append((t2 - t1) * 1e3)
        del payloads
    heap_now, heap_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    lowest = min(merger.ranks.values(), key=lambda s: s.scores[-1][1])
    print(json.dumps({
        "bench": "dist_merge", "ranks": world, "windows": args.windows,
        "history_windows": HISTORY_WINDOWS,
        "parse_merge_ms_median": statistics.median(parse_ms),
        "parse_merge_us_per_rank": statistics.median(parse_ms) * 1e3 / world,
        "publish_ms_median": statistics.median(publish_ms),
        "store_collect_ms": _store_collect_ms(world, slow),
        "merge_heap_mb": heap_now / 1e6, "peak_heap_mb": heap_peak / 1e6,
        "summary_json_mb": summary_bytes / 1e6, "meta_json_mb": meta_bytes / 1e6,
        "lowest_relative_score_rank": lowest.rank, "slowed_rank": slow,
        "cpu_count": os.cpu_count(), "load_1min": os.getloadavg()[0],
    }))
    return 0


def _store_collect_ms(world: int, slow: int) -> list[float]:
    """Rank 0's read of one window from a real TCPStore, after ``world`` ranks posted."""
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
    return times


if __name__ == "__main__":
    sys.exit(main())
