"""The temporal breakdown (HTA 0.5) and the step breakdown (torch-tb-profiler), against hand
computed answers and against the two tools' own figures on real GPU traces."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tracekit import HANDMADE, RESNET_NW0, RESNET_NW4, SAMPLED, handmade, prepared

from trainpace.trace import breakdown as bd
from trainpace.trace.findings import ROLES

WriteTrace = Callable[..., Path]


def _temporal(path: Path) -> bd.Temporal:
    t = bd.temporal(prepared(path))
    assert t is not None
    return t


def test_handmade_temporal_breakdown() -> None:
    # Kept device work (the last step's kernel is dropped, as HTA does): busy [30,85) [160,165)
    # [200,240) in a 210 µs window; compute [30,60) [160,165) [200,240); comm [55,85).
    t = _temporal(HANDMADE)
    assert t.window == (30.0, 240.0)
    assert (t.idle_us, t.compute_us, t.non_compute_us) == (110.0, 75.0, 25.0)
    assert bd.temporal_pcts(t) == (52.38, 35.71, 11.9)
    assert t.overlap_pct == 16.67  # 5 of the 30 µs of communication under compute
    assert t.exposed_communication_us == 25.0


def test_without_step_filter_the_window_is_the_whole_trace(write_trace: WriteTrace) -> None:
    trace = handmade()
    trace["traceEvents"] = [e for e in trace["traceEvents"]
                            if not e["name"].startswith("ProfilerStep#")]
    t = _temporal(write_trace(trace))
    assert t.window == (30.0, 260.0)
    assert t.idle_us == 120.0 and t.compute_us == 85.0


def test_no_communication_means_no_overlap(write_trace: WriteTrace) -> None:
    trace = handmade()
    trace["traceEvents"] = [e for e in trace["traceEvents"] if "nccl" not in e["name"]]
    t = _temporal(write_trace(trace))
    assert t.overlap_pct is None and t.exposed_communication_us == 0.0


@pytest.mark.parametrize(
    ("path", "idle", "compute", "non_compute", "pcts", "overlap"),
    [
        # Holistic Trace Analysis 0.5.0, get_temporal_breakdown / get_comm_comp_overlap
        (RESNET_NW0, 327463.0, 492891.0, 10140.0, (39.43, 59.35, 1.22), None),
        (RESNET_NW4, 164699.0, 495912.0, 16562.0, (24.32, 73.23, 2.45), None),
        (SAMPLED[0], 321378.0, 106252.0, 172428.0, (53.56, 17.71, 28.74), 11.81),
        (SAMPLED[1], 328671.0, 135548.0, 136455.0, (54.72, 22.57, 22.72), 20.05),
    ],
    ids=["resnet_nw0", "resnet_nw4", "sampled_rank0", "sampled_rank1"],
)
def test_real_traces_match_hta_to_the_microsecond(path: Path, idle: float, compute: float,
                                                  non_compute: float,
                                                  pcts: tuple[float, float, float],
                                                  overlap: float | None) -> None:
    t = _temporal(path)
    assert (t.idle_us, t.compute_us, t.non_compute_us) == (idle, compute, non_compute)
    assert bd.temporal_pcts(t) == pcts
    assert t.overlap_pct == overlap


def _idle_by_hand(path: Path) -> float:
    """HTA's idle time worked out from the trace's events in plain Python: the device events
    launched by host events that start before the last ProfilerStep, their union swept in
    start order; idle is the window (first start to last end) less that union."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "cat" in e]
    device = [e for e in events if e["cat"].lower() in ("kernel", "gpu_memcpy", "gpu_memset")]
    host = [e for e in events if e["cat"].lower() not in ("kernel", "gpu_memcpy", "gpu_memset")]
    last_step = max(e["ts"] for e in host if e["name"].startswith("ProfilerStep#"))
    launched = {e["args"]["correlation"] for e in host
                if e["ts"] < last_step and "correlation" in e.get("args", {})}
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in device
                   if e["args"].get("correlation") in launched)
    busy, (start, end) = 0.0, spans[0]
    for s, e in spans[1:]:
        if s > end:
            busy, start = busy + end - start, s
        end = max(end, e)
    busy += end - start
    return max(e for _, e in spans) - spans[0][0] - busy


@pytest.mark.parametrize("path", SAMPLED, ids=["sampled_rank0", "sampled_rank1"])
def test_idle_time_is_what_the_events_say(path: Path) -> None:
    """The idle time, worked out by hand from the events (no HTA figure involved)."""
    assert _temporal(path).idle_us == _idle_by_hand(path)


def _steps(path: Path) -> bd.StepsBreakdown:
    return bd.steps(prepared(path))


def test_handmade_steps_by_role() -> None:
    s = _steps(HANDMADE)
    # step 3's one kernel is fewer than 80% of step 2's two: dropped as cut off
    assert s.dropped == ["ProfilerStep#3"]
    assert s.count == 2
    one, two = s.rows
    assert (one.name, one.start_us, one.duration_us, one.host_us) == ("ProfilerStep#1", 0, 100, 100)
    # step 2 runs on the device until its last kernel ends at 240
    assert (two.name, two.start_us, two.duration_us, two.host_us) == ("ProfilerStep#2", 100, 140, 100)
    assert [getattr(one, f"{r}_us") for r in ROLES] == [30, 5, 0, 20, 4, 20, 1, 20]
    assert [getattr(two, f"{r}_us") for r in ROLES] == [45, 0, 0, 0, 10, 40, 0, 45]
    assert sum(getattr(two, f"{r}_us") for r in ROLES) == two.duration_us
    assert (one.device_busy_us, one.compute_us, one.dataloader_span_us) == (55, 30, 20)
    # step 3's DataLoader span [200, 210) lies inside step 2's device span
    assert (two.device_busy_us, two.compute_us, two.dataloader_span_us) == (45, 45, 50)
    assert s.duration_us_mean == 120 and s.duration_us_median == 120
    assert s.dataloader_pct == 25.0  # (20 + 40) / 2 / 120
    assert s.dataloader_span_pct == pytest.approx(100 * 35 / 120)
    assert s.gpu_util_pct == pytest.approx(100 * 100 / 240)
    assert s.origin_us == 0.0


@pytest.mark.parametrize(
    ("path", "step_ms", "dataloader_pct", "gpu_util_pct"),
    [
        # torch-tb-profiler's verified overview (its test oracle) for these two traces
        (RESNET_NW0, 177.6, 33.37, 55.51),
        (RESNET_NW4, 141.1, 0.84, 70.27),
    ],
    ids=["resnet_nw0", "resnet_nw4"],
)
def test_real_traces_match_tb_profiler_overview(path: Path, step_ms: float,
                                                dataloader_pct: float,
                                                gpu_util_pct: float) -> None:
    s = _steps(path)
    assert s.count == 6 and not s.dropped
    assert round(s.duration_us_mean / 1000, 1) == step_ms
    assert round(s.dataloader_pct, 2) == dataloader_pct
    assert round(s.gpu_util_pct, 2) == gpu_util_pct
    for row in s.rows:
        assert sum(getattr(row, f"{r}_us") for r in ROLES) == pytest.approx(row.duration_us)
        # the last step too: HTA's filter leaves it out of the window, not out of the steps
        assert 0 < row.compute_us <= row.device_busy_us < row.duration_us


def test_no_steps_no_step_breakdown(write_trace: WriteTrace) -> None:
    trace = handmade()
    trace["traceEvents"] = [e for e in trace["traceEvents"]
                            if not e["name"].startswith("ProfilerStep#")]
    s = _steps(write_trace(trace))
    assert s.count == 0 and s.rows == [] and s.duration_us_mean is None


def test_grouped_min_max_equals_ufunc_at() -> None:
    from trainpace.trace.breakdown import _grouped_min_max

    rng = np.random.default_rng(5)
    group = rng.integers(0, 7, 300)
    lo, hi = rng.random(300) * 100, rng.random(300) * 100
    least, most = _grouped_min_max(group, lo, hi, 9)  # groups 7 and 8 have no member
    want_least, want_most = np.full(9, np.inf), np.full(9, -np.inf)
    np.minimum.at(want_least, group, lo)
    np.maximum.at(want_most, group, hi)
    assert least.tolist() == want_least.tolist() and most.tolist() == want_most.tolist()
    empty = _grouped_min_max(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), 2)
    assert empty[0].tolist() == [np.inf, np.inf] and empty[1].tolist() == [-np.inf, -np.inf]
