"""Dashboards under DDP: a real torchrun job of 2 ranks (gloo on the CPU) shows the job once,
from rank 0, with the job's figures: one TensorBoard event file with one point per tag and
step, one W&B run whose summary is the report's, one MLflow run, one Prometheus exporter."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                                           "ignore::FutureWarning")]

SCRIPT = Path(__file__).with_name("ddp_dashboards.py")
SRC = Path(__file__).resolve().parents[2] / "src"
WINDOW, WARMUP, STEPS = 5, 2, 30


def torchrun(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get(
        "PYTHONPATH", "")]), "OMP_NUM_THREADS": "1", "TRAINPACE_DIST_TIMEOUT_S": "10",
        "OUT": str(tmp_path / "run"), "STEPS": str(STEPS), "DELAY_S": "0.01", **env}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node=2", str(SCRIPT)], env=full, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def steps_of(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines()]


def truth(run: Path) -> dict[int, dict]:
    """Per window (by its last step): Σ samples over ranks / the slowest rank's seconds,
    and each rank's own samples/s, from the ranks' steps.jsonl."""
    ranks = {r: steps_of(run / f"rank{r}") for r in (0, 1)}
    out = {}
    for last in range(WINDOW, STEPS + 1, WINDOW):
        own = {}
        for r, steps in ranks.items():
            kept = [s for s in steps if last - WINDOW < s["step"] <= last and s["step"] > WARMUP]
            own[r] = (sum(s["samples"] for s in kept), sum(s["step_s"] for s in kept))
        slowest_s = max(seconds for _, seconds in own.values())
        out[last] = {"job": sum(n for n, _ in own.values()) / slowest_s,
                     **{r: n / seconds for r, (n, seconds) in own.items()}}
    return out


def scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_tensorboard_wandb_and_prometheus_show_the_job_once_from_rank_0(tmp_path):
    pytest.importorskip("tensorboard")
    pytest.importorskip("prometheus_client")
    pytest.importorskip("wandb")
    from prometheus_client.parser import text_string_to_metric_families
    from test_wandb import read_run

    port = free_port()
    done = torchrun(tmp_path, TB=str(tmp_path / "tb"), WANDB="1", PROM_PORT=str(port),
                    SCRAPE_FILE=str(tmp_path / "scrape.txt"), WANDB_MODE="offline",
                    WANDB_DIR=str(tmp_path), WANDB_SILENT="true", WANDB_PROJECT="tp-ddp")
    run = tmp_path / "run"
    expected = truth(run)
    merged = json.loads((run / "summary.json").read_text())

    # TensorBoard: one event file (rank 0's), one point per tag and step, the job's figures
    assert len(list((tmp_path / "tb").rglob("events.out.tfevents.*"))) == 1
    points = scalars(tmp_path / "tb")
    for tag, series in points.items():
        assert len({step for step, _ in series}) == len(series), tag  # nothing interleaved
    samples = dict(points["trainpace/throughput/samples_per_s"])
    assert sorted(samples) == list(expected)
    for last, value in samples.items():
        assert value == pytest.approx(expected[last]["job"], rel=1e-6)
    assert dict(points["trainpace/job/ranks_reporting"]) == dict.fromkeys(expected, 2.0)
    assert not any(tag.startswith("trainpace/rank") for tag in points)  # not asked for

    # W&B: one run; its summary's samples/s is the job's (the report's)
    (wandb_file,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    history, final = read_run(wandb_file)
    assert final["trainpace/throughput/samples_per_s"] == pytest.approx(
        merged["throughput"]["samples_per_s"], rel=1e-9)
    rows = {row["trainpace/step"]: row["trainpace/throughput/samples_per_s"]
            for row in history if "trainpace/throughput/samples_per_s" in row}
    assert sorted(rows) == list(expected)
    assert all(rows[last] == pytest.approx(expected[last]["job"], rel=1e-9) for last in rows)

    # Prometheus: rank 0's exporter served a merged window under rank="job"
    text = (tmp_path / "scrape.txt").read_text()
    found = {(s.name, s.labels.get("rank")): s.value
             for family in text_string_to_metric_families(text) for s in family.samples}
    step = int(found[("trainpace_step", "job")])
    assert found[("trainpace_throughput_samples_per_s", "job")] == pytest.approx(
        expected[step]["job"], rel=1e-9)
    assert {rank for _, rank in found} == {"job"}

    # the console line: the job's, at rank 0 only
    lines = [line for line in done.stderr.splitlines() if " samples/s" in line
             and line.lstrip().startswith(("job", "[rank", "step", "rank"))]
    job_lines = [line for line in lines if "job, 2 ranks | step" in line]
    assert len(job_lines) == len(expected), done.stderr[-3000:]
    assert len(lines) == len(job_lines)


def test_mlflow_shows_one_run_and_each_rank_under_its_rank_tags(tmp_path):
    pytest.importorskip("sqlalchemy", reason="the [mlflow] extra's sqlite store")
    pytest.importorskip("alembic", reason="the [mlflow] extra's sqlite store")
    mlflow = pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    torchrun(tmp_path, MLFLOW="1", MLFLOW_TRACKING_URI=uri, RANK_FIGURES="1",
             TB=str(tmp_path / "tb"))
    run = tmp_path / "run"
    expected = truth(run)
    merged = json.loads((run / "summary.json").read_text())
    client = mlflow.tracking.MlflowClient(uri)
    (only,) = client.search_runs(["0"])

    def history(key):
        return sorted((m.step, m.value) for m in client.get_metric_history(only.info.run_id, key))

    # a point per window, and at the last step the job's figure over the run too
    job = history("trainpace/throughput/samples_per_s")
    assert sorted(step for step, _ in job) == [*expected, STEPS]
    want = [(step, expected[step]["job"]) for step in expected]
    want.append((STEPS, merged["throughput"]["samples_per_s"]))
    assert [value for _, value in job] == pytest.approx([v for _, v in sorted(want)], rel=1e-9)
    for rank in (0, 1):
        own = history(f"trainpace/rank{rank}/throughput/samples_per_s")
        assert [step for step, _ in own] == list(expected)
        assert all(value == pytest.approx(expected[step][rank], rel=1e-9) for step, value in own)
    # the same rank tags in TensorBoard, one point per step
    points = scalars(tmp_path / "tb")
    assert [s for s, _ in points["trainpace/rank1/throughput/samples_per_s"]] == list(expected)
