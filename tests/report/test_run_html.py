"""The run page: signs, diagnosis with evidence, the four plots, escaping of run names."""

import dataclasses
import re
from dataclasses import dataclass

import numpy as np
import pytest

from report.conftest import make_run
from trainpace.report._signs import signs
from trainpace.report.downsample import extreme_indices, extremes, robust_top
from trainpace.report.run_html import (
    breakdown_chart,
    loss_chart,
    run_page,
    throughput_chart,
    throughput_points,
    utilization_chart,
)
from trainpace.series import StepSeries
from trainpace.summary import Bandwidth, Device, Diagnosis, Finding, Steps, Summary, Time


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


# -- long runs, stalls, phases, bandwidth ------------------------------------------------------



def test_extremes_keep_a_one_step_spike_in_a_million():
    ys = np.full(1_000_000, 0.03)
    ys[654_321] = 2.0
    ys[100] = 0.001
    xs, kept = extremes(np.arange(1.0, 1_000_001.0), ys)
    assert len(kept) <= 1400
    assert kept.max() == 2.0 and kept.min() == 0.001
    assert xs[kept.argmax()] == 654_322.0
    assert np.all(np.diff(xs) > 0)  # still in order
    assert extreme_indices(np.arange(10.0)).tolist() == list(range(10))  # few points: all kept


def test_a_bucket_with_only_gaps_stays_a_gap():
    ys = np.full(10_000, 1.0)
    ys[5000:5100] = np.nan
    _, kept = extremes(np.arange(10_000.0), ys, buckets=100)
    assert np.isnan(kept).sum() == 1 and np.nanmax(kept) == 1.0


def stalled_series(n=2000, stall_at=1000):
    """30 ms steps, 38% of them data wait, one 2 s stall."""
    step_s = np.full(n, 0.03)
    step_s[stall_at - 1] = 2.0
    records = [{"step": i + 1, "t_s": float(step_s[: i + 1].sum()), "step_s": float(step_s[i]),
                "wait_s": 0.0114 if i != stall_at - 1 else 1.9, "samples": 32, "loss": 1.0}
               for i in range(n)]
    return StepSeries.from_records(records)


def test_a_stall_is_marked_at_the_top_instead_of_squashing_the_data_wait_band():
    svg = breakdown_chart(stalled_series())
    assert robust_top(np.array([0.03] * 99 + [2.0])) == pytest.approx(0.045)
    # the scale stops at 1.5 × the 95th percentile of the step time: 45 ms, not 2 s
    ticks = [float(t) for t in re.findall(r'text-anchor="end">([0-9.]+)</text>', svg)]
    assert max(ticks) <= 0.045
    assert svg.count('class="clipped"') == 1
    assert "total at 1k: 2 s" in svg
    assert "1 point above the scale (up to 2 s) marked ▼ at the top" in svg


def summary_with_phases():
    phase = {"start_step": 200, "stop_step": 400, "start_s": 6.0, "stop_s": 12.0, "slowdown": 3.2,
             "wall_pct": 25.0, "cause": "cpu_contention"}
    finding = Finding(id="slow_phase", severity="critical", title="Steps 200-400 ran 3.2× slower",
                      evidence={"phases": [phase]}, advice=[])
    return Summary(steps=Steps(total=2000, warmup=50, measured=1950),
                   time=Time(wall_s=62.0, step_s_median=0.03, warmup_s=1.5),
                   diagnosis=Diagnosis(bottleneck="none", findings=[finding]))


def test_warm_up_and_slow_phases_are_shaded_on_every_plot():
    series = stalled_series()
    system = [{"t_s": float(t), "device_util_pct": 50.0} for t in range(62)]
    doc = run_page(summary_with_phases(), series=series, system=system)
    assert doc.count('<g class="band">') == 2 * 4  # warm-up and the phase, on the four plots
    assert "warm-up (50 steps)" in doc
    assert "slow phase 3.2×: cpu contention" in doc


def test_training_time_says_why_it_is_critical():
    training = next(s for s in signs(summary_with_phases()) if s.name == "training time")
    assert training.status == "critical"
    assert training.details[0] == "why: Steps 200-400 ran 3.2× slower"
    assert "warm-up 1.5 s (50 steps, excluded)" in training.details


@dataclass(frozen=True, kw_only=True)
class TimeWithOutside(Time):
    """Time as the Meter engineer extends it (outside_steps_s, outside_steps_pct)."""

    outside_steps_s: float | None = None
    outside_steps_pct: float | None = None


def test_time_outside_the_steps_is_shown_when_the_summary_has_it():
    summary = Summary(time=TimeWithOutside(wall_s=5.0, step_s_median=0.03, outside_steps_s=0.97,
                                           outside_steps_pct=19.4))
    training = next(s for s in signs(summary) if s.name == "training time")
    assert "outside the steps 970 ms (19% of wall)" in training.details


def test_bandwidth_line_from_the_sampler_else_the_run_estimate_else_why_not():
    rows = [{"t_s": float(t), "device_util_pct": 60.0, "bandwidth_util_pct": 30.0 + t} for t in range(5)]
    assert "memory bandwidth" in utilization_chart(rows)
    no_reading = [{"t_s": float(t), "device_util_pct": 60.0} for t in range(5)]
    estimated = Summary(bandwidth=Bandwidth(util_pct=42.0, source="estimate_bytes_per_step"))
    svg = utilization_chart(no_reading, estimated)
    assert "memory bandwidth 42% (run mean, estimate_bytes_per_step)" in svg
    assert "stroke-dasharray" in svg
    assert "no bandwidth line: no NVML/DCGM reading" in utilization_chart(no_reading, Summary())


def _polyline_points(svg, name):
    group = re.search(rf'<g [^>]*><title>{re.escape(name)}</title>(.*?)</g>', svg).group(1)
    return [tuple(map(float, point.split(",")))
            for line in re.findall(r'points="([^"]*)"', group) for point in line.split()]


def test_a_steady_loops_zigzagging_readings_are_drawn_as_means_per_window():
    """One reading a second, 7% and 58% in turn (a steady CPU loop, as sampled): the plot
    draws the mean of each 10 s, 32.5% throughout, and its title says so."""
    rows = [{"t_s": float(t), "device_util_pct": 7.0 if t % 2 else 58.0} for t in range(120)]
    svg = utilization_chart(rows)
    assert "Device and bandwidth utilization (mean per 10 s)" in svg
    ys = {y for _, y in _polyline_points(svg, "device busy")}
    # one level: every window's mean is the same, 32.5% on the 0-105% scale
    assert ys == {round(260 - 38 - 32.5 / 105.0 * (260 - 30 - 38), 1)}
    xs = [x for x, _ in _polyline_points(svg, "device busy")]
    assert min(xs) == 58.0 and max(xs) == 720 - 16  # the readings' whole span


def test_few_readings_are_drawn_as_they_are():
    rows = [{"t_s": float(t), "device_util_pct": 10.0 * t} for t in range(5)]
    svg = utilization_chart(rows)
    assert "(mean per" not in svg
    assert len(_polyline_points(svg, "device busy")) == 5


def test_window_means_weigh_each_reading_by_its_interval():
    from trainpace.report.downsample import window_means

    # readings at 0, 1, 2 (1 s apart) and 4 (2 s after the one before): 10, 20, 30, 60
    xs, ys = window_means([0.0, 1.0, 2.0, 4.0], [10.0, 20.0, 30.0, 60.0], 3.0)
    assert xs.tolist() == [0.0, 3.0, 3.0, 4.0]
    assert ys.tolist() == [20.0, 20.0, 60.0, 60.0]
    xs, ys = window_means([0.0, 1.0, 5.0], [10.0, None, 30.0], 2.0)  # a window with none: NaN
    assert xs.tolist() == [0.0, 2.0, 2.0, 4.0, 4.0, 5.0]
    assert np.isnan(ys[2:4]).all() and ys[[0, 1, 4, 5]].tolist() == [10.0, 10.0, 30.0, 30.0]


@pytest.mark.parametrize(("bandwidth", "flops", "said"), [
    ({"peak_gb_s": 23.0}, {}, "no count of the bytes a step moves to set against the 23 GB/s "
                              "peak"),
    ({}, {"bytes_per_step": 1e6}, "no peak bandwidth known for this device to set the bytes "
                                  "moved against"),
    ({}, {}, "no count of the bytes a step moves and no peak bandwidth known"),
])
def test_the_no_bandwidth_note_says_what_is_missing_and_sits_under_the_chart(bandwidth, flops,
                                                                            said):
    from trainpace.summary import Flops

    rows = [{"t_s": float(t), "device_util_pct": 99.0} for t in range(30)]
    summary = Summary(bandwidth=Bandwidth(**bandwidth), flops=Flops(**flops))
    svg = utilization_chart(rows, summary)
    note = re.search(r'<text class="note" x="[\d.]+" y="([\d.]+)"[^>]*>([^<]*)</text>', svg)
    assert note.group(2) == f"no bandwidth line: no NVML/DCGM reading, and {said}"
    if "peak_gb_s" in bandwidth:  # a peak the table shows is never said to be missing
        assert "no peak" not in svg
    axis = re.search(r'<line x1="[\d.]+" x2="[\d.]+" y1="([\d.]+)" y2="\1" stroke="#9aa0a6"/>',
                     svg)
    label = re.search(r'<text x="[\d.]+" y="([\d.]+)" text-anchor="middle">wall time', svg)
    # below the plot area and the axis's label: no line or legend runs through it
    assert float(axis.group(1)) < float(label.group(1)) < float(note.group(1)) <= 276


def test_a_page_of_a_long_run_keeps_its_size_bounded():
    n = 200_000
    t = np.arange(1, n + 1) * 0.03
    series = StepSeries()
    series.extend({"step": i + 1, "t_s": float(t[i]), "step_s": 0.03, "wait_s": 0.01, "samples": 8,
                   "loss": 1.0 / (1 + i)} for i in range(n))
    doc = run_page(Summary(steps=Steps(total=n, warmup=1, measured=n - 1)), series=series)
    assert len(doc) < 400_000  # a few thousand points a plot, not 200k


def _long_series(n, stall_at):
    rng = np.random.default_rng(0)
    step_s = 0.03 * (1 + 0.05 * rng.standard_normal(n))
    step_s[stall_at - 1] = 2.0
    series = StepSeries()
    series.extend({"step": i + 1, "t_s": float(t), "step_s": float(s), "wait_s": 0.3 * float(s),
                   "h2d_s": 0.001, "samples": 8, "loss": 2.0 - i / n}
                  for i, (s, t) in enumerate(zip(step_s, np.cumsum(step_s), strict=True)))
    return series


def test_a_long_runs_page_costs_little_beside_its_columns():
    import tracemalloc

    n = 200_000
    series = _long_series(n, stall_at=131_072)
    summary = Summary(steps=Steps(total=n, warmup=1, measured=n - 1))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        doc = run_page(summary, series=series)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    # full-length layers and masks took ~97 bytes a step before the chunked layers; now the
    # stacked total (8), the smoothed loss and its bias correction (8 + 16), masks
    assert peak < 60 * n, peak / n
    # the one 2 s stall, in the third chunk of the breakdown, is still drawn and named
    assert doc.count('class="clipped"') == 1
    assert "total at 131k: 2 s" in doc
