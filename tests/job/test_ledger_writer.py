"""The job ledger as the Meter writes it: each event with exactly its keys, when it happens."""

import errno
import io
import logging
import os

import orjson
import pytest
import torch

import trainpace
import trainpace.sinks.ledger as ledger_sink
from trainpace.job.events import COMMON_KEYS, EVENT_KEYS, LEDGER_FILE, SCHEMA
from trainpace.meter.ledger import JobLedger
from trainpace.meter.log_once import LogOnce
from trainpace.sinks.ledger import PROGRESS_FILE, ProgressMap, read_progress


def events(folder):
    return [orjson.loads(line) for line in (folder / LEDGER_FILE).read_bytes().splitlines()]


def quiet_meter(folder, clock, **settings):
    return trainpace.Meter(folder, clock=clock, console=False, report=False, window=3,
                           count_flops=False, **settings)


def train(meter, clock, steps, step_s=0.25):
    for batch in meter.loader([torch.ones(2, 1)] * steps):
        with meter.step(batch):
            clock.advance(step_s)


def test_a_run_writes_its_events_in_order_each_with_exactly_its_keys(tmp_path, clock):
    meter = quiet_meter(tmp_path / "job", clock)
    clock.advance(2.0)  # set-up before the first step
    train(meter, clock, 7)
    meter.finish()
    got = events(tmp_path / "job")
    # a few records: a window's steps in steps.jsonl write no progress (steps.jsonl says it)
    assert [(e["event"], e["run"]) for e in got] == [
        ("run_start", 1), ("first_step", 1), ("run_end", 1)]
    for event in got:
        assert list(event) == [*COMMON_KEYS, *EVENT_KEYS[event["event"]]]
        assert event["schema"] == SCHEMA
    start, first, end = got
    assert start["run_id"] == "job" and start["pid"] == os.getpid()
    assert start["world_size"] == 1 and start["process_start_unix_s"] <= start["unix_s"]
    # the run's clock, as Unix seconds: exact differences
    assert end["last_step_end_unix_s"] - first["unix_s"] == pytest.approx(0.25 * 7, abs=1e-6)
    assert (end["status"], end["last_step"], end["signal"]) == ("finished", 7, None)


@pytest.mark.parametrize(("error", "status", "signal"), [
    (RuntimeError("out of memory"), "failed", None),
    (KeyboardInterrupt(), "interrupted", "SIGINT"),
])
def test_run_end_says_how_the_run_ended(tmp_path, clock, error, status, signal):
    with pytest.raises(type(error)), quiet_meter(tmp_path / "job", clock) as meter:
        train(meter, clock, 2)
        raise error
    (end,) = [e for e in events(tmp_path / "job") if e["event"] == "run_end"]
    assert (end["status"], end["last_step"], end["signal"]) == (status, 2, signal)


def test_checkpoints_true_times_saves_and_loads_and_gives_torch_back(tmp_path, clock):
    save, load = torch.save, torch.load
    meter = quiet_meter(tmp_path / "job", clock, checkpoints=True)
    assert torch.save is not save
    train(meter, clock, 2)
    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.ones(3)}, path)
    torch.save({"w": torch.ones(3)}, io.BytesIO())  # a buffer: not a checkpoint
    with open(tmp_path / "other.pt", "wb") as file:  # a file with a name is one
        torch.save({"w": 1}, file)
    torch.load(path)
    torch.load(tmp_path / "other.pt")
    with pytest.raises(FileNotFoundError):
        torch.load(tmp_path / "missing.pt")  # what did not load is not a load
    meter.finish()
    assert (torch.save, torch.load) == (save, load)
    timed = [e for e in events(tmp_path / "job") if e["event"].startswith("checkpoint")]
    assert [(e["event"], e["path"], e["source"]) for e in timed] == [
        ("checkpoint_save", str(path), "torch.save"),
        ("checkpoint_save", str(tmp_path / "other.pt"), "torch.save"),
        ("checkpoint_load", str(path), "torch.load"),
        ("checkpoint_load", str(tmp_path / "other.pt"), "torch.load")]
    assert [e["step"] for e in timed[:2]] == [2, 2]
    assert [(e["saved_by_run"], e["saved_at_step"]) for e in timed[2:]] == [(1, 2), (1, 2)]
    assert all(e["duration_s"] >= 0 for e in timed)


def test_without_checkpoints_torch_is_left_alone(tmp_path, clock):
    save = torch.save
    meter = quiet_meter(tmp_path / "job", clock)
    assert torch.save is save
    torch.save({"w": 1}, tmp_path / "ckpt.pt")
    meter.finish()
    assert not [e for e in events(tmp_path / "job") if e["event"] == "checkpoint_save"]


def test_a_ledger_that_cannot_be_written_is_one_warning_and_the_run_goes_on(
        tmp_path, clock, monkeypatch, caplog):
    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ledger_sink.os, "write", full)
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        meter = quiet_meter(tmp_path / "job", clock)
        train(meter, clock, 7)
        summary = meter.finish()
    assert summary.steps.total == 7
    warnings = [r.getMessage() for r in caplog.records if "job.jsonl" in r.getMessage()]
    assert len(warnings) == 1 and "No space left on device" in warnings[0]


def test_a_killed_runs_last_step_reaches_the_ledger_through_the_next_run(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    first = JobLedger(folder, run_id="job", world_size=1, steps_done=lambda: 0,
                      log_once=LogOnce(), clock=lambda: 10.0)
    first.start()
    assert first.progress_map is not None
    first.progress_map.step(3, 12.5)
    first.progress_map.step(4, 13.0)  # then SIGKILL: nothing more is written
    assert read_progress(folder) == (1, 4, pytest.approx(first.unix(13.0)))
    second = JobLedger(folder, run_id="job", world_size=1, steps_done=lambda: 0,
                       log_once=LogOnce())
    second.start()
    got = events(folder)
    assert [(e["event"], e["run"]) for e in got] == [
        ("run_start", 1), ("progress", 1), ("run_start", 2)]
    assert got[1]["step"] == 4
    assert got[1]["step_end_unix_s"] == pytest.approx(first.unix(13.0))
    assert (second.run, second.run_id) == (2, "job.2")
    assert read_progress(folder) is None  # the map is the new run's now


def test_the_progress_map_keeps_the_last_step_after_it_is_closed(tmp_path):
    progress = ProgressMap(tmp_path, 2, 100.0)
    progress.step(6, 1.25)
    progress.step(7, 1.5)
    progress.close()
    progress.close()  # twice: nothing more to release
    assert read_progress(tmp_path) == (2, 7, 101.5)
    with pytest.raises(ValueError, match="released"):  # the views go with the map
        progress.step(8, 1.75)
    assert read_progress(tmp_path) == (2, 7, 101.5)


def test_the_progress_map_is_never_written_through_a_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / PROGRESS_FILE).symlink_to(victim)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        ProgressMap(tmp_path, 1, 0.0)
    assert victim.read_text() == "precious"


@pytest.mark.filterwarnings("ignore::UserWarning")  # DCP without a process group
def test_distributed_checkpoint_saves_and_loads_are_one_event_each(tmp_path, clock):
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    save, load = dcp.save, dcp.load
    meter = quiet_meter(tmp_path / "job", clock, checkpoints=True)
    state = {"w": torch.ones(4)}
    dcp.save(state, checkpoint_id=tmp_path / "dcp")  # writes through torch.save inside
    dcp.load(state, checkpoint_id=tmp_path / "dcp")
    meter.finish()
    timed = [e for e in events(tmp_path / "job") if e["event"].startswith("checkpoint")]
    assert [(e["event"], e["source"], e["path"]) for e in timed] == [
        ("checkpoint_save", "dcp", str(tmp_path / "dcp")),
        ("checkpoint_load", "dcp", str(tmp_path / "dcp"))]
    assert (timed[1]["saved_by_run"], timed[1]["saved_at_step"]) == (1, 0)
    assert (dcp.save, dcp.load) == (save, load)  # given back


def test_a_map_left_by_an_older_run_says_nothing_of_the_one_killed_before_its_map(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    ProgressMap(folder, 1, 0.0).step(4, 12.0)  # run 1's last step; run 2 made no map
    lines = [{"schema": SCHEMA, "event": "run_start", "run": run, "unix_s": 0.0,
              "run_id": "job", "pid": 0, "host": "h", "argv": [], "world_size": 1,
              "process_start_unix_s": None} for run in (1, 2)]
    (folder / LEDGER_FILE).write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in lines))
    third = JobLedger(folder, run_id="job", world_size=1, steps_done=lambda: 0,
                      log_once=LogOnce())
    third.start()
    assert [(e["event"], e["run"]) for e in events(folder)] == [
        ("run_start", 1), ("run_start", 2), ("run_start", 3)]


LATE_DCP = """
import sys, torch, trainpace
meter = trainpace.Meter(sys.argv[1] + "/job", checkpoints=True, console=False, report=False,
                        count_flops=False)
assert "torch.distributed.checkpoint" not in sys.modules  # (seconds to import: never for us)
import torch.distributed.checkpoint as dcp
dcp.save({"w": torch.ones(2)}, checkpoint_id=sys.argv[1] + "/dcp")
meter.finish()
assert not any(type(f).__name__ == "_AfterImport" for f in sys.meta_path)
"""


@pytest.mark.slow
def test_distributed_checkpoint_imported_after_the_meter_is_timed_too(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(trainpace.__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", LATE_DCP, str(tmp_path)], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=src))
    assert done.returncode == 0, done.stderr
    saves = [e for e in events(tmp_path / "job") if e["event"] == "checkpoint_save"]
    assert [(e["source"], e["path"]) for e in saves] == [("dcp", str(tmp_path / "dcp"))]


def test_an_optimizer_step_is_done_in_the_progress_map_from_that_moment(tmp_path, clock):
    folder = tmp_path / "job"
    folder.mkdir()
    ledger = JobLedger(folder, run_id="job", world_size=1, steps_done=lambda: 3,
                       log_once=LogOnce(), clock=clock)
    ledger.start()
    clock.advance(1.5)
    ledger.optimizer_stepped()  # step 4 is open; its optimizer stepped now
    raw = (folder / PROGRESS_FILE).read_bytes()
    assert ledger_sink.STEP_LAYOUT.unpack_from(raw) == (4, 1001.5)
    assert read_progress(folder) == (1, 4, pytest.approx(ledger.unix(1001.5)))
    ledger.end("finished", None, 4, 1002.0)
    ledger.optimizer_stepped()  # after the end (the map closed): nothing, and no error
    assert read_progress(folder) == (1, 4, pytest.approx(ledger.unix(1001.5)))
