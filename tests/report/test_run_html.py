"""The run page: signs, diagnosis with evidence, the four plots, escaping of run names."""

import dataclasses
import re

from report.conftest import make_run
from trainpace.report.run_html import (
    breakdown_chart,
    loss_chart,
    run_page,
    throughput_chart,
    throughput_points,
    utilization_chart,
)
from trainpace.summary import Device, Summary


def test_page_has_signs_diagnosis_and_four_plots(run):
    doc = run_page(run.summary, series=run.steps, system=run.system, meta=run.meta, source="runs/exp1")
    for title in ("Vital signs", "Diagnosis", "Over the run", "Step time breakdown",
                  "Throughput (samples/s", "Device and bandwidth utilization", "Loss against wall time"):
        assert title in doc
    assert doc.count("<svg") == 4
    assert "no data recorded" not in doc
    # the periodic stall and the data wait of the hand-made run, with their evidence
    assert "Periodic stall every 50 steps" in doc
    assert "period_steps=50" in doc
    assert "The step waits for data 30% of the time" in doc
    assert "target 0.5" in doc


def test_names_from_the_run_are_escaped():
    run = make_run(name='<img src=x onerror="alert(1)">')
    summary = dataclasses.replace(run.summary, device=Device(kind="cuda", name="<b>gpu</b>"))
    doc = run_page(summary, series=run.steps, system=run.system, source="<dir>")
    assert "<img" not in doc and "<b>gpu" not in doc and "<dir>" not in doc
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in doc


def test_a_run_with_nothing_measured_says_so_in_every_plot():
    doc = run_page(Summary(run_id="empty"))
    assert doc.count("no data recorded for this plot") == 4
    assert "Not diagnosed yet." in doc
    assert doc.count("not measured: ") == 5


def test_breakdown_layers_are_the_step_parts_that_were_recorded():
    steps = [{"step": i, "t_s": float(i), "step_s": 1.0, "wait_s": 0.25, "h2d_s": 0.05} for i in range(1, 4)]
    svg = breakdown_chart(steps)
    assert re.findall(r"<title>([^<]+)</title>", svg) == ["data wait", "host-to-device", "compute and other"]
    steps = [{"step": 1, "t_s": 1.0, "step_s": 1.0, "wait_s": 0.25, "outside_s": 0.5},
             {"step": 2, "t_s": 2.5, "step_s": 1.0, "wait_s": 0.5, "outside_s": None}]
    svg = breakdown_chart(steps)
    assert re.findall(r"<title>([^<]+)</title>", svg) == ["data wait", "compute and other", "outside the steps"]


def test_throughput_is_work_over_time_per_window():
    steps = [{"step": i, "t_s": i * 0.5, "step_s": 0.5, "samples": 16 * (1 + i % 2)} for i in range(1, 11)]
    assert throughput_points(steps) == ([0.5 * i for i in range(1, 11)], [64.0, 32.0] * 5, "samples/s", 1)
    many = [{"step": i, "t_s": i * 0.5, "step_s": 0.5, "samples": 16 * (1 + i % 2)} for i in range(1, 481)]
    xs, ys, _unit, size = throughput_points(many)
    assert (size, len(xs), set(ys)) == (4, 120, {48.0})  # 4-step windows: (16 + 32) × 2 / 2 s
    assert "samples/s, 4-step windows" in throughput_chart(many)
    assert throughput_points([{"step": 1, "t_s": 1.0, "step_s": 0.5, "samples": None}])[1:3] == ([2.0], "steps/s")


def test_utilization_plots_only_the_series_that_were_sampled():
    rows = [{"t_s": 0.0, "device_util_pct": 10.0, "bandwidth_util_pct": None},
            {"t_s": 1.0, "device_util_pct": 90.0, "bandwidth_util_pct": None}]
    svg = utilization_chart(rows)
    assert "device busy" in svg and "memory bandwidth" not in svg


def test_loss_chart_without_a_target_has_no_target_line(run):
    svg = loss_chart(run.steps, Summary())
    assert "target" not in svg
    assert "smoothed" in svg
