"""The exchange and the monitor over an in-memory store: posts, reads, gaps, faults."""

import logging
import threading

import pytest

from dist.fakes import MemoryStore, record
from trainpace.dist.exchange import RING, Exchange
from trainpace.dist.monitor import RankMonitor
from trainpace.dist.ranks import RankInfo
from trainpace.dist.settings import timeout_from_env
from trainpace.summary import Summary


def exchanges(world, store):
    return [Exchange(RankInfo(rank=r, world_size=world), connect=lambda info, t: store)
            for r in range(world)]


def test_rank0_reads_every_new_record_once_in_two_round_trips():
    store = MemoryStore()
    ex = exchanges(3, store)
    for r in range(3):
        ex[r].post(record(r, 1))
    store.calls = 0
    got = ex[0].collect()
    assert sorted((g["rank"], g["window"]) for g in got) == [(0, 1), (1, 1), (2, 1)]
    assert store.calls == 3  # check, multi_get of last/*, multi_get of the records
    assert ex[0].collect() == []
    ex[2].post(record(2, 2))
    assert [(g["rank"], g["window"]) for g in ex[0].collect()] == [(2, 2)]


def test_a_rank_that_never_posted_does_not_block_the_read():
    store = MemoryStore()
    ex = exchanges(3, store)
    ex[0].post(record(0, 1))
    ex[2].post(record(2, 1))
    assert sorted(g["rank"] for g in ex[0].collect()) == [0, 2]


def test_records_older_than_the_ring_are_skipped_not_misread():
    store = MemoryStore()
    ex = exchanges(2, store)
    for w in range(1, RING + 4):
        ex[1].post(record(1, w))
    windows = [g["window"] for g in ex[0].collect()]
    assert windows == list(range(4, RING + 4))


def test_two_monitors_merge_and_rank0_publishes_the_merged_run():
    store = MemoryStore()
    published = []
    clock = iter(float(t) for t in range(1000, 2000))
    m0 = RankMonitor(RankInfo(rank=0, world_size=2, host="a"), run_id="job",
                     publish=published.append, timeout_s=1.0, connect=lambda i, t: store,
                     unix_clock=lambda: next(clock))
    m1 = RankMonitor(RankInfo(rank=1, world_size=2, host="b"), run_id="job",
                     connect=lambda i, t: store, timeout_s=1.0)
    steps = [{"step": i, "step_s": 0.1, "wait_s": 0.0, "samples": 8, "tokens": None}
             for i in range(1, 6)]
    slow = [dict(s, step_s=0.1, wait_s=0.05) for s in steps]
    m1.window({"warmup_steps": 0}, slow)
    m0.window({"warmup_steps": 0}, steps)
    m1.finish(Summary())
    merged = m0.finish(Summary(run_id="job"))
    assert merged is not None
    assert merged.world_size == 2
    assert merged.throughput.samples_per_s == pytest.approx(80 / 0.5)
    assert [(r.rank, r.host) for r in merged.ranks] == [(0, "a"), (1, "b")]
    assert merged.ranks[1].wait_pct == pytest.approx(50.0)
    kinds = [r.kind for r in published]
    assert kinds[-2:] == ["summary", "meta"]
    summary, meta = published[-2].data, published[-1].data
    assert meta["world_size"] == 2 and meta["rank"] is None and meta["finished_at"]
    assert meta["dist"]["missing"] == []
    assert summary["ranks"][1]["relative_score"] == pytest.approx(1 - 0.05 / 0.1)
    assert summary["ranks"][1]["final"] is True


def test_a_dead_rank_is_named_after_the_bounded_wait():
    store = MemoryStore()
    t = [0.0]

    def clock():
        t[0] += 0.5
        return t[0]

    m0 = RankMonitor(RankInfo(rank=0, world_size=2), run_id="job", timeout_s=2.0,
                     connect=lambda i, _: store, unix_clock=clock)
    m1 = RankMonitor(RankInfo(rank=1, world_size=2), run_id="job", timeout_s=2.0,
                     connect=lambda i, _: store, unix_clock=clock)
    steps = [{"step": 1, "step_s": 0.1, "wait_s": 0.0, "samples": 8, "tokens": None}]
    m1.window({}, steps)  # then it dies: no final window
    m0.window({}, steps)
    merged = m0.finish(Summary())
    assert merged is not None
    [gone] = m0.merger.missing(done=True)
    assert (gone["rank"], gone["last_step"], gone["reason"]) == (1, 1, "ended early (no final window)")
    assert merged.throughput.samples_per_s == pytest.approx(16 / 0.1)


def test_a_store_that_fails_stops_the_exchange_once_and_logs_it(caplog):
    def unreachable(info, timeout_s):
        raise ConnectionError("no store at 127.0.0.1:1")

    m = RankMonitor(RankInfo(rank=1, world_size=2, master_addr="127.0.0.1", master_port=1),
                    run_id="x", connect=unreachable)
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        m.window({}, [{"step": 1, "step_s": 0.1, "wait_s": 0.0, "samples": 1, "tokens": None}])
        m.window({}, [{"step": 2, "step_s": 0.1, "wait_s": 0.0, "samples": 1, "tokens": None}])
        assert m.finish(Summary()) is None
    assert m.broken.startswith("exchanging window figures: ConnectionError")
    assert len([r for r in caplog.records if "failed" in r.message]) == 1


def test_run_folder_agreed_through_the_store(tmp_path):
    store = MemoryStore()
    taken = tmp_path / "run"
    (taken / "rank0").mkdir(parents=True)
    m0 = RankMonitor(RankInfo(rank=0, world_size=2), run_id="x", connect=lambda i, t: store)
    m1 = RankMonitor(RankInfo(rank=1, world_size=2), run_id="x", connect=lambda i, t: store)
    assert m0.run_folder(taken, lambda p: p.with_name("run-2")) == tmp_path / "run-2" / "rank0"
    assert m1.run_folder(taken, lambda p: p) == tmp_path / "run-2" / "rank1"
    elsewhere = tmp_path / "node1" / "run"  # another node's out=: its own parent, the same name
    assert m1.run_folder(elsewhere, lambda p: p) == tmp_path / "node1" / "run-2" / "rank1"


def test_timeout_from_env():
    assert timeout_from_env({"TRAINPACE_DIST_TIMEOUT_S": "2.5"}) == 2.5
    assert timeout_from_env({"TRAINPACE_DIST_TIMEOUT_S": "soon"}) == 10.0
    assert timeout_from_env({}) == 10.0


def test_without_rank0s_answer_a_rank_keeps_out_and_its_exchange(tmp_path, caplog):
    store = MemoryStore()
    m1 = RankMonitor(RankInfo(rank=1, world_size=2), run_id="x", connect=lambda i, t: store)
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        assert m1.run_folder(tmp_path / "run", lambda p: p) == tmp_path / "run" / "rank1"
    assert "agreeing on the run folder failed (TimeoutError" in caplog.text
    assert m1.broken is None
    m1.window({}, [{"step": 1, "step_s": 0.1, "wait_s": 0.0, "samples": 1, "tokens": None}])
    assert "run/last/1" in store.data  # posted under the run's name


@pytest.mark.parametrize("planted", ["../../x", "/etc", "run/../../x", "..", "other", "run-2/x",
                                     "run-²"])
def test_a_run_folder_name_planted_in_the_store_is_not_followed(tmp_path, planted, caplog):
    store = MemoryStore()
    store.set("agree/run_folder/run", planted)  # the store takes writes from anyone
    m1 = RankMonitor(RankInfo(rank=1, world_size=2), run_id="x", connect=lambda i, t: store)
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        assert m1.run_folder(tmp_path / "out" / "run", lambda p: p) == (
            tmp_path / "out" / "run" / "rank1")
    assert "is not a folder name beside" in caplog.text


def test_a_rank_whose_folder_is_a_planted_link_writes_no_folder_and_trains_on(tmp_path, caplog):
    """Rank 1 of a job whose rank1/ is a link on its node: a warning, no run folder, nothing
    written where the link points; its windows still go through the store."""
    from trainpace.meter.distributed import JobRank

    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "rank1").symlink_to(victim, target_is_directory=True)
    store = MemoryStore()
    store.set("agree/run_folder/run", "run")
    job = JobRank(RankInfo(rank=1, world_size=2), vitals=lambda: None)
    job.monitor = RankMonitor(RankInfo(rank=1, world_size=2), run_id="x",
                              connect=lambda i, t: store)
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        assert job.claim(tmp_path / "run") == (None, None)
    assert "rank 1 writes no run folder" in caplog.text and "symbolic link" in caplog.text
    assert list(victim.iterdir()) == []
    assert job.monitor.broken is None
    plain = JobRank(RankInfo(rank=1, world_size=2), vitals=lambda: None)
    plain.monitor = RankMonitor(RankInfo(rank=1, world_size=2), run_id="x",
                                connect=lambda i, t: store)
    store.set("agree/run_folder/other", "other")
    assert plain.claim(tmp_path / "other") == (tmp_path / "other" / "rank1", tmp_path / "other")
    assert (tmp_path / "other" / "rank1").is_dir()


def test_a_window_is_one_trip_to_the_stores_thread_at_every_rank(monkeypatch):
    """The post and rank 0's reads of a window go together: each trip to the store's thread
    wakes it and then the writer, each waking thread waiting for the training's GIL."""
    from trainpace.dist.exchange import BoundedStore

    trips = []
    batch = BoundedStore.batch
    monkeypatch.setattr(BoundedStore, "batch",
                        lambda self, what, calls: (trips.append(what), batch(self, what, calls))[1])
    store = MemoryStore()
    m0, m1 = (RankMonitor(RankInfo(rank=r, world_size=2), run_id="job", timeout_s=1.0,
                          connect=lambda i, t: store, publish=lambda record: None)
              for r in (0, 1))
    m0.publication._published_s = float("inf")  # no mid-run publication in this window (it reads views)
    m1.window({}, [])
    assert trips == ["posting a window"]
    store.calls, trips[:] = 0, []
    m0.window({}, [])
    assert trips == ["posting and reading windows"]
    # multi_set, check (a first read), multi_get of last/*, multi_get of the records
    assert store.calls == 4
    assert {r: s.last_window for r, s in m0.merger.ranks.items()} == {0: 1, 1: 1}


def test_rank_0_merges_a_window_as_soon_as_the_last_rank_posts_it_not_at_its_next():
    # rank 0 posts window 1 before rank 1 does: the window must come out when rank 1's record
    # arrives, without rank 0 reaching its next boundary (its writer is idle meanwhile)
    store = MemoryStore()
    m0 = RankMonitor(RankInfo(rank=0, world_size=2), run_id="job", timeout_s=5.0,
                     connect=lambda i, t: store)
    m1 = RankMonitor(RankInfo(rank=1, world_size=2), run_id="job", timeout_s=5.0,
                     connect=lambda i, t: store)
    merged = threading.Event()
    windows = []

    def scored(records):
        windows.append(sorted((r["rank"], r["window"]) for r in records.values()))
        merged.set()

    m0.merger.on_scored = scored
    steps = [{"step": i, "step_s": 0.1, "wait_s": 0.0, "samples": 8, "tokens": None}
             for i in range(1, 6)]
    m0.window({"warmup_steps": 0}, steps)
    assert windows == []  # rank 1's record is not there yet
    m1.window({"warmup_steps": 0}, steps)
    assert merged.wait(timeout=30.0), "the window waited for rank 0's next boundary"
    assert windows == [[(0, 1), (1, 1)]]
    m1.finish(Summary())
    assert m0.finish(Summary(run_id="job")) is not None
    assert not [t for t in threading.enumerate() if t.name == "trainpace-dist-poll"]
