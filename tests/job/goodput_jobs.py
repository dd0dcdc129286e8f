"""Job folders written by hand, with exact times: a ledger (job.jsonl) and run folders."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from trainpace.job import events as ev
from trainpace.runlog import META_SCHEMA

T0 = 1_800_000_000.0  # the job's first process start (Unix seconds)
ARGV = ["train.py", "--lr", "0.1"]


def event(name: str, run: int, unix_s: float, **keys: Any) -> dict[str, Any]:
    """A ledger event: every key its event has (null unless given)."""
    record = {"schema": ev.SCHEMA, "event": name, "run": run, "unix_s": unix_s}
    record.update(dict.fromkeys(ev.EVENT_KEYS.get(name, ())))
    record.update(keys)
    return record


def run_start(run: int, unix_s: float, run_id: str, process_start_unix_s: float) -> dict[str, Any]:
    return event(ev.RUN_START, run, unix_s, run_id=run_id, pid=1000 + run, host="node0",
                 argv=ARGV, world_size=1, process_start_unix_s=process_start_unix_s)


def steps(times: list[tuple[float, float, float]]) -> list[dict[str, Any]]:
    """Step records from ``(start_s, step_s, wait_s)`` per step, seconds from the Meter's start:
    the step ends at start_s + step_s (its t_s)."""
    return [{"step": i, "t_s": start + step_s, "step_s": step_s, "wait_s": wait_s,
             "exposed_wait_s": None, "h2d_s": None, "samples": 8, "tokens": None,
             "micro_batches": 1, "loss": None, "metric": None, "outside_s": None,
             "loss_nonfinite": None}
            for i, (start, step_s, wait_s) in enumerate(times, start=1)]


def contiguous(start_s: float, step_times: list[tuple[float, float]]) -> list[tuple[float, float, float]]:
    """``(start_s, step_s, wait_s)`` of steps one after the other from ``start_s``."""
    out, t = [], start_s
    for step_s, wait_s in step_times:
        out.append((t, step_s, wait_s))
        t += step_s
    return out


def write_run(folder: Path, run_id: str, started_unix_s: float,
              records: list[dict[str, Any]], *, warmup: int | str = 1,
              argv: list[str] | None = None, finished: bool = False) -> Path:
    """A run folder: meta.json (started_at, argv, the warm-up setting) and steps.jsonl."""
    folder.mkdir(parents=True, exist_ok=True)
    iso = dt.datetime.fromtimestamp(started_unix_s, dt.timezone.utc).isoformat()
    meta = {"schema": META_SCHEMA, "run_id": run_id, "started_at": iso,
            "finished_at": iso if finished else None, "argv": argv or ARGV,
            "config": {"warmup": warmup}}
    (folder / "meta.json").write_text(json.dumps(meta))
    (folder / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def write_ledger(folder: Path, events: list[dict[str, Any]], *, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ev.LEDGER_FILE
    path.write_text("".join(json.dumps(e) + "\n" for e in events) + extra)
    return path


def killed_and_restarted(folder: Path) -> Path:
    """A job of two runs, every time exact (the figures are in tests/job/test_goodput.py).

    Run 1 (process start T0, Meter at T0+2): first step at T0+10; step 1 (3 s, warm-up) and
    steps 2-10 (1 s, 0.1 s of it waiting for data); a 2 s save after step 10; steps 11-20 the
    same; SIGKILLed after step 20 (T0+34, no run_end). Run 2 (process start T0+40, Meter at
    T0+41): a 1.5 s load at T0+43 of run 1's step-10 save; first step at T0+46; step 1 (2 s,
    warm-up), steps 2-10 (1 s, 0.1 s wait) with 0.5 s of logging after step 5; a 3 s
    evaluation at T0+57.5; run_end at T0+62.
    """
    # t_s counts from the first step's start (the ledger's first_step), as the Meter writes it
    run1 = steps(contiguous(0.0, [(3.0, 0.0)] + [(1.0, 0.1)] * 9)
                 + contiguous(14.0, [(1.0, 0.1)] * 10))
    run2 = steps(contiguous(0.0, [(2.0, 0.0)] + [(1.0, 0.1)] * 4)
                 + contiguous(6.5, [(1.0, 0.1)] * 5))
    write_run(folder / ev.RUNS_DIR / "job", "job", T0 + 2, run1)
    write_run(folder, "job.2", T0 + 41, run2, finished=True)
    write_ledger(folder, [
        run_start(1, T0 + 2, "job", T0),
        event(ev.FIRST_STEP, 1, T0 + 10),
        event(ev.CHECKPOINT_SAVE, 1, T0 + 22, duration_s=2.0, step=10, path="ckpt.pt",
              source="torch.save"),
        event(ev.PROGRESS, 1, T0 + 34, step=20, step_end_unix_s=T0 + 34),
        run_start(2, T0 + 41, "job.2", T0 + 40),
        event(ev.CHECKPOINT_LOAD, 2, T0 + 43, duration_s=1.5, path="ckpt.pt", saved_by_run=1,
              saved_at_step=10, source="torch.save"),
        event(ev.FIRST_STEP, 2, T0 + 46),
        event(ev.EVALUATION, 2, T0 + 57.5, duration_s=3.0, source="lightning"),
        event(ev.RUN_END, 2, T0 + 62, status="finished", last_step=10,
              last_step_end_unix_s=T0 + 57.5, signal=None),
    ])
    return folder
