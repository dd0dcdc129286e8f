"""Shared test helpers for the trace tests: the trace files in tests/data/traces."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from trainpace.trace.load import load_trace
from trainpace.trace.prepare import Prepared, prepare

TRACES = Path(__file__).resolve().parent.parent / "data" / "traces"
HANDMADE = TRACES / "handmade_steps.json"
# The same events, with deviceProperties and more keys after traceEvents (as some exporters write)
KEYS_AFTER = TRACES / "handmade_keys_after_events.json"
# A CPU trace with known figures (no device events)
HANDMADE_CPU = TRACES / "handmade_cpu.json"
# What Meter(out=..., profile_steps=...) wrote for a tiny model on a CPU (make_cpu_run.py)
CPU_RUN = TRACES / "cpu_run"
CPU_RUN_TRACE = CPU_RUN / "profile" / "profile_rank0.pt.trace.json.gz"
RESNET_NW0 = TRACES / "resnet50_num_workers_0.pt.trace.json.gz"
RESNET_NW4 = TRACES / "resnet50_num_workers_4.pt.trace.json.gz"
SAMPLED = [TRACES / "sampled_rank-0.json.gz", TRACES / "sampled_rank-1.json.gz"]


@functools.lru_cache(maxsize=8)
def prepared(path: Path) -> Prepared:
    """A trace file loaded and classified once per test session (read-only)."""
    return prepare(load_trace(path))


def handmade() -> dict[str, Any]:
    """The hand-made trace as a dict, to derive variants from."""
    data: dict[str, Any] = json.loads(HANDMADE.read_text())
    return data
