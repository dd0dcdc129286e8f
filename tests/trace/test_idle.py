from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tracekit import HANDMADE, RESNET_NW0, SAMPLED, handmade, prepared

from trainpace.trace import breakdown as bd
from trainpace.trace import idle
from trainpace.trace import intervals as iv
from trainpace.trace.findings import IdleBreakdown
from trainpace.trace.idle import CAUSES, idle_breakdown
from trainpace.trace.prepare import Prepared

WriteTrace = Callable[..., Path]


def _idle(path: Path, **kwargs: float) -> IdleBreakdown:
    p = prepared(path)
    t = bd.temporal(p)
    assert t is not None
    return idle_breakdown(p, t.busy, **kwargs)  # type: ignore[arg-type]


def test_handmade_idle_by_cause_per_stream() -> None:
    i = _idle(HANDMADE, gap_threshold_us=20)
    seven, twenty = i.streams
    # stream 7: 0 µs then 10 µs launched in time (kernel wait), 85 µs launched late (host
    # wait), 35 µs launched in time but longer than 30 µs (other)
    assert (seven.stream, seven.host_wait_us, seven.kernel_wait_us, seven.other_us, seven.gaps) \
        == (7, 85, 10, 35, 4)
    assert (twenty.stream, twenty.gaps, twenty.host_wait_us) == (20, 0, 0)
    assert (i.host_wait_us, i.kernel_wait_us, i.other_us) == (85, 10, 35)


def test_handmade_gaps_and_what_the_host_did() -> None:
    i = _idle(HANDMADE, gap_threshold_us=20)
    assert (i.gaps_count, i.gaps_total_us) == (2, 110)
    assert i.gaps_pct == pytest.approx(100 * 110 / 210)
    first, second = i.gaps  # longest first
    assert (first.start_us, first.duration_us, first.step, first.cause) == \
        (55, 75, "ProfilerStep#1", "data_loading")
    assert first.host_us == {"data_loading": 40, "synchronize": 0, "launch": 10, "optimizer": 0,
                             "cpu_ops": 0, "python": 0, "host_idle": 25}
    assert first.top_ops[0] == {
        "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "us": 40.0}
    assert (second.start_us, second.duration_us, second.cause, second.top_ops) == \
        (135, 35, "host_idle", [])
    assert i.gaps_by_cause_us == {"data_loading": 40, "synchronize": 0, "launch": 10,
                                  "optimizer": 0, "cpu_ops": 0, "python": 0, "host_idle": 60}
    assert tuple(i.gaps_by_cause_us) == CAUSES


def test_gap_threshold_filters_short_gaps() -> None:
    i = _idle(HANDMADE, gap_threshold_us=50)
    assert i.gaps_count == 1 and i.gaps[0].duration_us == 75


def test_synchronize_is_seen_during_a_gap(write_trace: WriteTrace) -> None:
    trace = handmade()
    trace["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize",
                                 "pid": 1, "tid": 1, "ts": 166, "dur": 30})
    i = _idle(write_trace(trace), gap_threshold_us=20)
    second = i.gaps[1]
    assert second.cause == "synchronize" and second.host_us["synchronize"] == 30


# Holistic Trace Analysis 0.5.0's get_idle_time_breakdown on the same traces (per stream).
HTA_IDLE = {
    "resnet_nw0": {7: (318934.0, 8529.0, 0.0)},
    "sampled_rank0": {23: (596037.0, 70.0, 34.0), 84: (148934.0, 6.0, 0.0),
                      25: (0.0, 9.0, 47865.0), 7: (213825.0, 1985.0, 261740.0),
                      203: (0.0, 0.0, 0.0)},
    "sampled_rank1": {23: (596313.0, 100.0, 0.0), 25: (0.0, 9.0, 53028.0),
                      7: (156827.0, 1816.0, 281064.0), 84: (251860.0, 0.0, 23247.0),
                      203: (0.0, 0.0, 0.0)},
}


@pytest.mark.parametrize(
    ("key", "path"),
    [("resnet_nw0", RESNET_NW0), ("sampled_rank0", SAMPLED[0]), ("sampled_rank1", SAMPLED[1])],
)
def test_real_traces_match_hta_idle_breakdown(key: str, path: Path) -> None:
    i = _idle(path)
    got = {s.stream: (s.host_wait_us, s.kernel_wait_us, s.other_us) for s in i.streams}
    assert got == HTA_IDLE[key]


def test_resnet_data_loading_gaps() -> None:
    i = _idle(RESNET_NW0)
    assert i.gaps_count == 5
    assert [g.cause for g in i.gaps[:4]] == ["data_loading"] * 4
    assert i.gaps_by_cause_us["data_loading"] == 235522.0


def _old_top_ops(p: Prepared, step: np.ndarray, lo: float, hi: float,
                 limit: int = 3) -> list[dict[str, object]]:
    """The top operators of one gap, as first written (a pass over all events per gap)."""
    c = p.cols
    hit = p.host & ~step & (c.ts < hi) & (c.end > lo)
    if not hit.any():
        return []
    overlap = np.minimum(c.end[hit], hi) - np.maximum(c.ts[hit], lo)
    totals = np.bincount(c.name[hit], weights=overlap, minlength=len(c.names))
    best = np.argsort(-totals, kind="stable")[:limit]
    return [{"name": c.names[i], "us": float(totals[i])} for i in best if totals[i] > 0]


@pytest.mark.parametrize("path", [HANDMADE, RESNET_NW0, *SAMPLED], ids=lambda p: p.name)
def test_top_ops_of_all_gaps_at_once_equal_one_by_one(path: Path) -> None:
    p = prepared(path)
    busy = bd.temporal(p)
    assert busy is not None
    lo, hi = iv.gaps(busy.busy)
    shuffled = np.random.default_rng(1).permutation(len(lo))  # any order of the gaps
    lo, hi = lo[shuffled], hi[shuffled]
    got = idle._top_ops(p, p.step_named, lo, hi)
    want = [_old_top_ops(p, p.step_named, float(a), float(b)) for a, b in zip(lo, hi, strict=True)]
    assert got == want
    assert sum(map(len, want)) > 0


@pytest.mark.parametrize("path", [HANDMADE, *SAMPLED], ids=lambda p: p.name)
def test_cause_sets_equal_the_chain_they_replace(path: Path) -> None:
    p = prepared(path)
    got = idle._cause_sets(p, p.step_named)
    sync = p.synchronize & (p.runtime | p.cpu_op)
    masks = [p.dataloader, sync, p.runtime & ~sync, p.optimizer & p.cpu_op,
             p.host & ~p.python & ~p.step_named & ~p.runtime, p.python]
    taken, want = iv.empty(), []
    for mask in masks:  # as first written: what a cause adds to those before it
        own = iv.subtract(iv.union(p.cols.ts[mask], p.cols.end[mask]), taken)
        want.append(own)
        taken = iv.union(np.concatenate([taken[0], own[0]]), np.concatenate([taken[1], own[1]]))
    assert len(got) == len(want) == len(idle.CAUSES) - 1
    for g, w in zip(got, want, strict=True):
        assert g[0].tolist() == w[0].tolist() and g[1].tolist() == w[1].tolist()
