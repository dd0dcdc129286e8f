"""Distributed rules: communication share, rank imbalance."""

import pytest

from diagnose.helpers import ctx, only
from trainpace.diagnose import distributed
from trainpace.summary import Communication, RankEntry, Summary

# ---- communication and ranks ----------------------------------------------------------------

@pytest.mark.parametrize(("share", "severity"), [(9.9, None), (10.0, "warning"), (29.9, "warning"), (30.0, "critical")])
def test_communication_bands(share, severity):
    s = Summary(world_size=8, communication=Communication(share_pct=share, overlap_pct=20.0, source="trace"))
    outcome = distributed.communication(ctx(s))
    if severity is None:
        assert outcome.verdicts == ()
    else:
        v = only(outcome)
        assert (v.finding.severity, v.bottleneck) == (severity, "communication")
        assert v.finding.advice[0].startswith("only 20% of it overlaps compute")


def test_communication_single_process_and_missing_source():
    assert distributed.communication(ctx(Summary())).checked == "one process, nothing to exchange"
    assert distributed.communication(ctx(Summary(world_size=4))).skipped.startswith("no communication time")


def test_straggler_at_ten_percent_names_the_rank_and_the_culprit():
    ranks = [RankEntry(rank=0, host="a", step_s_median=1.0, wait_pct=2.0),
             RankEntry(rank=1, host="a", step_s_median=1.0, wait_pct=3.0),
             RankEntry(rank=2, host="b", step_s_median=1.1, wait_pct=15.0)]
    v = only(distributed.ranks(ctx(Summary(world_size=3, ranks=ranks))))
    assert v.finding.title == "Rank 2 is 10% slower than the median rank"
    assert (v.finding.severity, v.bottleneck) == ("warning", "straggler")
    assert v.finding.advice[0].startswith("rank 2 on b waits for data 15% of its step against 3%")
    ranks[2] = RankEntry(rank=2, host="b", step_s_median=1.09, wait_pct=3.0)
    assert distributed.ranks(ctx(Summary(world_size=3, ranks=ranks))).checked == "slowest rank 9% over the median"


def test_straggler_in_compute_and_critical():
    ranks = [RankEntry(rank=r, step_s_median=1.0) for r in range(3)] + [RankEntry(rank=3, step_s_median=1.25)]
    v = only(distributed.ranks(ctx(Summary(world_size=4, ranks=ranks))))
    assert v.finding.severity == "critical"
    assert "slower in compute" in v.finding.advice[0]
    assert distributed.ranks(ctx(Summary(ranks=[RankEntry()]))).checked == "one rank"


