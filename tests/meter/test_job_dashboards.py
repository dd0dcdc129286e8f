"""Two ranks' JobRanks over one in-memory store: the sinks that show the job get the merged
windows and the merged summary at rank 0, and nothing on rank 1."""

import pytest
from tests.dist.fakes import MemoryStore

from trainpace.dist.monitor import RankMonitor
from trainpace.dist.ranks import RankInfo
from trainpace.meter.distributed import JobRank
from trainpace.runlog import Record
from trainpace.summary import Summary


class Kept:
    def __init__(self, shows_job):
        self.shows_job = shows_job
        self.records = []
        self.closed = False

    def log(self, record):
        self.records.append(record)

    def close(self):
        self.closed = True


def job_rank(rank, store):
    info = RankInfo(rank=rank, local_rank=rank, world_size=2, local_world_size=2, host="h")
    return JobRank(info, lambda: None, monitor=RankMonitor(
        info, run_id="r", timeout_s=1.0, connect=lambda _info, _timeout: store))


def steps(first, last, *, step_s, samples, wait_s=0.0):
    return [{"step": s, "step_s": step_s, "samples": samples, "wait_s": wait_s, "tokens": None,
             "t_s": s * step_s} for s in range(first, last + 1)]


def figures(last, measured, loss):
    return {"last_step": last, "measured_steps": measured, "warmup_steps": 0, "loss": loss,
            "samples_per_s": 1.0}


def test_rank_0_shows_the_jobs_windows_and_summary_and_rank_1_nothing():
    store = MemoryStore()
    rank0, rank1 = job_rank(0, store), job_rank(1, store)
    shown0, own0, shown1, own1 = Kept(True), Kept(False), Kept(True), Kept(False)
    fed0 = rank0.dashboards([shown0, own0], timeout_s=5.0)
    assert rank1.dashboards([shown1, own1], timeout_s=5.0) == [own1]
    assert shown1.closed  # rank 1 never feeds it
    assert fed0[0] is own0 and shown0 not in fed0

    fed0[1].log(Record("meta", {"rank": 0, "world_size": 2}))  # rank 0's own meta goes along
    for last in (10, 20):
        rank1.window(figures(last, 10, 9.0), steps(last - 9, last, step_s=0.02, samples=4,
                                                   wait_s=0.005))
        rank0.window(figures(last, 10, 1.5), steps(last - 9, last, step_s=0.01, samples=8))
    rank1.finish(Summary(run_id="r"), lambda s, _meta, _steps: s)
    rank0.finish(Summary(run_id="r"), lambda s, _meta, _steps: s)

    assert shown0.closed
    kinds = [r.kind for r in shown0.records]
    assert kinds[0] == "meta" and kinds[-1] == "summary"
    windows = [r for r in shown0.records if r.kind == "window"]
    assert [w.step for w in windows] == [10, 20]  # each window once, at its step
    for window in windows:
        job = window.data["window"]
        assert job["samples_per_s"] == pytest.approx((80 + 40) / 0.2)
        assert job["step_s_median"] == pytest.approx(0.02)
        assert job["wait_pct"] == pytest.approx(25.0)
        assert (job["ranks"], job["world_size"], job["loss"]) == (2, 2, 1.5)
        assert "rank_figures" not in job  # not asked for
    summary = shown0.records[-1].data
    assert summary["world_size"] == 2
    assert summary["throughput"]["samples_per_s"] == pytest.approx(240 / 0.4)


class DeadStore(MemoryStore):
    def set(self, key, value):
        raise ConnectionError("store gone")

    multi_set = set


def test_without_the_exchange_rank_0_shows_its_own_windows_labelled_one_rank():
    rank0 = job_rank(0, DeadStore())
    shown = Kept(True)
    rank0.dashboards([shown], timeout_s=5.0)
    rank0.window(figures(10, 10, 1.5), steps(1, 10, step_s=0.01, samples=8))
    rank0.finish(Summary(run_id="r"), lambda s, _meta, _steps: s)
    (window,) = [r.data["window"] for r in shown.records if r.kind == "window"]
    assert (window["ranks"], window["world_size"], window["samples_per_s"]) == (1, 2, 1.0)
