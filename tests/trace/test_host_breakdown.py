"""The CPU view of a trace: self times, the host split, the operators by self time."""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tracekit import CPU_RUN_TRACE, HANDMADE, HANDMADE_CPU

from trainpace.trace import analyze_traces
from trainpace.trace.host_breakdown import self_times


def test_self_time_is_the_span_less_its_direct_children() -> None:
    # thread 1: A[0,100) holds B[10,40) (holding C[20,30)) and D[50,60); E[100,110) touches
    # A's end; Z is zero-length. Thread 2: F[0,50) holds G[5,15). Threads do not nest.
    ts = np.array([0, 10, 20, 50, 100, 60, 0, 5.0])
    end = np.array([100, 40, 30, 60, 110, 60, 50, 15.0])
    thread = np.array([1, 1, 1, 1, 1, 1, 2, 2])
    assert self_times(ts, end, thread).tolist() == [60, 20, 10, 10, 10, 0, 40, 10]


def test_self_time_of_spans_starting_together_and_overlapping_ones() -> None:
    # P[0,50) and Q[0,20) start together: the longer one holds the other. R[40,70) overlaps
    # P's end without nesting: only its first 10 µs are taken from P.
    ts = np.array([0, 0, 40.0])
    end = np.array([50, 20, 70.0])
    got = self_times(ts, end, np.zeros(3, dtype=np.int64))
    assert got.tolist() == [20, 20, 30]
    assert self_times(np.array([5.0]), np.array([9.0]), np.array([1])).tolist() == [4]


def test_handmade_cpu_trace_exact_figures() -> None:
    analysis = analyze_traces([HANDMADE_CPU])
    r = analysis.ranks[0]
    assert r.window_us is None and r.idle is None and r.kernels is None
    assert r.steps.gpu_util_pct is None
    h = r.host
    assert h is not None
    assert (h.window, h.window_us, h.steps) == ("the ProfilerStep spans", 200.0, 2)
    # DataLoader [5,35) + [100,150); operators outside it [40,70) [80,85) [88,90) [160,180)
    assert (h.dataloader_us, h.operators_us, h.python_us) == (80.0, 57.0, 63.0)
    assert (h.dataloader_pct, h.operators_pct, h.python_pct) == (40.0, 28.5, 31.5)
    # the pin-memory thread (a string tid) counts in the operators, not in the main split
    assert (h.threads, h.operator_events, h.python_function_events) == (2, 10, 1)
    assert [(o.name, o.count, o.self_us, o.total_us, o.self_pct, o.in_dataloader_us)
            for o in h.top] == [
        ("aten::pin_memory", 1, 40.0, 40.0, 20.0, 0.0),
        ("aten::addmm", 2, 36.0, 36.0, 18.0, 0.0),
        ("aten::stack", 2, 24.0, 30.0, 12.0, 24.0),
        ("aten::linear", 2, 14.0, 50.0, 7.0, 0.0),
        ("aten::add_", 2, 7.0, 7.0, 3.5, 0.0),
        ("aten::cat", 1, 6.0, 6.0, 3.0, 6.0),
    ]
    assert [(s.name, s.duration_us, s.dataloader_us, s.operators_us, s.python_us)
            for s in h.rows] == [("ProfilerStep#1", 100.0, 30.0, 37.0, 33.0),
                                 ("ProfilerStep#2", 100.0, 50.0, 20.0, 30.0)]
    assert analysis.summary.device.kind == "cpu"  # deviceProperties lists no device
    assert analysis.summary.data.wait_pct == 40.0
    assert any("analyzed as a CPU trace" in n for n in r.notes)


def test_top_is_limited_and_a_device_trace_has_no_host_view() -> None:
    assert len(analyze_traces([HANDMADE_CPU], top=2).ranks[0].host.top) == 2  # type: ignore[union-attr]
    device = analyze_traces([HANDMADE]).ranks[0]
    assert device.host is None and device.window_us is not None


def test_no_profiler_step_uses_the_main_thread_span(tmp_path: Path) -> None:
    trace = json.loads(HANDMADE_CPU.read_text())
    trace["traceEvents"] = [e for e in trace["traceEvents"]
                            if not str(e.get("name", "")).startswith("ProfilerStep")]
    path = tmp_path / "nosteps.json"
    path.write_text(json.dumps(trace))
    h = analyze_traces([path]).ranks[0].host
    assert h is not None and h.steps == 0 and h.rows == []
    # thread 10's host events run from 5 (the DataLoader) to 180
    assert h.window == "thread 10's span (no ProfilerStep)" and h.window_us == 175.0
    assert (h.dataloader_us, h.operators_us) == (80.0, 57.0)


# ---- the real CPU trace, against a plain implementation of the same definitions ----------


def _events() -> list[dict[str, Any]]:
    doc = json.loads(gzip.decompress(CPU_RUN_TRACE.read_bytes()))
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") in (None, "Trace"):
            continue
        start = math.ceil(e["ts"])  # HTA's rounding of ns-resolution traces, as trainpace
        end = max(math.floor(e["ts"] + e["dur"]), start)
        out.append({**e, "start": start, "end": end})
    return out


def _stack_self_times(events: list[dict[str, Any]]) -> dict[str, float]:
    """Self time per operator name with an explicit stack per thread."""
    per_name: dict[str, float] = defaultdict(float)
    by_thread: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_thread[e["tid"]].append(e)
    for spans in by_thread.values():
        spans.sort(key=lambda e: (e["start"], -(e["end"] - e["start"])))
        own = [float(e["end"] - e["start"]) for e in spans]
        stack: list[int] = []
        for i, e in enumerate(spans):
            while stack and spans[stack[-1]]["end"] <= e["start"]:  # ended (or zero-length)
                stack.pop()
            if stack:
                own[stack[-1]] -= min(e["end"], spans[stack[-1]]["end"]) - e["start"]
            stack.append(i)
        for e, value in zip(spans, own, strict=True):
            if e["cat"] == "cpu_op":
                per_name[e["name"]] += value
    return dict(per_name)


def test_real_cpu_trace_matches_a_plain_implementation() -> None:
    events = _events()
    analysis = analyze_traces([CPU_RUN_TRACE], top=1000)
    h = analysis.ranks[0].host
    assert h is not None
    steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
    assert h.steps == len(steps) == 5
    assert h.window_us == sum(e["end"] - e["start"] for e in steps)
    loading = [e for e in events if e["name"].startswith("enumerate(DataLoader)#")]
    assert h.dataloader_us == sum(e["end"] - e["start"] for e in loading)  # one per step
    assert h.dataloader_us + h.operators_us + h.python_us == pytest.approx(h.window_us)
    expected = _stack_self_times(events)
    assert {o.name: o.self_us for o in h.top} == pytest.approx(expected)
    assert h.operator_events == sum(e["cat"] == "cpu_op" for e in events)
    assert [o.self_us for o in h.top] == sorted((o.self_us for o in h.top), reverse=True)
    # the dataset sleeps 0.2 ms per sample, 16 per batch: loading is most of each step
    assert h.dataloader_pct is not None and h.dataloader_pct > 50
