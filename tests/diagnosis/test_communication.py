"""Distributed rules: communication share, rank imbalance."""

import pytest

from diagnosis.helpers import ctx, only
from trainpace.diagnosis import communication as comm
from trainpace.summary import Communication, RankEntry, Summary

# ---- communication and ranks ----------------------------------------------------------------

@pytest.mark.parametrize(("share", "severity"), [(9.9, None), (10.0, "warning"), (29.9, "warning"), (30.0, "critical")])
def test_communication_bands(share, severity):
    s = Summary(world_size=8, communication=Communication(share_pct=share, overlap_pct=20.0, source="trace"))
    outcome = comm.communication(ctx(s))
    if severity is None:
        assert outcome.verdicts == ()
    else:
        v = only(outcome)
        assert (v.finding.severity, v.bottleneck) == (severity, "communication")
        assert v.finding.advice[0].startswith("only 20% of it overlaps compute")


def test_communication_single_process_and_missing_source():
    assert comm.communication(ctx(Summary())).checked == "one process, nothing to exchange"
    assert comm.communication(ctx(Summary(world_size=4))).skipped.startswith("no communication time")


def test_straggler_at_ten_percent_names_the_rank_and_the_culprit():
    ranks = [RankEntry(rank=0, host="a", step_s_median=1.0, wait_pct=2.0),
             RankEntry(rank=1, host="a", step_s_median=1.0, wait_pct=3.0),
             RankEntry(rank=2, host="b", step_s_median=1.1, wait_pct=15.0)]
    v = only(comm.ranks(ctx(Summary(world_size=3, ranks=ranks))))
    assert v.finding.title == "Rank 2 is 10% slower than the median rank"
    assert (v.finding.severity, v.bottleneck) == ("warning", "straggler")
    assert v.finding.advice[0].startswith("rank 2 on b waits for data 15% of its step against 3%")
    ranks[2] = RankEntry(rank=2, host="b", step_s_median=1.09, wait_pct=3.0)
    assert comm.ranks(ctx(Summary(world_size=3, ranks=ranks))).checked == "slowest rank 9% over the median"


def test_straggler_in_compute_and_critical():
    ranks = [RankEntry(rank=r, step_s_median=1.0) for r in range(3)] + [RankEntry(rank=3, step_s_median=1.25)]
    v = only(comm.ranks(ctx(Summary(world_size=4, ranks=ranks))))
    assert v.finding.severity == "critical"
    assert "slower in compute" in v.finding.advice[0]
    assert comm.ranks(ctx(Summary(ranks=[RankEntry()]))).checked == "one rank"




# ---- stragglers from the merge's per-rank scores (meta["dist"]) ----------------------------

def dist_state(*entries, missing=(), source="data_wait"):
    return {"dist": {"world_size": len(entries), "score_source": source, "missing": list(missing),
                     "ranks": list(entries)}}


def rank_entry(rank, relative, *, individual=None, host="h0", **signs):
    individual = individual or [1.0] * len(relative)
    scores = [[w, r, i] for w, (r, i) in enumerate(zip(relative, individual, strict=True), start=1)]
    base = {"rank": rank, "host": host, "scores": scores, "wait_pct": 1.0, "temperature_c": None,
            "throttle_pct": None, "system_cpu_pct": None}
    base.update(signs)
    return base


def test_a_balanced_job_names_no_straggler():
    meta = dist_state(rank_entry(0, [1.0, 0.97, 1.0, 1.0]), rank_entry(1, [0.95, 1.0, 0.96, 0.99]))
    outcome = comm.ranks(ctx(Summary(world_size=2), meta=meta))
    assert outcome.verdicts == ()
    assert outcome.checked == "no rank persistently behind (2 ranks, lowest relative score 0.95, from data_wait)"


def test_one_slow_window_is_no_straggler():
    meta = dist_state(rank_entry(0, [1.0] * 6), rank_entry(1, [1.0, 0.5, 1.0, 1.0, 1.0, 1.0]))
    assert comm.ranks(ctx(Summary(world_size=2), meta=meta)).verdicts == ()


def test_a_rank_behind_in_most_windows_is_the_straggler_with_its_data_wait_as_cause():
    meta = dist_state(rank_entry(0, [1.0] * 6, wait_pct=2.0, host="a"),
                      rank_entry(1, [0.6, 0.6, 1.0, 0.5, 0.7, 0.6], individual=[1, 1, 1, 0.8, 1, 1],
                                 wait_pct=60.0, host="b"),
                      rank_entry(2, [1.0] * 6, wait_pct=4.0, host="a"))
    v = only(comm.ranks(ctx(Summary(world_size=3), meta=meta)))
    e = v.finding.evidence
    assert (v.finding.id, v.finding.severity, v.bottleneck) == ("straggler", "critical", "straggler")
    assert (e["rank"], e["host"], e["cause"], e["windows_behind"], e["windows"]) == (1, "b", "data_wait", 5, 6)
    assert e["relative_score"] == pytest.approx(0.6)
    assert e["lost_pct"] == pytest.approx(40.0)
    assert e["individual_score"] == pytest.approx(0.8)
    assert e["others_wait_pct"] == pytest.approx(3.0)
    assert v.finding.title == ("Rank 1 on b holds the others back: 40% of the step lost to it in 5 of 6 "
                               "windows (it waits for data 60% of its step, the others 3%)")
    assert v.finding.advice[0].startswith("rank 1 on b: its input pipeline is the culprit")


@pytest.mark.parametrize(("signs", "cause"), [
    ({"throttle_pct": 30.0}, "device_throttled"),
    ({"temperature_c": 88.0}, "device_hot"),
    ({"system_cpu_pct": 95.0}, "host_contention"),
    ({}, "compute"),
])
def test_the_cause_comes_from_the_stragglers_own_signs(signs, cause):
    others = {"throttle_pct": 0.0, "temperature_c": 70.0, "system_cpu_pct": 40.0}
    meta = dist_state(rank_entry(0, [1.0] * 4, **others), rank_entry(1, [0.85] * 4, **{**others, **signs}),
                      source="comm_hook")
    v = only(comm.ranks(ctx(Summary(world_size=2), meta=meta)))
    assert v.finding.evidence["cause"] == cause
    assert v.finding.severity == "warning"  # 15% lost


def test_ranks_that_ended_early_are_a_finding_with_their_last_step():
    gone = {"rank": 1, "host": "b", "last_window": 3, "last_step": 30, "last_seen_unix": 0.0,
            "reason": "ended early (no final window)"}
    meta = dist_state(rank_entry(0, [1.0] * 3), rank_entry(1, [1.0] * 3), missing=[gone])
    outcome = comm.ranks(ctx(Summary(world_size=2), meta=meta))
    v = only(outcome)
    assert v.finding.id == "ranks_missing"
    assert v.finding.title == ("1 of 2 ranks did not report to the end: rank 1: ended early "
                               "(no final window), last step 30 (00:00:00 UTC)")
    assert v.finding.evidence["missing"] == [gone]


def test_the_straggler_is_the_bottleneck_when_it_dominates():
    from trainpace.diagnosis import diagnose

    meta = dist_state(rank_entry(0, [1.0] * 5, wait_pct=0.0), rank_entry(1, [0.3] * 5, wait_pct=70.0))
    d = diagnose(Summary(world_size=2), meta=meta)
    assert d.bottleneck == "straggler"


# ---- a data wait that one straggler explains ------------------------------------------------

def _merged_diagnosis(others_wait_s):
    from dist.fakes import record
    from trainpace.diagnosis import diagnose
    from trainpace.dist.job_summary import merged_meta, merged_summary
    from trainpace.dist.merge import Merger
    from trainpace.dist.ranks import RankInfo
    from trainpace.summary import Steps

    m = Merger(2)
    for w in range(1, 6):
        m.add(record(0, w, steps=20, measured_s=2.0, wait_s=others_wait_s, host="a", final=w == 5))
        m.add(record(1, w, steps=20, measured_s=2.0, wait_s=1.25, host="b", final=w == 5))
    base = Summary(run_id="j", steps=Steps(total=100, warmup=0, measured=100))
    summary = merged_summary(m, base, done=True)
    meta = merged_meta(m, info=RankInfo(world_size=2), run_id="j", started_unix=0.0, done=True)
    return diagnose(summary, meta=meta)


def test_a_data_wait_concentrated_on_the_straggler_says_so():
    # the diagnosis of a merged job says it (trainpace report, the Meter at rank 0)
    after = _merged_diagnosis(0.0625)  # rank 0 waits 3%, rank 1 62%: the mean is 33%
    wait = {f.id: f for f in after.findings}["data_wait"]
    assert wait.title == ("The step waits for data 33% of the time, concentrated on rank 1 on b "
                          "(62% against 3% on the other ranks): see the straggler finding")
    assert (wait.evidence["concentrated_on_rank"], wait.evidence["explained_by"]) == (1, "straggler")
    assert wait.advice[0] == "rank 1 on b's input pipeline, not the others' (see the straggler finding)"
    assert after.bottleneck == "straggler"
    checks = {f.id: f for f in after.findings}["checks"]
    assert checks.evidence["bottleneck_finding"] == "straggler"


def test_a_data_wait_shared_by_every_rank_is_left_alone():
    before = _merged_diagnosis(0.375)  # rank 0 waits 19% too: the wait is everyone's
    assert {f.id for f in before.findings} >= {"data_wait", "straggler"}
    assert "explained_by" not in {f.id: f for f in before.findings}["data_wait"].evidence
    assert comm.attribute_rank_wait(before) is before
