"""Rank folders gathered into one run folder, merged afterwards (hand-made folders)."""

import pytest

from dist.fakes import write_rank
from trainpace.dist.folders import read_distributed


def test_merged_afterwards_with_exact_throughput_and_the_straggler(tmp_path):
    run = tmp_path / "run"
    write_rank(run, 0, [0.1] * 8, [0.0] * 8)
    write_rank(run, 1, [0.125] * 8, [0.05] * 8)
    merged = read_distributed(run)
    assert merged is not None and merged.notes == []
    s = merged.summary
    assert s.world_size == 2
    assert s.throughput.samples_per_s == pytest.approx(64 / 1.0)  # Σ samples / the slower rank's 1 s
    assert [r.rank for r in s.ranks] == [0, 1]
    assert s.ranks[1].wait_pct == pytest.approx(40.0)
    [r1] = [r for r in merged.meta["dist"]["ranks"] if r["rank"] == 1]
    assert [w for w, _, _ in r1["scores"]] == [1, 2, 3, 4]
    assert r1["scores"][0][1] == pytest.approx(1 - 0.05 / 0.1125)
    assert merged.meta["dist"]["missing"] == []


def test_a_rank_that_ended_early_and_a_rank_not_gathered(tmp_path):
    run = tmp_path / "run"
    write_rank(run, 0, [0.1] * 6, [0.0] * 6, world=3)
    write_rank(run, 2, [0.1] * 3, [0.0] * 3, world=3, finished=False)
    with (run / "rank2" / "steps.jsonl").open("a") as f:
        f.write('{"step": 4, "t_s"')  # killed mid-write
    merged = read_distributed(run)
    assert merged is not None
    assert merged.notes == [
        "rank2/steps.jsonl: the last line was cut off (a rank killed mid-write); it is left out",
        f"rank folders of ranks 1 are not in {run} (other nodes write theirs locally: copy "
        "them here to merge them)",
        "rank 2 ended early at step 3 (no final record; the furthest rank reached step 6): its "
        "figures cover its steps only"]
    missing = {m["rank"]: (m["reason"], m["last_step"]) for m in merged.meta["dist"]["missing"]}
    assert missing == {1: ("never reported", 0), 2: ("ended early (no final window)", 3)}


def test_a_folder_without_rank_folders_is_not_distributed(tmp_path):
    assert read_distributed(tmp_path) is None


def test_the_jobs_step_times_are_the_slowest_ranks_own_steps(tmp_path):
    # Rank 1 holds the job's time. Its window medians (windows of 2: 0.1, 0.3, 0.5, 0.5) have
    # a median of 0.4; its steps' median is 0.5: the job's step median is the steps'.
    run = tmp_path / "run"
    write_rank(run, 0, [0.1] * 8, [0.0] * 8)
    write_rank(run, 1, [0.1, 0.1, 0.1, 0.5, 0.5, 0.5, 0.5, 0.5], [0.0] * 8)
    merged = read_distributed(run)
    assert merged is not None
    time = merged.summary.time
    assert time.step_s_median == pytest.approx(0.5)
    assert time.step_s_mean == pytest.approx(2.8 / 8)
    assert time.measured_s == pytest.approx(2.8)
    assert time.step_s_p90 == pytest.approx(0.5)
    assert [r.step_s_median for r in merged.summary.ranks] == [pytest.approx(0.1),
                                                                pytest.approx(0.5)]
    # the steady span is one rank's notion: none of it in the job's summary
    assert merged.summary.throughput.steady_samples_per_s is None
    assert merged.summary.steps.slowed_by_others is None
