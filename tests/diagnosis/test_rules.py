"""Each rule at and around its thresholds, on hand-made summaries and step records."""

import pytest

from diagnosis.helpers import ctx, only
from trainpace.diagnosis import rules
from trainpace.diagnosis.hardware import device_util, hardware, memory, thermal
from trainpace.diagnosis.loading import data_wait
from trainpace.diagnosis.overhead import framework_work, host_overhead
from trainpace.summary import (
    Bandwidth,
    Data,
    Device,
    Flops,
    Host,
    Kernels,
    Steps,
    Summary,
    Throughput,
    Time,
)


def data_summary(wait_pct, measured=100, step_s=0.1, **data):
    return Summary(
        steps=Steps(total=measured + 5, warmup=5, measured=measured),
        time=Time(step_s_median=step_s),
        data=Data(wait_pct=wait_pct, wait_s_per_step=step_s * wait_pct / 100, **data),
    )


# ---- data loading ----------------------------------------------------------------------

def test_data_wait_below_warning_is_checked_not_flagged():
    outcome = data_wait(ctx(data_summary(9.9)))
    assert outcome.verdicts == ()
    assert outcome.checked == "data wait 9.9% of the step (< 10%)"


@pytest.mark.parametrize(("wait_pct", "measured", "severity"), [
    (10.0, 100, "warning"), (19.9, 100, "warning"), (20.0, 20, "critical"), (20.0, 19, "warning"),
])
def test_data_wait_bands_and_the_step_count_gate(wait_pct, measured, severity):
    v = only(data_wait(ctx(data_summary(wait_pct, measured))))
    assert v.finding.id == "data_wait"
    assert v.finding.severity == severity
    assert v.bottleneck == "data_loading"
    assert v.lost_pct == wait_pct
    assert v.finding.evidence["wait_pct"] == wait_pct
    assert ("not enough to call it critical" in v.finding.title) == (measured == 19)


def test_data_wait_advice_is_computed_from_the_run():
    summary = data_summary(38.0, step_s=1.0, loader={"num_workers": 0, "pin_memory": False})
    summary = Summary(**{**summary.__dict__, "device": Device(kind="cuda")})
    v = only(data_wait(ctx(summary, meta={"host": {"cpu_count": 16}})))
    assert v.finding.advice[0] == (
        "data wait is 38% of the step with `num_workers=0`; try "
        "`DataLoader(num_workers=2, pin_memory=True, persistent_workers=True)` — expected gain up to 1.6×"
    )


def test_data_wait_reads_loader_settings_from_meta_when_the_summary_has_none():
    v = only(data_wait(ctx(data_summary(30.0), meta={"loader": {"num_workers": 3}})))
    assert v.finding.evidence["loader"] == {"num_workers": 3}
    assert "`num_workers=3`" in v.finding.advice[0]


def test_data_wait_not_measured_or_too_few_steps_is_skipped():
    assert data_wait(ctx(Summary())).skipped.startswith("no data wait measured")
    assert data_wait(ctx(data_summary(50.0, measured=1))).skipped == "only 1 measured steps for the data wait"


def test_h2d_copy_at_its_threshold():
    v = only(data_wait(ctx(data_summary(0.0, h2d_s_per_step=0.01))))  # 10% of 0.1 s
    assert v.finding.id == "h2d_copy"
    assert v.finding.evidence["h2d_pct"] == pytest.approx(10.0)
    assert data_wait(ctx(data_summary(0.0, h2d_s_per_step=0.0099))).verdicts == ()


# ---- device ------------------------------------------------------------------------------

def test_device_busy_below_half_without_data_wait_is_host_overhead():
    s = Summary(device=Device(kind="cuda", util_pct=49.9), data=Data(wait_pct=2.0))
    v = only(device_util(ctx(s)))
    assert v.finding.id == "device_idle"
    assert v.bottleneck == "host_overhead"
    assert v.lost_pct == pytest.approx(100 - 49.9 - 2.0)
    assert device_util(ctx(Summary(device=Device(kind="cuda", util_pct=50.0)))).checked == "device busy 50% (≥ 50%)"


def test_cpu_threads_starved_by_other_processes_is_contention():
    s = Summary(device=Device(kind="cpu", util_pct=48.0), data=Data(wait_pct=0.0),
                host=Host(system_cpu_pct=90.0, cpu_threads=2))
    v = only(device_util(ctx(s)))
    assert v.finding.id == "cpu_contention"
    assert v.finding.title == "Other processes take the CPU: it is 90% busy while this run's threads get 48% of their time"
    assert v.bottleneck is None  # the machine's slowness, not the training's
    s = Summary(device=Device(kind="cpu", util_pct=48.0), data=Data(wait_pct=0.0),
                host=Host(system_cpu_pct=100.0, process_cpu_pct=96.0, cpu_threads=2))
    v = only(device_util(ctx(s, meta={"cpu_count": 4})))
    assert v.finding.title.endswith("get 48% of their time; this process had 24% of the machine")
    assert v.finding.evidence["process_share_pct"] == 24.0
    s = Summary(device=Device(kind="cpu", util_pct=48.0), host=Host(system_cpu_pct=79.0, cpu_threads=2))
    assert only(device_util(ctx(s))).finding.id == "device_idle"


def test_idle_device_explained_by_data_wait_is_left_to_the_data_rule():
    s = Summary(device=Device(kind="cuda", util_pct=30.0), data=Data(wait_pct=35.0))
    outcome = device_util(ctx(s))
    assert outcome.verdicts == ()
    assert "explained by the data wait (35%)" in outcome.checked


def test_idle_time_the_data_wait_does_not_explain_is_flagged():
    # idle 70% of the time, waiting for data 34%: less than half of the idle time
    s = Summary(device=Device(kind="cuda", util_pct=30.0), data=Data(wait_pct=34.0))
    v = only(device_util(ctx(s)))
    assert v.finding.id == "device_idle"
    assert v.lost_pct == pytest.approx(36.0)


def test_device_without_a_reading_is_not_checked():
    assert device_util(ctx(Summary(device=Device(kind="mps")))).skipped == "no utilization reading for the mps"


def test_memory_peak_from_the_summary_and_host_memory_on_cpu():
    v = only(memory(ctx(Summary(device=Device(kind="cpu", memory_used_pct=60.0, memory_used_pct_max=97.0)))))
    assert v.finding.title == "Host memory (the CPU's) 97% used: close to running out"


def test_memory_risk_uses_the_peak_of_the_sampler_rows():
    s = Summary(device=Device(kind="cuda", memory_used_pct=80.0))
    v = only(memory(ctx(s, system=[{"memory_used_pct": 70.0}, {"memory_used_pct": 95.0}])))
    assert v.bottleneck == "memory_capacity"
    assert v.finding.evidence["memory_used_pct_max"] == 95.0
    assert memory(ctx(Summary(device=Device(memory_used_pct=94.9)))).checked == "memory 95% used at most"


def test_thermal_margin_and_throttling():
    hot = Device(kind="cuda", temperature_c=80.0, slowdown_temperature_c=85.0)
    v = only(thermal(ctx(Summary(device=hot))))
    assert v.bottleneck == "thermal"
    assert v.finding.evidence["margin_c"] == 5.0
    cool = Device(kind="cuda", temperature_c=79.0, slowdown_temperature_c=85.0)
    assert thermal(ctx(Summary(device=cool))).checked == "79 °C, 6 °C below slowdown"
    throttled = Device(kind="cuda", temperature_c=60.0, throttle_pct=5.0)
    assert only(thermal(ctx(Summary(device=throttled)))).finding.title == "Clocks throttled 5% of the time"
    assert thermal(ctx(Summary(device=Device(kind="cuda", throttle_pct=4.9)))).verdicts == ()
    assert thermal(ctx(Summary(device=Device(kind="cpu")))).skipped is not None


def test_throttle_reasons_are_named_and_power_gets_power_advice():
    d = Device(kind="cuda", throttle_pct=30.0, power_w=698.0, power_limit_w=700.0,
               throttle_reasons={"sw_power_cap": 28.0, "sw_thermal_slowdown": 2.0})
    v = only(thermal(ctx(Summary(device=d))))
    assert v.finding.title == "Clocks throttled 30% of the time (sw_power_cap 28%, sw_thermal_slowdown 2%)"
    assert v.finding.advice[0].startswith("the power limit holds the clocks back (698 W of 700 W)")
    assert v.finding.advice[1].startswith("check cooling and airflow")
    assert v.lost_pct == 30.0


def test_the_hottest_reading_counts():
    d = Device(kind="cuda", temperature_c=70.0, temperature_c_max=81.0, slowdown_temperature_c=85.0)
    v = only(thermal(ctx(Summary(device=d), system=[{"temperature_c": 75.0}])))
    assert v.finding.evidence["temperature_c_max"] == 81.0


# ---- roofline and bandwidth ---------------------------------------------------------------

def test_bandwidth_bound_roofline_names_the_families_moving_the_bytes():
    f = Flops(roofline="bandwidth_bound", intensity_flop_per_byte=0.25, ridge_flop_per_byte=12.0,
              by_family=[{"family": "elementwise", "flops": 1e6, "bytes": 3e6, "intensity_flop_per_byte": 0.33,
                          "roofline": "bandwidth_bound"},
                         {"family": "matmul", "flops": 9e6, "bytes": 1e6, "intensity_flop_per_byte": 9.0,
                          "roofline": "compute_bound"}])
    v = only(hardware(ctx(Summary(flops=f))))
    assert v.bottleneck == "memory_bandwidth"
    assert v.finding.severity == "warning"
    assert v.finding.title == "Memory-bandwidth-bound: 0.25 FLOP per byte below the ridge of 12"
    assert v.finding.advice[0] == "elementwise ops move 75% of the bytes at 0.33 FLOP/byte"
    f = Flops(roofline="bandwidth_bound", intensity_flop_per_byte=0.0)
    v = only(hardware(ctx(Summary(flops=f, bandwidth=Bandwidth(achieved_gb_s=23.6)))))
    assert v.finding.title == "Memory-bandwidth-bound: the step only moves data (no matmul FLOPs) at 23.6 GB/s"


def test_high_measured_bandwidth_is_bandwidth_bound_without_a_roofline():
    s = Summary(bandwidth=Bandwidth(util_pct=60.0, source="nvml_memory_busy"))
    v = only(hardware(ctx(s)))
    assert v.finding.title == "Memory-bandwidth-bound: bandwidth 60% of peak (nvml_memory_busy)"
    s = Summary(bandwidth=Bandwidth(util_pct=59.0, source="estimate"))
    assert hardware(ctx(s)).checked == "bandwidth 59% of peak (estimate)"


def test_compute_bound_is_the_healthy_limit_with_mfu():
    f = Flops(roofline="compute_bound", achieved_tflops=0.5, mfu_pct=62.0, peak_source="ceilings",
              dtype="float32")
    v = only(hardware(ctx(Summary(flops=f, device=Device(kind="cpu")))))
    assert (v.finding.id, v.finding.severity, v.bottleneck) == ("compute_bound", "info", "compute")
    assert v.finding.title == "Compute-bound: 0.5 TFLOP/s, 62% of the peak (ceilings)"


def test_fp32_on_cuda_gets_mixed_precision_advice():
    f = Flops(roofline="compute_bound", dtype="float32")
    v = only(hardware(ctx(Summary(flops=f, device=Device(kind="cuda")))))
    assert v.finding.advice[0].startswith("bf16 autocast")


def test_busy_device_without_flop_count_is_compute_with_a_caveat():
    v = only(hardware(ctx(Summary(device=Device(kind="cuda", util_pct=90.0)))))
    assert (v.finding.id, v.bottleneck) == ("device_busy", "compute")
    assert "no FLOP count" in v.finding.title
    counted_no_peak = Summary(device=Device(kind="cpu", util_pct=99.0), flops=Flops(per_step=1e9))
    v = only(hardware(ctx(counted_no_peak)))
    assert v.finding.title == ("Device busy 99% of the time; no peak known for the cpu, so "
                               "compute and bandwidth cannot be told apart")
    assert "trainpace ceilings" in v.finding.advice[0]
    assert hardware(ctx(Summary(device=Device(util_pct=89.0)))).skipped is not None
    counted = hardware(ctx(Summary(device=Device(kind="cpu"), flops=Flops(per_step=1e9))))
    assert counted.skipped == ("FLOPs counted but no peak known for the cpu (trainpace ceilings "
                               "measures one), so no roofline verdict")


# ---- host overhead --------------------------------------------------------------------------

def test_launch_bound_kernels_from_a_trace():
    s = Summary(device=Device(kind="cuda", util_pct=40.0),
                kernels=Kernels(per_step=900, median_us=4.0, short_pct=50.0, source="trace"))
    v = only(host_overhead(ctx(s)))
    assert v.finding.id == "launch_bound"
    assert v.finding.title == "Launch-bound: 900 kernels per step, 50% of them short (median 4 µs)"
    assert v.lost_pct == 60.0
    s = Summary(kernels=Kernels(short_pct=49.0))
    assert host_overhead(ctx(s)).checked == "49% short kernels"


def test_short_kernels_behind_a_deep_launch_queue_are_not_launch_bound():
    starved = Kernels(per_step=900, short_pct=60.0, launch_lag_us=100.0, source="trace")
    s = Summary(device=Device(kind="cuda", util_pct=40.0), kernels=starved)
    assert only(host_overhead(ctx(s))).finding.id == "launch_bound"
    deep = Kernels(per_step=900, short_pct=60.0, launch_lag_us=9600.0, source="trace")
    outcome = host_overhead(ctx(Summary(device=Device(kind="cuda"), kernels=deep)))
    assert outcome.verdicts == ()
    assert outcome.checked == ("60% short kernels but the launch queue is deep (median "
                               "launch-to-start lag 9600 µs): not launch-bound")


def test_saturated_host_cpu_matters_only_when_a_device_does_the_compute():
    busy = Host(system_cpu_pct=95.0, process_cpu_pct=180.0)
    v = only(host_overhead(ctx(Summary(device=Device(kind="cuda"), host=busy))))
    assert v.finding.id == "host_cpu"
    assert host_overhead(ctx(Summary(device=Device(kind="cpu"), host=busy))).verdicts == ()
    assert host_overhead(ctx(Summary())).skipped is not None


def test_a_host_cpu_busy_with_other_processes_is_the_machines():
    # 4 cores 95% busy; this run and its workers use 180% = 45% of the machine: others 50%
    busy = Host(system_cpu_pct=95.0, process_cpu_pct=180.0)
    v = only(host_overhead(ctx(Summary(device=Device(kind="cuda"), host=busy),
                                     meta={"cpu_count": 4})))
    assert v.finding.title == ("The host CPUs are 95% busy, 50% of them with other processes "
                               "(this run and its workers: 45%)")
    assert v.finding.evidence["others_pct"] == pytest.approx(50.0)
    assert v.bottleneck is None
    # on 2 cores the same 180% is 90% of the machine: the run's own load
    v = only(host_overhead(ctx(Summary(device=Device(kind="cuda"), host=busy),
                                     meta={"cpu_count": 2})))
    assert v.bottleneck == "host_overhead"
    assert v.finding.advice[0].startswith("this run keeps the CPU busy")


def test_rules_run_in_the_experts_order():
    names = [name for name, _ in rules.RULES]
    assert names.index("step-time outliers") < names.index("roofline and bandwidth")
    assert names.index("roofline and bandwidth") < names.index("device utilization")
    assert names.index("device utilization") < names.index("data loading")
    assert names.index("data loading") < names.index("communication") < names.index("rank imbalance")


def test_samples_per_step_for_advice():
    s = Summary(throughput=Throughput(samples_per_s=640.0, steps_per_s=10.0),
                device=Device(kind="cuda", util_pct=20.0))
    v = only(device_util(ctx(s)))
    assert "(now 64 samples per step)" in v.finding.advice[0]




def test_a_figure_over_its_peak_is_a_wrong_peak_finding_never_a_figure():
    from trainpace.devices.specs import Peak, Peaks
    from trainpace.measure.flops import FamilyCount, StepCount
    from trainpace.measure.roofline import step_figures

    count = StepCount(flops=1e9, bytes=1e8, ops=1, flops_by_dtype={"torch.float32": 1e9},
                      families=(FamilyCount(family="matmul", flops=1e9, bytes=1e8, ops=1),))
    # the case: a quick ceiling 84× too low made "MFU 3760%"
    flops, _ = step_figures(count, peaks=Peaks(tflops={"float32": Peak(0.0024, "ceilings")}),
                            step_s=0.011)
    assert flops.mfu_pct is None and "exceeds 100%" in flops.error
    outcome = hardware(ctx(Summary(flops=flops)))
    wrong = outcome.verdicts[0].finding
    assert wrong.id == "peak_wrong"
    assert wrong.evidence["mfu_pct"] is None
    assert "MFU 3788% exceeds 100%" in wrong.title
    assert "`trainpace ceilings`" in wrong.advice[0]


def test_the_producers_family_figures_reach_the_bandwidth_advice():
    from trainpace.devices.specs import Peak, Peaks
    from trainpace.measure.flops import FamilyCount, StepCount
    from trainpace.measure.roofline import step_figures

    count = StepCount(flops=2e6, bytes=8e6, ops=3, flops_by_dtype={"torch.float32": 2e6},
                      families=(FamilyCount(family="elementwise", flops=2e6, bytes=8e6, ops=3),))
    flops, _ = step_figures(count, peaks=Peaks(tflops={"float32": Peak(1.0, "t")},
                                               bandwidth_gb_s=Peak(100.0, "t")), step_s=0.01)
    v = only(hardware(ctx(Summary(flops=flops))))
    assert v.finding.advice[0] == "elementwise ops move 100% of the bytes at 0.25 FLOP/byte"


def test_python_between_operators_is_host_overhead():
    from trainpace.diagnosis import diagnose
    from trainpace.summary import Host, Summary

    summary = Summary(host=Host(python_pct=42.0))
    found = {f.id: f for f in diagnose(summary).findings}
    assert found["python_overhead"].severity == "warning"
    assert found["python_overhead"].evidence["python_pct"] == 42.0
    assert diagnose(Summary(host=Host(python_pct=12.0))).findings[0].id != "python_overhead"


# ---- memory ------------------------------------------------------------------------------


def memory_rows(rss_gb, total_gb=16.0, used_pct=98.0, count=5):
    return [{"t_s": float(i), "host": {"memory_used_pct": used_pct, "rss_gb": rss_gb[i % len(rss_gb)],
                                       "memory_total_gb": total_gb}} for i in range(count)]


def test_host_memory_full_of_other_processes_is_the_machines():
    # issue 25 §4: 98% used while this process held 0.35–0.41 GB: no CUDA advice on a CPU run
    s = Summary(device=Device(kind="cpu", memory_used_pct=98.0))
    v = only(memory(ctx(s, system=memory_rows([0.35, 0.41]))))
    f = v.finding
    assert f.title == ("Host memory 98% used, by other processes: this one held at most 0.41 GB "
                       "(3% of 16 GB)")
    assert f.evidence["process_rss_gb_max"] == 0.41
    assert f.evidence["process_pct"] == pytest.approx(100 * 0.41 / 16)
    assert v.bottleneck is None
    assert not any("PYTORCH_CUDA_ALLOC_CONF" in a or "checkpoint" in a for a in f.advice)


def test_host_memory_full_of_this_process_gets_advice_without_cuda_settings():
    s = Summary(device=Device(kind="cpu", memory_used_pct=98.0))
    v = only(memory(ctx(s, system=memory_rows([14.0]))))
    assert v.bottleneck == "memory_capacity"
    assert v.finding.title == "Host memory (the CPU's) 98% used: close to running out"
    assert v.finding.advice[-1] == "bf16 autocast halves the activations' memory"
    assert not any("PYTORCH_CUDA_ALLOC_CONF" in a for a in v.finding.advice)


def test_device_memory_full_on_cuda_names_the_allocator_setting():
    s = Summary(device=Device(kind="cuda", memory_used_pct=97.0))
    v = only(memory(ctx(s)))
    assert v.bottleneck == "memory_capacity"
    assert v.finding.advice[-1] == ("bf16 autocast; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                                    "against fragmentation")


def test_framework_work_is_its_own_finding_with_its_measured_share():
    facts = {"name": "lightning", "steps": 90, "work_s_per_step": 0.0024,
             "step_s_mean": 0.0024 / 0.31, "work_pct": 31.0}
    v = only(framework_work(ctx(meta={"framework": facts})))
    assert v.finding.id == "framework_work"
    assert v.finding.severity == "warning"
    assert v.finding.title.startswith("Framework work per step: 2.4 ms, 31% of the step")
    assert v.finding.evidence["work_pct"] == 31.0
    assert v.finding.evidence["framework"] == "lightning"
    assert "log_every_n_steps" in v.finding.advice[0]
    assert (v.bottleneck, v.lost_pct) == ("host_overhead", 31.0)
    # a smaller share is an info finding that names no bottleneck; under 10% only a check
    v = only(framework_work(ctx(meta={"framework": {**facts, "work_pct": 12.0}})))
    assert (v.finding.severity, v.bottleneck) == ("info", None)
    outcome = framework_work(ctx(meta={"framework": {**facts, "work_pct": 4.0}}))
    assert not outcome.verdicts and outcome.checked == "framework work per step: 2.4 ms, 4%"
    # a plain loop, or a framework run with no step past its warm-up: skipped, with why
    assert "no framework integration" in framework_work(ctx()).skipped
    assert "no step past the warm-up" in framework_work(
        ctx(meta={"framework": {"name": "huggingface"}})).skipped
