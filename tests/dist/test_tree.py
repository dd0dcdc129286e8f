"""The two-level merge (node leaders, then rank 0) against the flat one, on hand-made records.

Values are dyadic (exact in binary), so regrouping the sums changes nothing: the global
figures must be equal, not approximately equal.
"""

import orjson
import pytest

from dist.fakes import MemoryStore, record
from trainpace.dist.merge import Merger
from trainpace.dist.monitor import RankMonitor
from trainpace.dist.ranks import RankInfo
from trainpace.dist.settings import flat_max_from_env
from trainpace.dist.tree import CANDIDATES, TreeMerger, node_ranks, node_record
from trainpace.summary import Summary

NODES, PER_NODE = 4, 3
WORLD = NODES * PER_NODE
SLOW = 7  # node 2


def job_records(windows=5, *, dead=None, tokens=True):
    """Every rank's records, window by window; rank SLOW waits 0.5 s more for data."""
    out = []
    for w in range(1, windows + 1):
        for r in range(WORLD):
            if dead is not None and r == dead and w > 2:
                continue  # it died after window 2
            out.append(record(
                r, w, steps=8, measured_s=1.0 + 0.125 * (r % 3) + 0.0625 * (r == 5 and w == 3),
                wait_s=0.0078125 * (r % 4) + (0.5 if r == SLOW else 0.0),
                samples=64 + 8 * (r % 5), tokens=1024 * (r + 1) if tokens else None,
                host=f"n{r // PER_NODE}", local_rank=r % PER_NODE, node=r // PER_NODE,
                final=w == windows, t_unix=100.0 + w))
    return out


def merge_both(records):
    flat = Merger(WORLD)
    nodes = node_ranks(WORLD, PER_NODE)
    leaders = {n: Merger(WORLD, ids=ranks, keep_scored=True) for n, ranks in nodes.items()}
    tree = TreeMerger(WORLD, nodes)
    seq = dict.fromkeys(nodes, 0)
    windows = sorted({r["window"] for r in records})
    for w in windows:
        for rec in (r for r in records if r["window"] == w):
            flat.add(rec)
            leaders[rec["rank"] // PER_NODE].add(rec)
        last = w == windows[-1]
        for n, leader in leaders.items():
            if last:
                leader.flush()
            seq[n] += 1
            node = node_record(leader, node=n, leader=n * PER_NODE, seq=seq[n],
                               final=last, t_unix=100.0 + w)
            tree.add(orjson.loads(orjson.dumps(node)))  # as the store carries it
    flat.flush()
    tree.flush()
    for n, leader in leaders.items():
        tree.set_view(n, orjson.loads(orjson.dumps(leader.rank_dicts())))
    return flat, tree


def test_the_global_figures_are_the_flat_merges_exactly():
    flat, tree = merge_both(job_records())
    assert tree.throughput() == flat.throughput()
    assert tree.throughput()["samples_per_s"] == sum(64 + 8 * (r % 5) for r in range(WORLD)) * 5 / 6.3125  # rank 5: 5 × 1.25 s + 0.0625 s
    assert tree.wait_pct() == flat.wait_pct()
    assert tree.wait_s_per_step() == flat.wait_s_per_step()
    assert tree.last_window_samples_per_s == flat.last_window_samples_per_s
    assert tree.scored_windows == flat.scored_windows == 5
    assert tree.ranks_reporting() == flat.ranks_reporting() == WORLD
    assert tree.missing(done=True) == flat.missing(done=True) == []
    assert tree.all_final()


def test_tokens_none_on_any_rank_is_none_globally():
    flat, tree = merge_both(job_records(tokens=False))
    assert tree.throughput() == flat.throughput()
    assert tree.throughput()["tokens_per_s"] is None


def test_the_straggler_is_found_at_the_leaders_with_its_rank_and_the_same_scores():
    flat, tree = merge_both(job_records())
    assert SLOW in tree.tracked and 0 not in tree.tracked  # rank 0 (the fastest): no history
    flat_scores = [s[1] for s in flat.ranks[SLOW].scores]
    tree_scores = [s[1] for s in tree.tracked[SLOW]]
    assert len(tree_scores) == len(flat_scores) == 5
    assert min(tree_scores) < 0.7
    entries = {e["rank"]: e for e in tree.rank_dicts()}
    assert sorted(entries) == list(range(WORLD))  # ranks[] holds every rank
    assert entries[SLOW]["scores"] and entries[0]["scores"] == []
    assert entries[SLOW]["wait_pct"] == flat.rank_dicts()[SLOW]["wait_pct"]
    lowest_flat = min(flat.ranks.values(), key=lambda s: min(x[1] for x in s.scores)).rank
    assert lowest_flat == SLOW


def test_equal_step_times_give_the_flat_relative_scores_exactly():
    # the all-reduce makes S equal on every rank: then the medians agree and so do the scores
    records = [dict(r, measured_s=1.0) for r in job_records()]
    flat, tree = merge_both(records)
    assert [s[1:] for s in tree.tracked[SLOW]] == [s[1:] for s in flat.ranks[SLOW].scores]
    assert sorted(tree.tracked) == [SLOW]  # the only history rank 0 keeps


def test_a_dead_rank_is_named_by_its_leader_like_the_flat_merge():
    flat, tree = merge_both(job_records(dead=4))
    assert tree.throughput() == flat.throughput()
    assert tree.missing(done=True) == flat.missing(done=True)
    assert [m["rank"] for m in tree.missing(done=True)] == [4]


def test_a_node_whose_leader_is_silent_has_all_its_ranks_missing():
    nodes = node_ranks(6, 3)
    tree = TreeMerger(6, nodes)
    leader = Merger(6, ids=nodes[0], keep_scored=True)
    for r in nodes[0]:
        leader.add(record(r, 1, final=True))
    tree.add(node_record(leader, node=0, leader=0, seq=1, final=True, t_unix=1.0))
    gone = tree.missing(done=True)
    assert [m["rank"] for m in gone] == [3, 4, 5]
    assert gone[0]["reason"] == "never reported (node 1's leader sent nothing)"
    assert tree.throughput()["samples_per_s"] == 3 * 160 / 1.0


def test_a_node_record_sends_a_bounded_set_of_candidates():
    ids = list(range(16))
    leader = Merger(16, ids=ids, keep_scored=True)
    for r in ids:
        leader.add(record(r, 1, wait_s=0.0625 * (r == 9), measured_s=1.0 + 0.25 * (r == 3)))
    rec = node_record(leader, node=0, leader=0, seq=1, final=False, t_unix=1.0)
    [window] = rec["scored"]
    listed = [c[0] for c in window["candidates"]]
    assert 9 in listed and 3 in listed and len(listed) <= 2 * CANDIDATES
    assert window["rest"][:2] == [0.0, 0.1] and window["n"] == 16
    assert leader.scored_log == []  # drained: the next record carries only new windows


def test_uneven_nodes_merge_flat():
    assert node_ranks(10, 4) is None
    assert node_ranks(4, 2) == {0: [0, 1], 1: [2, 3]}
    assert flat_max_from_env({"TRAINPACE_DIST_FLAT_MAX_RANKS": "2"}) == 2
    assert flat_max_from_env({}) == 64


def test_four_monitors_on_two_nodes_publish_the_exact_merge():
    store = MemoryStore()
    published = []
    mons = [RankMonitor(RankInfo(rank=r, world_size=4, local_rank=r % 2, local_world_size=2,
                                 node=r // 2, host=f"h{r // 2}"),
                        run_id="job", publish=published.append if r == 0 else None,
                        timeout_s=1.0, connect=lambda i, t: store, flat_max_ranks=2)
            for r in range(4)]
    assert isinstance(mons[0].merger, TreeMerger)
    assert [m.node_merger is not None for m in mons] == [True, False, True, False]
    expected_samples = 0
    for window in range(1, 5):
        for r in (3, 1, 2, 0):  # leaders after their node, rank 0 last
            wait = 0.5 if r == 3 else 0.0
            steps = [{"step": (window - 1) * 4 + i, "step_s": 0.25, "wait_s": wait / 4,
                      "samples": 8 + r, "tokens": None} for i in range(1, 5)]
            expected_samples += 4 * (8 + r)
            mons[r].window({"warmup_steps": 0}, steps)
    for r in (3, 1, 2):
        assert mons[r].finish(Summary()) is None
    merged = mons[0].finish(Summary(run_id="job"))
    assert merged is not None and merged.world_size == 4
    assert merged.throughput.samples_per_s == expected_samples / 4.0  # 4 windows × 1 s
    assert [r.rank for r in merged.ranks] == [0, 1, 2, 3]
    summary, meta = published[-2].data, published[-1].data
    assert meta["dist"]["merge"]["levels"] == 2 and meta["dist"]["missing"] == []
    assert meta["dist"]["merge"]["tracked_ranks"] == [3]
    assert summary["ranks"][3]["relative_score"] == pytest.approx(1 - 0.125 / 0.25)
    assert store.data["node/last/1"] == b"5"  # 4 windows' records and the final one


def test_a_leader_that_dies_has_its_node_named_after_the_bounded_wait():
    store = MemoryStore()
    t = [0.0]

    def clock():
        t[0] += 0.5
        return t[0]

    mons = [RankMonitor(RankInfo(rank=r, world_size=4, local_rank=r % 2, local_world_size=2,
                                 node=r // 2), run_id="job", timeout_s=2.0,
                        connect=lambda i, _: store, unix_clock=clock, flat_max_ranks=2)
            for r in range(4)]
    steps = [{"step": 1, "step_s": 0.5, "wait_s": 0.0, "samples": 8, "tokens": None}]
    for r in (1, 3, 2, 0):
        mons[r].window({}, steps)
    mons[2].window({}, [dict(steps[0], step=2)])  # node 1's leader posts window 1, then dies
    mons[1].finish(Summary())
    mons[3].finish(Summary())
    merged = mons[0].finish(Summary())
    assert merged is not None
    gone = mons[0].merger.missing(done=True)
    assert [(m["rank"], m["reason"]) for m in gone] == [
        (2, "ended early (node 1's leader sent no final record)"),
        (3, "ended early (node 1's leader sent no final record)")]
    assert merged.throughput.samples_per_s == 4 * 8 / 0.5  # window 1 of every rank
