"""The W&B sink, in offline mode, read back from the run's own ``.wandb`` file."""

import json
import logging
import struct
import time
from pathlib import Path

import pytest
import torch

import trainpace

wandb = pytest.importorskip("wandb")
from google.protobuf.message import DecodeError  # noqa: E402
from wandb.proto import wandb_internal_pb2  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BLOCK = 32768  # the .wandb file is a LevelDB-style log: 32 KiB blocks of framed chunks
FRAME = 7  # crc32 (4), length (2), type (1)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_run(path: Path, timeout_s: float = 30.0) -> tuple[list[dict], dict]:
    """History rows and the summary of one finished offline run.

    wandb-core may still be writing the file when ``finish()`` returns: it is read again
    until it holds the run's exit record (bounded).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            kinds, history, summary = _read(path)
        except DecodeError:  # a record cut where wandb-core is still writing
            if time.monotonic() > deadline:
                raise
        else:
            if "exit" in kinds or time.monotonic() > deadline:
                return history, summary
        time.sleep(0.05)


def _read(path: Path) -> tuple[set[str], list[dict], dict]:
    kinds, history, summary = set(), [], {}
    for record in _records(path):
        kind = record.WhichOneof("record_type")
        kinds.add(kind)
        if kind == "history":
            history.append({_key(item): json.loads(item.value_json) for item in record.history.item})
        elif kind == "summary":
            summary.update({_key(item): json.loads(item.value_json)
                            for item in record.summary.update})
    return kinds, history, summary


def _records(path: Path) -> list:
    """The protobuf records of a ``.wandb`` file, as far as they are written."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, pending, raws = FRAME, b"", []
    while pos + FRAME <= len(data):
        if BLOCK - pos % BLOCK < FRAME:  # a block's tail too short for a frame is padding
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + FRAME])
        if pos + FRAME + length > len(data):
            break  # a frame still being written: read again later
        chunk = data[pos + FRAME:pos + FRAME + length]
        pos += FRAME + length
        if kind == FULL:
            raws.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            raws.append(pending + chunk)
        elif kind == 0:
            break
    records = []
    for raw in raws:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        records.append(record)
    return records


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)  # a key holding "/" may come split


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_PROJECT", "trainpace-test")
    wandb.teardown()  # wandb reads its settings (WANDB_DIR) once per setup
    yield tmp_path
    if wandb.run is not None:
        wandb.run.finish()
    wandb.teardown()


def run_file(root: Path) -> Path:
    (found,) = root.glob("wandb/offline-run-*/run-*.wandb")
    return found


def metered_run(clock, **kwargs) -> trainpace.Summary:
    meter = trainpace.Meter(window=10, clock=clock, console=False, report=False,
                            count_flops=False, warmup=0, **kwargs)
    for batch in meter.loader([torch.zeros(8, 2)] * 30):
        with meter.step(batch):
            clock.advance(0.02)
            meter.observe(loss=1.5)
    return meter.finish()


def test_windows_are_history_rows_and_the_summary_is_the_runs(offline, clock):
    summary = metered_run(clock, wandb=True, run_id="wb-test")
    assert wandb.run is None  # the sink started the run, so it finished it
    history, final = read_run(run_file(offline))
    rows = [row for row in history if "trainpace/throughput/samples_per_s" in row]
    assert [row["trainpace/step"] for row in rows] == [10, 20, 30]
    assert [row["trainpace/throughput/samples_per_s"] for row in rows] == pytest.approx([400.0] * 3)
    assert [row["trainpace/time/step_median_ms"] for row in rows] == pytest.approx([20.0] * 3)
    assert [row["trainpace/loss/window_mean"] for row in rows] == pytest.approx([1.5] * 3)
    assert all("trainpace/throughput/tokens_per_s" not in row for row in rows)  # not measured: no point
    assert final["trainpace/throughput/samples_per_s"] == pytest.approx(summary.throughput.samples_per_s)
    assert final["trainpace/time/wall_s"] == pytest.approx(0.6)
    assert final["trainpace/diagnosis/bottleneck"] == summary.diagnosis.bottleneck


def test_logs_into_the_active_run_and_leaves_it_open(offline, clock):
    run = wandb.init(project="mine")
    run.log({"user/metric": 1.0})
    metered_run(clock, wandb=True)
    assert wandb.run is run  # not ours to finish
    run.log({"user/metric": 2.0})
    run.finish()
    history, final = read_run(run_file(offline))
    assert [row["user/metric"] for row in history if "user/metric" in row] == [1.0, 2.0]
    assert [row["trainpace/step"] for row in history if "trainpace/step" in row] == [10, 20, 30]
    assert final["trainpace/throughput/samples_per_s"] == pytest.approx(400.0)


def test_a_run_object_is_logged_into(offline, clock):
    run = wandb.init(project="mine")
    metered_run(clock, wandb=run)
    run.finish()
    history, _ = read_run(run_file(offline))
    assert [row["trainpace/step"] for row in history if "trainpace/step" in row] == [10, 20, 30]


def test_the_exit_ends_the_run_it_started_and_ignores_what_comes_after(offline):
    from trainpace.runlog import Record
    from trainpace.sinks.wandb import WandbSink

    sink = WandbSink()
    sink.log(Record("meta", {"run_id": "r1", "world_size": 1}, 0))
    started = sink.run
    sink._end_at_exit()  # what the interpreter's exit calls for a run never closed
    sink.log(Record("meta", {"run_id": "r1"}, 0))  # too late: no run is started again
    assert sink.run is started and wandb.run is None
    history, _ = read_run(run_file(offline))
    kinds, _, _ = _read(run_file(offline))
    assert "exit" in kinds and history == []  # ended whole; nothing logged after the exit


def test_the_exit_leaves_the_users_run_open(offline, clock):
    from trainpace.sinks.wandb import WandbSink

    run = wandb.init(project="mine")
    sink = WandbSink()
    sink._end_at_exit()
    assert wandb.run is run  # the user's, finished by the user (or wandb's own exit)
    run.log({"user/metric": 1.0})
    run.finish()
    history, _ = read_run(run_file(offline))
    assert [row["user/metric"] for row in history] == [1.0]


class BrokenRun:
    """A run whose server went away after the run was set up."""

    def __init__(self):
        self.calls = 0

    def define_metric(self, *args, **kwargs):
        pass

    @property
    def config(self):
        return self

    def update(self, *args, **kwargs):
        pass

    def log(self, row):
        self.calls += 1
        raise ConnectionError("server gone")


def test_a_failing_run_is_dropped_with_one_warning_and_training_goes_on(clock, caplog):
    run = BrokenRun()
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        summary = metered_run(clock, wandb=run)
    assert summary.steps.total == 30
    assert run.calls == 1  # dropped at the first failure: no retries
    warnings = [r for r in caplog.records if "W&B" in r.getMessage()]
    assert len(warnings) == 1 and "dropped" in warnings[0].getMessage()


def test_a_bad_value_is_a_config_error():
    with pytest.raises(trainpace.ConfigError, match="wandb must be True or a W&B run object"):
        trainpace.Meter(wandb="yes", console=False)


UNREACHABLE = """
import sys, time
import torch, trainpace, wandb
meter = trainpace.Meter(window=5, console=False, report=False, count_flops=False, wandb=True,
                        sink_timeout_s=1.0)
print("constructed, run", wandb.run, flush=True)
for b in meter.loader([torch.zeros(8, 2)] * 10):
    with meter.step(b):
        pass
print("stepped", flush=True)
summary = meter.finish()
print("finished", summary.steps.total, flush=True)
"""


def unreachable_server(tmp_path):
    """The environment of a script logging online to a closed local port."""
    import os
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    src = str(Path(trainpace.__file__).resolve().parents[1])
    return dict(os.environ, WANDB_MODE="online", WANDB_BASE_URL=f"http://127.0.0.1:{port}",
                WANDB_API_KEY="x" * 40, WANDB_DIR=str(tmp_path), WANDB_SILENT="true",
                PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))


@pytest.mark.slow
def test_an_unreachable_server_never_holds_the_training(tmp_path):
    """wandb.init() online against a closed local port waits for over a minute: the Meter is
    made, steps and finishes meanwhile (the run is started on the sink's thread)."""
    import subprocess
    import sys
    import threading

    process = subprocess.Popen([sys.executable, "-c", UNREACHABLE],
                               env=unreachable_server(tmp_path), cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    # Bare wandb.init() here blocks for 102 s: a training still held after 60 s fails.
    bound = threading.Timer(60, process.kill)
    bound.start()
    try:
        lines = [process.stdout.readline().strip() for _ in range(3)]
    finally:
        bound.cancel()  # wandb's own exit waits on its server; the training is what is tested here
        process.kill()
        process.wait()
        process.stdout.close()
    assert lines == ["constructed, run None", "stepped", "finished 10"]


@pytest.mark.slow
def test_an_unreachable_server_never_holds_the_exit(tmp_path):
    """The run the sink started cannot finish: wandb's own exit hook would wait for its
    service for about 90 s more; the process ends within sink_timeout_s of its own ending."""
    import subprocess
    import sys

    started_s = time.monotonic()
    done = subprocess.run([sys.executable, "-c", UNREACHABLE], env=unreachable_server(tmp_path),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    took_s = time.monotonic() - started_s
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "finished 10"
    assert took_s < 60, f"the process took {took_s:.0f} s to exit"  # ~95 s before, ~8 s now


NO_FINISH = """
import sys
import torch, trainpace
meter = trainpace.Meter(out="run", window=5, console=False, report=False, count_flops=False,
                        wandb=True, sink_timeout_s=60)
for b in meter.loader([torch.zeros(8, 2)] * int(sys.argv[1])):
    with meter.step(b):
        pass
print("the script ends without meter.finish()", flush=True)
"""


@pytest.mark.slow
def test_a_run_never_finished_exits_cleanly_with_its_run_complete(tmp_path):
    """The docs' W&B example once exited -6 ("FATAL: exception not rethrown": the sink's thread
    was still inside wandb.init when the interpreter finalized, and was unwound by force). A
    Meter left without finish() must exit 0, every time, and a run the sink began is ended
    whole (the exit record): right after the Meter is made (the run still starting, or not
    begun when the exit came first) and after steps."""
    import os
    import signal
    import subprocess
    import sys

    src = str(Path(trainpace.__file__).resolve().parents[1])
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", WANDB_PROJECT="trainpace-test",
               PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    jobs = []
    for i, steps in enumerate([0, 0, 12, 12]):
        folder = tmp_path / f"exit{i}"
        folder.mkdir()
        err = (folder / "stderr.txt").open("w")
        jobs.append((folder, err, subprocess.Popen(
            [sys.executable, "-c", NO_FINISH, str(steps)], cwd=folder,
            env={**env, "WANDB_DIR": str(folder)}, stdout=subprocess.PIPE, stderr=err, text=True,
            start_new_session=True)))
    try:
        # Four at once on two cores, each starting W&B's service: the sink is given a minute
        # at exit (default 5 s) to end the run whole however slowly the service started.
        for folder, err, job in jobs:
            out, _ = job.communicate(timeout=150)
            err.close()
            stderr = (folder / "stderr.txt").read_text()
            assert job.returncode == 0, stderr
            assert "FATAL" not in stderr and "Traceback" not in stderr, stderr
            assert out.strip() == "the script ends without meter.finish()"
            assert (folder / "run" / "meta.json").exists()
            if not list(folder.glob("wandb/offline-run-*/run-*.wandb")):
                # the exit came before the sink's thread began wandb.init: nothing was
                # started, so nothing is left half-done (no sink is waited for at exit)
                continue
            kinds = {r.WhichOneof("record_type") for r in _records(run_file(folder))}
            assert {"run", "config", "exit"} <= kinds  # started, its setup, ended whole
            configs = [item.key for r in _records(run_file(folder))
                       if r.WhichOneof("record_type") == "config" for item in r.config.update]
            assert "trainpace" in configs  # meta.json's setup reached the run
    finally:
        for _, err, job in jobs:  # a job left running (a failed assert): its whole group ends
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
            err.close()
