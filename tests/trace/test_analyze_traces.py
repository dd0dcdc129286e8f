from __future__ import annotations

import json
import multiprocessing
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from tracekit import HANDMADE, SAMPLED, handmade

from trainpace.errors import ConfigError, TraceFormatError
from trainpace.trace import analyze_traces

WriteTrace = Callable[..., Path]


def _scaled(trace: dict[str, Any], factor: float, shift: float = 0.0,
            rank: int | None = None) -> dict[str, Any]:
    out = json.loads(json.dumps(trace))
    for e in out["traceEvents"]:
        if "ts" in e:
            e["ts"] = e["ts"] * factor + shift
        if "dur" in e:
            e["dur"] = e["dur"] * factor
    if rank is not None:
        out["distributedInfo"]["rank"] = rank
    return out


def test_json_contract_of_one_trace() -> None:
    analysis = analyze_traces([HANDMADE], gap_threshold_us=20)
    d = analysis.to_dict()
    assert d["schema"] == "trainpace.trace/1"
    assert d["traces"] == [{"path": str(HANDMADE), "rank": 0, "events": 27, "device_events": 7,
                            "skipped": {"other phases (not 'X')": 4},
                            "device_name": "Handmade GPU",
                            "distributed": {"backend": "nccl", "rank": 0, "world_size": 2}}]
    rank = d["ranks"][0]
    assert {k: rank[k] for k in ("rank", "idle_pct", "compute_pct", "non_compute_pct",
                                 "comm_comp_overlap_pct", "idle_us", "compute_us",
                                 "non_compute_us")} == {
        "rank": 0, "idle_pct": 52.38, "compute_pct": 35.71, "non_compute_pct": 11.9,
        "comm_comp_overlap_pct": 16.67, "idle_us": 110.0, "compute_us": 75.0,
        "non_compute_us": 25.0}
    assert rank["window_us"] == 210.0 and rank["hta_dropped_step"] == "ProfilerStep#3"
    assert rank["window_steps"] == 2 and rank["notes"] == []
    assert {f["id"] for f in d["findings"]} >= {"data_wait", "communication", "checks"}
    assert d["bottleneck"] == analysis.summary.diagnosis.bottleneck
    assert d["summary"]["schema"] == "trainpace.summary/1"
    json.dumps(d, allow_nan=False)  # strict JSON


def test_overlap_is_null_without_communication(write_trace: WriteTrace) -> None:
    trace = handmade()
    trace["traceEvents"] = [e for e in trace["traceEvents"] if "nccl" not in e["name"]]
    rank = analyze_traces([write_trace(trace)]).to_dict()["ranks"][0]
    assert rank["comm_comp_overlap_pct"] is None and rank["communication_us"] == 0.0


def test_zero_device_events_says_what_was_not_computed(write_trace: WriteTrace) -> None:
    trace = handmade()
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("pid") != 0]
    analysis = analyze_traces([write_trace(trace)])
    r = analysis.ranks[0]
    assert r.idle_pct is None and r.idle is None and r.kernels is None
    assert any("no device events" in n for n in r.notes)
    assert r.steps.count == 3  # host-only steps are still measured
    assert analysis.summary.device.util_pct is None
    assert analysis.summary.data.wait_pct == pytest.approx(100 * 70 / 300)


def test_a_straggler_rank_is_found(write_trace: WriteTrace) -> None:
    fast = write_trace(handmade(), "rank0.json")
    slow = write_trace(_scaled(handmade(), 2.0, rank=1), "rank1.json")
    analysis = analyze_traces([slow, fast], gap_threshold_us=20)
    assert [r.rank for r in analysis.ranks] == [0, 1]  # from distributedInfo, sorted
    cross = analysis.cross_rank
    assert cross.slowest_rank == 1
    assert cross.step_skew_pct == pytest.approx(100 * (240 / 180 - 1))
    assert [r["step_us_median"] for r in cross.ranks] == [120.0, 240.0]
    assert [r["communication_us_per_step"] for r in cross.ranks] == [15.0, 30.0]
    straggler = next(f for f in analysis.findings if f.id == "straggler")
    assert straggler.evidence["slowest_rank"] == 1
    assert [e.step_s_median for e in analysis.summary.ranks] == [120e-6, 240e-6]


def test_clock_skew_between_ranks_is_reported(write_trace: WriteTrace) -> None:
    a = write_trace(handmade(), "rank0.json")
    b = write_trace(_scaled(handmade(), 1.0, shift=5000.0, rank=1), "rank1.json")
    analysis = analyze_traces([a, b])
    assert [r["clock_offset_us"] for r in analysis.cross_rank.ranks] == [0.0, 5000.0]
    assert any("clocks disagree" in n for n in analysis.cross_rank.notes)
    # durations do not depend on the clocks
    assert analysis.ranks[0].idle_pct == analysis.ranks[1].idle_pct == 52.38
    assert analysis.cross_rank.step_skew_pct == 0.0


def test_duplicate_ranks_fall_back_to_file_order(write_trace: WriteTrace) -> None:
    a = write_trace(handmade(), "a.json")
    b = write_trace(handmade(), "b.json")
    analysis = analyze_traces([a, b])
    assert [(r.rank, Path(r.path).name) for r in analysis.ranks] == [(0, "a.json"), (1, "b.json")]
    assert any("rank 0 is declared by more than one trace" in n for n in analysis.notes)


def test_the_library_call_starts_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The library call never starts a process of its own: a pool is the caller's, passed in
    (issue 22); a library call changes nothing of its caller's process."""
    import concurrent.futures
    import inspect
    import os

    def refused(*_: Any, **__: Any) -> None:
        raise AssertionError("the library call started a process")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", refused)
    monkeypatch.setattr(os, "fork", refused)
    assert "workers" not in inspect.signature(analyze_traces).parameters
    assert inspect.signature(analyze_traces).parameters["executor"].default is None
    analysis = analyze_traces(SAMPLED)
    assert [(r.rank, r.idle_us) for r in analysis.ranks] == [(0, 321378.0), (1, 328671.0)]


class _Recording(Executor):
    """An executor that runs each call at once and records the files it was given."""

    def __init__(self) -> None:
        self.files: list[str] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.files.append(Path(args[0]).name)  # map() submits one call per file
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def test_the_ranks_go_to_the_executor_the_caller_passes() -> None:
    """Each rank is read in the caller's executor, with the figures of the serial reading."""
    serial = analyze_traces(SAMPLED)
    executor = _Recording()
    analysis = analyze_traces(SAMPLED, executor=executor)
    assert executor.files == [p.name for p in SAMPLED]
    assert orjson.dumps(analysis.to_dict()) == orjson.dumps(serial.to_dict())
    one = _Recording()
    analyze_traces(SAMPLED[:1], executor=one)
    assert one.files == []  # one rank: nothing to share out, read here


@pytest.mark.slow
def test_ranks_read_in_a_process_pool_give_the_serial_figures() -> None:
    serial = analyze_traces(SAMPLED)
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        pooled = analyze_traces(SAMPLED, executor=pool)
    assert orjson.dumps(pooled.to_dict()) == orjson.dumps(serial.to_dict())


def test_bad_trace_error_names_the_file(write_trace: WriteTrace) -> None:
    bad = write_trace(b'{"traceEvents": [', "bad.json")
    with pytest.raises(TraceFormatError, match=r"bad\.json"):
        analyze_traces([HANDMADE, bad])


def test_trace_without_complete_events(write_trace: WriteTrace) -> None:
    path = write_trace({"traceEvents": [{"ph": "M", "name": "process_name"}]})
    with pytest.raises(TraceFormatError, match="no complete"):
        analyze_traces([path])


@pytest.mark.parametrize(("option", "value"), [("gap_threshold_us", 0), ("top", 0)])
def test_bad_options(option: str, value: int) -> None:
    with pytest.raises(ConfigError, match=option):
        analyze_traces([HANDMADE], **{option: value})


def test_the_library_call_loads_only_what_it_uses() -> None:
    # what a trace's analysis never calls: logging (8 ms to import; nothing on this path logs),
    # the tuner's results (7 ms; the diagnosis only names the tuner's command), pathlib (9 ms)
    import subprocess
    import sys

    code = ("import sys; from trainpace.trace import analyze_traces; "
            f"analyze_traces([{str(HANDMADE)!r}]); "
            "print(sorted(m for m in ('logging', 'trainpace.tune.tuning', 'shlex', "
            "'pathlib') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
