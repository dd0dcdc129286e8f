"""Real torchrun jobs (gloo on the CPU, a tiny model, few steps): folders, merge, faults."""

import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

import trainpace.cli as cli
from launched import DEAD_RANK_TIMEOUT_S, kill_job

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("train_ddp.py")
SRC = Path(__file__).resolve().parents[2] / "src"


# the jobs with a rank killed or hung (why: launched.py); healthy jobs keep the default
DEAD_RANK = {"TRAINPACE_DIST_TIMEOUT_S": str(DEAD_RANK_TIMEOUT_S)}


def torchrun(*args, env, timeout=180):
    full = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", **env}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", *args, str(SCRIPT)],
                          env=full, capture_output=True, text=True, timeout=timeout, check=False)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measured(folder, warmup=2):
    """(samples, seconds) over a rank's measured steps, from its steps.jsonl."""
    steps = [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines()]
    kept = [s for s in steps if s["step"] > warmup]
    return sum(s["samples"] for s in kept), sum(s["step_s"] for s in kept), len(steps)


def median_step_s(folder, warmup=2):
    steps = [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines()]
    return statistics.median(s["step_s"] for s in steps if s["step"] > warmup)


def report_json(path, capsys):
    assert cli.main(["report", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def findings(summary):
    return {f["id"]: f for f in summary["diagnosis"]["findings"]}


def test_two_ranks_one_slowed_by_its_data_is_the_straggler(tmp_path, capsys):
    out = tmp_path / "run"
    done = torchrun("--standalone", "--nproc-per-node=2",
                    env={"OUT": str(out), "STEPS": "30", "SLOW_RANK": "1", "DELAY_S": "0.03",
                         "STALL_EVERY": "7", "STALL_S": "0.15"})
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        meta = json.loads((out / f"rank{rank}" / "meta.json").read_text())
        assert (meta["rank"], meta["world_size"], meta["local_rank"]) == (rank, 2, rank)
        assert measured(out / f"rank{rank}")[2] == 30  # every step once, in its own folder
    merged = json.loads((out / "summary.json").read_text())
    assert merged["world_size"] == 2
    (s0, t0, _), (s1, t1, _) = measured(out / "rank0"), measured(out / "rank1")
    assert merged["throughput"]["samples_per_s"] == pytest.approx((s0 + s1) / max(t0, t1), rel=1e-9)
    assert merged["diagnosis"]["bottleneck"] == "straggler"
    e = findings(merged)["straggler"]["evidence"]
    assert (e["rank"], e["host"], e["cause"]) == (1, socket.gethostname(), "data_wait")
    assert e["relative_score"] < 0.9
    assert [r["rank"] for r in merged["ranks"]] == [0, 1]
    assert merged["ranks"][1]["wait_pct"] > merged["ranks"][0]["wait_pct"] + 10
    wait = findings(merged).get("data_wait")  # the mean wait: rank 1's, and it says so
    assert wait is None or wait["evidence"]["concentrated_on_rank"] == 1
    # the all-reduce makes both ranks' step times equal: the job's steps are those of the rank
    # the other waits for, rank 1's, and the findings read from them say so
    meta = json.loads((out / "meta.json").read_text())
    assert meta["dist"]["steps_rank"] == 1
    assert merged["time"]["step_s_median"] == pytest.approx(median_step_s(out / "rank1"))
    cores = len(os.sched_getaffinity(0))
    assert meta["hosts"] == [{"host": socket.gethostname(), "ranks": 2, "cpu_count": cores}]
    assert meta["cpu_count"] == cores and meta["made_by"] == "meter"
    # its loader stalls every 7th batch: on its steps the stalls are in the data wait (rank
    # 0's steps show the same stalls, spent in the all-reduce: no cause)
    stall = findings(merged)["periodic_stall"]
    assert (stall["evidence"]["period_steps"], stall["evidence"]["cause"]) == (7, "data_wait")
    assert stall["evidence"]["steps_rank"] == 1 and stall["title"].endswith("(on rank 1's steps)")
    # the same, merged afterwards from the rank folders alone
    shutil.copytree(out / "rank0", tmp_path / "gathered" / "rank0")
    shutil.copytree(out / "rank1", tmp_path / "gathered" / "rank1")
    again = report_json(tmp_path / "gathered", capsys)
    assert again["throughput"]["samples_per_s"] == pytest.approx(merged["throughput"]["samples_per_s"])
    assert findings(again)["straggler"]["evidence"]["rank"] == 1
    assert again["time"]["step_s_median"] == merged["time"]["step_s_median"]
    assert findings(again)["periodic_stall"]["evidence"]["steps_rank"] == 1


def test_the_jobs_window_reaches_rank_0s_dashboards_before_its_next_boundary(tmp_path):
    # Rank 0 stops two steps after each window's last step until the job's window is shown:
    # were the other rank's record read only at rank 0's next boundary, it would never come
    # (rank 0 holds that boundary back) and the wait would run out.
    out = tmp_path / "run"
    done = torchrun("--standalone", "--nproc-per-node=2",
                    env={"OUT": str(out), "STEPS": "16", "AWAIT_JOB_WINDOWS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads((out / "job_windows.json").read_text())
    assert seen["awaited"] == [[5, True], [10, True]]
    assert seen["shown"][:2] == [5, 10]


def test_a_rank_slow_in_compute_is_seen_through_the_comm_hook(tmp_path):
    out = tmp_path / "run"
    done = torchrun("--standalone", "--nproc-per-node=2",
                    env={"OUT": str(out), "STEPS": "30", "COMPUTE_RANK": "0", "COMPUTE_S": "0.03",
                         "WATCH_DDP": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    merged = json.loads((out / "summary.json").read_text())
    r0, r1 = merged["ranks"]
    # the all-reduce made their step times equal; the time before it did not
    assert r0["step_s_median"] == pytest.approx(r1["step_s_median"], rel=0.25)
    assert r0["pre_collective_pct"] > r1["pre_collective_pct"] + 30
    assert r1["communication_pct"] > r0["communication_pct"]  # rank 1 waits in the exchange
    e = findings(merged)["straggler"]["evidence"]
    assert (e["rank"], e["cause"], e["score_source"]) == (0, "compute", "comm_hook")
    assert merged["communication"]["source"] == "ddp_comm_hook (least-waiting rank)"
    assert merged["communication"]["share_pct"] == pytest.approx(r0["communication_pct"])


def test_four_balanced_ranks_name_no_straggler(tmp_path):
    out = tmp_path / "run"
    # Every rank's step takes 20 ms more than its CPU work, as a device's would: the ranks are
    # balanced whatever else the machine runs (4 CPU-bound ranks on 2 shared cores are not).
    done = torchrun("--standalone", "--nproc-per-node=4",
                    env={"OUT": str(out), "STEPS": "25", "COMPUTE_RANK": "all",
                         "COMPUTE_S": "0.02"})
    assert done.returncode == 0, done.stderr[-3000:]
    merged = json.loads((out / "summary.json").read_text())
    assert merged["world_size"] == 4
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["rank0", "rank1", "rank2", "rank3"]
    totals = [measured(out / f"rank{r}") for r in range(4)]
    expected = sum(s for s, _, _ in totals) / max(t for _, t, _ in totals)
    assert merged["throughput"]["samples_per_s"] == pytest.approx(expected, rel=1e-9)
    assert "straggler" not in findings(merged)
    assert merged["dist"]["missing"] == []


def test_a_rank_killed_with_sigkill_is_named_and_the_folder_reads(tmp_path, capsys):
    out = tmp_path / "run"
    # No collective in this job, and rank 0 lets the launcher's SIGTERM (sent when it sees the
    # dead worker) pass, as a script that checkpoints on SIGTERM does: it trains on to its end.
    done = torchrun("--standalone", "--nproc-per-node=2",
                    env={"OUT": str(out), "STEPS": "40", "DDP": "0", "KILL_RANK": "1",
                         "KILL_STEP": "23", "STEP_SLEEP_S": "0.02", "IGNORE_SIGTERM": "1",
                         **DEAD_RANK})
    assert done.returncode != 0  # the launcher reports the killed worker
    merged = json.loads((out / "summary.json").read_text())
    [gone] = merged["dist"]["missing"]
    assert gone["rank"] == 1 and gone["reason"] == "ended early (no final window)"
    # 22 steps closed before the kill (step 23 closes at a fetch that never comes); the writer
    # had them by half windows, so at most one window (5) is lost, however fast it wrote
    assert 17 <= gone["last_step"] <= 22 and gone["last_seen_unix"] is not None
    assert measured(out / "rank0")[2] == 40  # the survivor's folder is complete
    assert json.loads((out / "rank0" / "meta.json").read_text())["finished_at"] is not None
    read = report_json(out, capsys)
    assert findings(read)["ranks_missing"]["evidence"]["missing"][0]["rank"] == 1


def test_a_hung_rank_does_not_hang_rank0s_monitoring(tmp_path):
    out = tmp_path / "run"
    full = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", **DEAD_RANK,
            "OUT": str(out), "STEPS": "30", "DDP": "0",
            "HANG_RANK": "1", "HANG_STEP": "12", "STEP_SLEEP_S": "0.02"}
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            "--nproc-per-node=2", str(SCRIPT)], env=full, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 150
        merged_meta = out / "meta.json"  # the merged run's: finished once rank 0 gave up waiting
        while time.monotonic() < deadline:
            if merged_meta.exists() and json.loads(merged_meta.read_text()).get("finished_at"):
                break
            time.sleep(0.5)
        merged = json.loads((out / "summary.json").read_text())
        [gone] = merged["dist"]["missing"]
        # 12 steps closed before the hang: the job's summary names the furthest the rank got
        # in what it wrote, at least its last window's end (10) and at most its last step
        # (the writer takes every step but the newest at its looks, the newest too at a half
        # window); which, depends on when the writer last looked
        assert gone["rank"] == 1 and 10 <= gone["last_step"] <= 12
        assert measured(out / "rank0")[2] == 30
        assert job.poll() is None  # rank 1 still hangs; rank 0 finished without it
    finally:
        kill_job(job)


def test_two_nodes_each_write_their_own_folder_and_merge_through_their_leaders(tmp_path, capsys):
    # 2 nodes × 2 ranks, the two-level merge forced (it starts past 64 ranks): rank 2 leads node 1
    port = free_port()
    common = ["--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
              f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=tp-two-nodes"]
    full = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "STEPS": "20",
            "TRAINPACE_DIST_FLAT_MAX_RANKS": "2"}
    agents = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *common,
                                f"--node-rank={node}", str(SCRIPT)],
                               env={**full, "OUT": str(tmp_path / f"node{node}" / "run")},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for node in (0, 1)]
    results = [a.communicate(timeout=240) for a in agents]
    assert [a.returncode for a in agents] == [0, 0], [err[-2000:] for _, err in results]
    node0, node1 = tmp_path / "node0" / "run", tmp_path / "node1" / "run"
    assert sorted(p.name for p in node0.iterdir() if p.is_dir()) == ["rank0", "rank1"]
    assert sorted(p.name for p in node1.iterdir() if p.is_dir()) == ["rank2", "rank3"]
    meta2 = json.loads((node1 / "rank2" / "meta.json").read_text())
    assert (meta2["rank"], meta2["node"], meta2["world_size"]) == (2, 1, 4)
    merged = json.loads((node0 / "summary.json").read_text())  # rank 0 merged both nodes live
    assert [(r["rank"], r["node"]) for r in merged["ranks"]] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    totals = [measured(folder / f"rank{r}") for folder, r in
              ((node0, 0), (node0, 1), (node1, 2), (node1, 3))]
    assert merged["throughput"]["samples_per_s"] == pytest.approx(
        sum(s for s, _, _ in totals) / max(t for _, t, _ in totals), rel=1e-9)
    meta = json.loads((node0 / "meta.json").read_text())
    assert meta["dist"]["merge"]["levels"] == 2 and meta["dist"]["missing"] == []
    # the report of node 0's folder alone says which rank folders are elsewhere
    alone = report_json(node0, capsys)
    assert alone["world_size"] == 4 and len(alone["ranks"]) == 4


def exit_codes(launcher_log):
    """Each failed rank's exit code, from torchrun's failure summary."""
    found = re.findall(r"rank\s+: (\d+) \(local_rank: \d+\)\n\s+exitcode\s+: (-?\d+)",
                       launcher_log)
    return {int(rank): int(code) for rank, code in found}


@pytest.mark.parametrize("with_block", ["0", "1"])
def test_a_rank_killed_mid_collective_the_survivor_still_reports(tmp_path, with_block):
    """Rank 1 SIGKILLed: rank 0 fails in the all-reduce and torchrun SIGTERMs it ~70 ms later,
    inside the Meter's end (``with meter:``) or its exit hook (no ``with``)."""
    out = tmp_path / "run"
    done = torchrun("--standalone", "--nproc-per-node=2",
                    env={"OUT": str(out), "STEPS": "200", "KILL_RANK": "1", "KILL_STEP": "23",
                         "STEP_SLEEP_S": "0.005", "WITH_METER": with_block, **DEAD_RANK})
    dead_last = measured(out / "rank1")[2]  # its steps on disk (a window may be lost)
    assert 17 <= dead_last <= 22  # of the 22 it closed, at most one window (5) lost
    survivor = measured(out / "rank0")[2]
    own = json.loads((out / "rank0" / "summary.json").read_text())
    assert own["steps"]["total"] == survivor  # as new as its steps
    merged = json.loads((out / "summary.json").read_text())
    [gone] = merged["dist"]["missing"]
    assert (gone["rank"], gone["last_step"]) == (1, dead_last)
    assert "ranks did not report to the end: rank 1" in done.stderr  # rank 0's report
    # the report first; then the SIGTERM took its course, as it would have without trainpace
    assert exit_codes(done.stderr) == {0: -15, 1: -9}
