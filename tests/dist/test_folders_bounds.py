"""A distributed run folder read back: never a stale summary, never a list of every rank
number a damaged folder claims (issue 26)."""

import json

import pytest

from dist.fakes import write_rank
from trainpace.cli import main
from trainpace.dist.folders import MAX_WORLD_SIZE, read_distributed
from trainpace.summary import Steps, Summary, Time


def _stale_rank0(run, steps=49):
    """Rank 0 died first: its summary.json from its last window, its steps up to there."""
    write_rank(run, 0, [0.00820] * steps, [0.0] * steps, world=4, finished=False, window=7)
    stale = Summary(run_id="run", steps=Steps(total=steps, warmup=0, measured=steps),
                    time=Time(wall_s=0.402))
    (run / "rank0" / "summary.json").write_text(json.dumps(stale.to_dict()))


def test_rank0_died_first_its_stale_summary_is_not_the_job_s(tmp_path):
    run = tmp_path / "run"
    _stale_rank0(run)
    for rank in (1, 2, 3):
        write_rank(run, rank, [0.01] * 1500, [0.0] * 1500, world=4, window=100)
    merged = read_distributed(run)
    assert merged is not None
    assert merged.summary.steps.total == 1500  # the furthest rank's, not rank 0's 49
    assert merged.summary.time.wall_s != 0.402
    assert ("rank 0 ended early at step 49 (no final record; the furthest rank reached step "
            "1500): its figures cover its steps only") in merged.notes
    assert merged.summary.world_size == 4
    assert len(merged.series) == 1500  # the diagnosis reads the steps the figures come from


def test_report_of_that_job_names_the_rank_that_died(tmp_path, capsys):
    run = tmp_path / "run"
    _stale_rank0(run)
    for rank in (1, 2, 3):
        write_rank(run, rank, [0.01] * 300, [0.0] * 300, world=4, window=100)
    assert main(["report", str(run), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["steps"]["total"] == 300
    assert "rank 0 ended early at step 49" in captured.err


def test_a_stale_summary_of_a_single_rank_is_rebuilt_from_its_steps(tmp_path):
    run = tmp_path / "run"
    write_rank(run, 0, [0.1] * 8, [0.0] * 8, world=1)
    stale = Summary(run_id="run", steps=Steps(total=3, warmup=0, measured=3))
    (run / "rank0" / "summary.json").write_text(json.dumps(stale.to_dict()))
    merged = read_distributed(run)
    assert merged is not None and merged.summary.steps.total == 8


def test_a_huge_rank_number_is_left_out_by_name(tmp_path):
    run = tmp_path / "run"
    write_rank(run, 0, [0.1] * 4, [0.0] * 4, world=1)
    (run / "rank999999999999").mkdir()
    merged = read_distributed(run)
    assert merged is not None
    assert merged.summary.world_size == 1
    assert (f"rank999999999999: left out (a rank number beyond {MAX_WORLD_SIZE:,} is not a real "
            "rank's)") in merged.notes


def test_a_huge_world_size_in_meta_is_left_out_by_name(tmp_path):
    run = tmp_path / "run"
    write_rank(run, 0, [0.1] * 4, [0.0] * 4, world=10**12)
    merged = read_distributed(run)
    assert merged is not None and merged.summary.world_size == 1
    assert any(n.startswith("rank0/meta.json: world_size 1000000000000 left out")
               for n in merged.notes)


def test_many_absent_ranks_are_counted_not_listed(tmp_path):
    run = tmp_path / "run"
    write_rank(run, 0, [0.1] * 4, [0.0] * 4, world=MAX_WORLD_SIZE)
    merged = read_distributed(run)
    assert merged is not None
    assert merged.summary.world_size == MAX_WORLD_SIZE
    assert merged.meta["dist"]["missing"] == []  # the absent ranks are in the note, as a range
    assert (f"rank folders of ranks 1-{MAX_WORLD_SIZE - 1} are not in {run} (other nodes write "
            "theirs locally: copy them here to merge them)") in merged.notes


def test_each_window_takes_the_sampler_rows_of_its_own_time(tmp_path):
    run = tmp_path / "run"
    # 8 steps in windows of 2: 4 windows, enough not to be replayed in shorter ones
    write_rank(run, 0, [0.1] * 8, [0.0] * 8, world=1, window=2)
    rows = [{"t_s": t, "device_util_pct": u, "host": {"system_cpu_pct": u / 2}}
            for t, u in ((0.75, 40.0), (0.05, 10.0), (0.65, 30.0), (0.15, 20.0))]  # any order
    (run / "rank0" / "system.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    merged = read_distributed(run)
    assert merged is not None
    [rank0] = merged.meta["dist"]["ranks"]
    assert rank0["util_pct"] == 35.0  # the last window, t 0.6-0.8 s: rows of 30 and 40
    assert rank0["system_cpu_pct"] == 17.5


def test_a_long_rank_is_merged_a_window_at_a_time(tmp_path):
    run = tmp_path / "run"
    steps = 20_000
    write_rank(run, 0, [0.01] * steps, [0.0] * steps, world=2, window=10)
    write_rank(run, 1, [0.01] * steps, [0.001] * steps, world=2, window=10)
    rows = "".join(json.dumps({"t_s": 0.01 * i, "device_util_pct": 50.0}) + "\n"
                   for i in range(0, steps, 2))  # 10k rows: per window, only its own are read
    for rank in (0, 1):
        (run / f"rank{rank}" / "system.jsonl").write_text(rows)
    merged = read_distributed(run)
    assert merged is not None
    assert merged.meta["dist"]["windows_scored"] == steps // 10
    assert merged.summary.throughput.samples_per_s == pytest.approx(2 * 4 * steps / (0.01 * steps))


def test_ranks_still_running_together_are_not_called_dead(tmp_path):
    run = tmp_path / "run"
    for rank in (0, 1):
        write_rank(run, rank, [0.1] * 8, [0.0] * 8, world=2, finished=False)
    merged = read_distributed(run)
    assert merged is not None
    assert not any("ended early" in note for note in merged.notes)
