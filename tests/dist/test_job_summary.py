"""A rank's own summary in the job's terms; the merged summary's JSON."""

from dist.fakes import record
from trainpace.dist.job_summary import merged_summary, rank_summary, summary_dict
from trainpace.dist.merge import Merger
from trainpace.dist.ranks import RankInfo
from trainpace.summary import RankEntry, Summary, Throughput, Time


def test_a_ranks_own_summary_says_the_jobs_world_size_and_its_rank():
    own = Summary(run_id="job", ranks=[RankEntry(rank=0, host=None, samples_per_s=40.0)])
    mine = rank_summary(own, RankInfo(rank=5, world_size=8, host="n1"))
    assert mine.world_size == 8
    assert [(e.rank, e.host, e.samples_per_s) for e in mine.ranks] == [(5, "n1", 40.0)]
    assert Summary.from_dict(mine.to_dict()).world_size == 8
    assert rank_summary(own, RankInfo()) is own  # one process: unchanged


def test_the_merged_summarys_rank_entries_carry_their_extensions():
    m = Merger(2)
    m.add(record(0, 1))
    m.add(record(1, 1, wait_s=0.5, measured_s=1.0))
    data = summary_dict(merged_summary(m, Summary(run_id="job"), done=False), m, done=False)
    assert [e["rank"] for e in data["ranks"]] == [0, 1]
    one = data["ranks"][1]
    assert (one["wait_pct"], one["final"], one["windows"]) == (50.0, False, 1)
    assert one["relative_score"] == 0.5 and data["ranks"][0]["relative_score"] == 1.0
    assert set(data["ranks"][0]) >= {"rank", "host", "samples_per_s", "step_s_median",
                                      "wait_pct", "local_rank", "node", "individual_score"}
    assert data["dist"]["merged_ranks"] == 2


def test_the_jobs_step_times_come_from_the_slowest_ranks_summary_only():
    m = Merger(2)
    m.add(record(0, 1, measured_s=1.0))
    m.add(record(1, 1, measured_s=2.0))  # the slowest: the job's time
    base = Summary(run_id="job", time=Time(step_s_median=0.1, step_s_p90=0.1, measured_s=1.0),
                   throughput=Throughput(steady_samples_per_s=160.0))
    slowest = Summary(time=Time(measured_s=2.0, step_s_median=0.25, step_s_p90=0.4,
                                step_s_mean=0.2))
    merged = merged_summary(m, base, done=True, rank_summaries={0: base, 1: slowest})
    t = merged.time
    assert (t.measured_s, t.step_s_median, t.step_s_p90, t.step_s_mean) == (2.0, 0.25, 0.4, 0.2)
    assert [e.step_s_median for e in merged.ranks] == [0.1, 0.25]
    assert merged.throughput.steady_samples_per_s is None  # rank 0's, not the job's
    # without the slowest rank's steps the job's step times are unknown, never rank 0's
    blind = merged_summary(m, base, done=True, rank_summaries={0: base})
    assert (blind.time.step_s_median, blind.time.step_s_p90) == (None, None)
