"""A trace becomes a Summary the live rules judge: the same findings for the same evidence."""

from __future__ import annotations

import dataclasses

import pytest
from tracekit import HANDMADE, RESNET_NW0, RESNET_NW4

from trainpace.diagnosis import diagnose
from trainpace.summary import Diagnosis
from trainpace.trace import analyze_traces
from trainpace.trace.evidence import build_summary, step_records


def test_handmade_summary_sections() -> None:
    analysis = analyze_traces([HANDMADE])
    s = analysis.summary
    assert s.world_size == 1 and s.run_id == "trace:handmade_steps.json"
    assert (s.steps.total, s.steps.warmup, s.steps.measured) == (3, 0, 2)
    assert s.time.step_s_median == pytest.approx(120e-6)
    assert s.time.measured_s == pytest.approx(240e-6)
    assert s.time.clock == "trace"
    assert s.device.kind == "cuda" and s.device.name == "Handmade GPU"
    assert s.device.util_pct == pytest.approx(47.62)  # 100 - HTA idle %
    assert s.data.wait_pct == pytest.approx(100 * 35 / 120)  # DataLoader spans / step
    assert s.data.wait_s_per_step == pytest.approx(35e-6)
    assert s.data.exposed_wait_s_per_step == pytest.approx(30e-6)  # not hidden by device work
    assert s.communication.share_pct == pytest.approx(100 * 30 / 210)
    assert (s.communication.overlap_pct, s.communication.source) == (16.67, "trace")
    k = s.kernels
    assert (k.per_step, k.median_us, k.short_pct, k.launch_lag_us, k.source) == \
        (2.5, 20.0, 20.0, 5.0, "trace")
    assert [(r.rank, r.step_s_median) for r in s.ranks] == [(0, pytest.approx(120e-6))]
    # what a trace cannot know stays unknown
    assert s.throughput.samples_per_s is None and s.flops.per_step is None
    assert s.device.temperature_c is None and s.bandwidth.util_pct is None


def test_findings_are_the_live_rules_on_that_summary() -> None:
    analysis = analyze_traces([HANDMADE])
    bare = dataclasses.replace(analysis.summary, diagnosis=Diagnosis())
    again = diagnose(bare, steps=step_records(analysis.ranks[0]))
    assert again == analysis.summary.diagnosis
    assert build_summary(analysis.ranks).diagnosis == analysis.summary.diagnosis


def test_resnet_without_workers_shows_the_data_wait() -> None:
    analysis = analyze_traces([RESNET_NW0])
    wait = next(f for f in analysis.findings if f.id == "data_wait")
    assert wait.evidence["wait_pct"] == pytest.approx(39.02, abs=0.01)
    assert analysis.summary.data.exposed_wait_s_per_step == pytest.approx(0.05926, abs=1e-5)
    # the reference data-loading-bound trace: its many short kernels sit behind a deep launch
    # queue, so the data wait, not launch overhead, is the bottleneck
    assert analysis.bottleneck == "data_loading"
    assert not any(f.id == "launch_bound" for f in analysis.findings)


def test_resnet_with_workers_has_no_data_bottleneck() -> None:
    analysis = analyze_traces([RESNET_NW4])
    assert analysis.bottleneck != "data_loading"


def test_live_summary_gets_the_trace_kernels() -> None:
    from trainpace.summary import Communication, Data, Summary
    from trainpace.trace.evidence import with_trace_evidence

    trace = analyze_traces([HANDMADE]).summary
    live = Summary(data=Data(wait_pct=12.0), communication=Communication())
    merged = with_trace_evidence(live, trace)
    assert merged.kernels == trace.kernels and merged.kernels.source == "trace"
    assert merged.communication == trace.communication  # the live run had none
    assert merged.data.wait_pct == 12.0  # the live figures stay
    measured = Summary(communication=Communication(share_pct=3.0, source="dist"))
    assert with_trace_evidence(measured, trace).communication.share_pct == 3.0
