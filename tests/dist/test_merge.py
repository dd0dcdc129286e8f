"""The merge of hand-made window records: global throughput, scores, gaps (exact values)."""

import pytest

from dist.fakes import record
from trainpace.dist.merge import Merger, window_record


def test_global_throughput_is_the_sum_of_samples_over_the_slowest_ranks_time():
    m = Merger(2)
    m.add(record(0, 1, measured_s=1.0, samples=160))
    m.add(record(1, 1, measured_s=1.25, samples=150))
    rates = m.throughput()
    assert rates["samples_per_s"] == pytest.approx(310 / 1.25)  # never 2 × rank 0's 160/s
    assert rates["steps_per_s"] == pytest.approx(10 / 1.25)
    assert rates["tokens_per_s"] is None
    assert m.last_window_samples_per_s == pytest.approx(310 / 1.25)


def test_tokens_add_up_only_when_every_rank_counted_them():
    m = Merger(2)
    m.add(record(0, 1, tokens=1000))
    m.add(record(1, 1, measured_s=2.0, tokens=3000))
    assert m.throughput()["tokens_per_s"] == pytest.approx(4000 / 2.0)
    m.add(record(1, 2, tokens=None))
    assert m.throughput()["tokens_per_s"] is None


def test_relative_and_individual_scores_from_the_time_before_the_collective():
    m = Merger(2)
    # window 1: rank 1 waits 50 ms a step for data, rank 0 none; steps 100 and 120 ms
    m.add(record(0, 1, measured_s=1.0))
    assert m.scored_windows == 0  # rank 1's window 1 is still to come
    m.add(record(1, 1, measured_s=1.2, wait_s=0.5))
    assert m.scored_windows == 1
    assert m.source == "data_wait"
    (w, rel0, ind0), = m.ranks[0].scores
    (_, rel1, ind1), = m.ranks[1].scores
    assert (w, rel0, ind0, ind1) == (1, 1.0, 1.0, 1.0)
    assert rel1 == pytest.approx(1 - 0.05 / 0.11)  # 50 ms lost against the 110 ms median step
    # windows 2 and 3: its best wait is 30 ms; then 80 ms, 50 ms worse than its best
    for window, wait_s in ((2, 0.3), (3, 0.8)):
        m.add(record(0, window, measured_s=1.0))
        m.add(record(1, window, measured_s=1.2, wait_s=wait_s))
    assert m.ranks[1].scores[-1][2] == pytest.approx(1 - 0.05 / 0.12)
    assert m.ranks[1].scores[1][2] == 1.0


def test_the_comm_hooks_time_before_the_collective_is_used_when_every_rank_has_it():
    m = Merger(2)
    m.add(record(0, 1, pre_s=0.2, comm_s=0.8))
    m.add(record(1, 1, pre_s=0.6, comm_s=0.4))
    assert m.source == "comm_hook"
    assert m.ranks[1].scores[-1][1] == pytest.approx(1 - 0.04 / 0.1)
    assert m.ranks[1].to_dict()["communication_pct"] == pytest.approx(40.0)
    assert m.ranks[0].to_dict()["pre_collective_pct"] == pytest.approx(20.0)


def test_a_rank_two_windows_behind_is_left_out_and_named_missing_at_the_end():
    m = Merger(3)
    for window in (1, 2, 3):
        m.add(record(0, window, t_unix=100.0 + window))
        m.add(record(1, window, t_unix=100.0 + window))
        if window == 1:
            m.add(record(2, 1, t_unix=101.0))
    # window 2 lacks rank 2: scored once window 4 exists (two windows newer)
    assert m.scored_windows == 1
    m.add(record(0, 4, final=True))
    m.add(record(1, 4, final=True))
    assert m.scored_windows == 2
    m.flush()
    assert m.scored_windows == 4
    assert m.missing(done=False) == []
    assert m.missing(done=True) == [{"rank": 2, "host": "h0", "last_window": 1, "last_step": 10,
                                     "last_seen_unix": 101.0,
                                     "reason": "ended early (no final window)"}]
    assert [s[0] for s in m.ranks[2].scores] == [1]


def test_a_rank_never_heard_from_is_missing_and_a_record_seen_twice_counts_once():
    m = Merger(2)
    m.add(record(0, 1))
    m.add(record(0, 1))
    assert m.ranks[0].samples == 160
    assert m.missing(done=False)[0]["reason"] == "never reported"


def test_window_record_from_step_records_leaves_warmup_out():
    steps = [{"step": i, "step_s": s, "wait_s": w, "samples": 8, "tokens": 100}
             for i, (s, w) in enumerate([(0.5, 0.1), (0.1, 0.01), (0.2, 0.03), (0.3, 0.02)], 1)]
    r = window_record(rank=3, local_rank=1, node=1, host="b", window=1, steps=steps, warmup=1,
                      t_unix=5.0, figures={"util_pct": 50.0, "temperature_c": True})
    assert (r["steps"], r["samples"], r["tokens"], r["first_step"], r["last_step"]) == (3, 24, 300, 1, 4)
    assert r["measured_s"] == pytest.approx(0.6)
    assert r["wait_s"] == pytest.approx(0.06)
    assert r["step_s_median"] == pytest.approx(0.2)
    assert (r["util_pct"], r["temperature_c"]) == (50.0, None)
