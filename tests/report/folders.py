"""Run folders written by hand (through the real run-folder writer), for the CLI tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainpace.runlog import META_SCHEMA, Record
from trainpace.sinks.runfolder import RunFolderSink
from trainpace.summary import Summary


def steps(n: int, *, step_s: float, samples: int, wait_s: float = 0.0,
          loss: Callable[[int], float] | None = None) -> list[dict[str, Any]]:
    """``n`` step records of a constant step time; ``loss(step)`` gives the loss of a step."""
    return [{"step": i, "t_s": i * step_s, "step_s": step_s, "wait_s": wait_s, "exposed_wait_s": None,
             "h2d_s": None, "samples": samples, "tokens": None, "micro_batches": 1, "warmup": False,
             "loss": loss(i) if loss else None, "metric": None} for i in range(1, n + 1)]


def write_run(path: Path, records: list[dict[str, Any]], *, meta: dict[str, Any] | None = None,
              summary: Summary | None = None) -> Path:
    """A run folder holding meta.json, steps.jsonl and (when given) summary.json."""
    sink = RunFolderSink(path)
    sink.log(Record("meta", {"schema": META_SCHEMA, "run_id": path.name, "config": {"warmup": 0},
                             **(meta or {})}))
    sink.log(Record("window", {"window": {}, "steps": records}))
    if summary is not None:
        sink.log(Record("summary", summary.to_dict()))
    sink.close()
    return path
