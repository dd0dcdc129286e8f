"""Each rule at and around its thresholds, on hand-made summaries and step records."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainpace.diagnose import anomalies, rules
from trainpace.diagnose._context import Context
from trainpace.diagnose.thresholds import Thresholds
from trainpace.summary import (
    Bandwidth,
    Communication,
    Data,
    Device,
    Flops,
    Host,
    Kernels,
    RankEntry,
    Steps,
    Summary,
    Throughput,
    Time,
)


def records(step_s, wait_s=None, warmup=0):
    wait_s = wait_s or [0.0] * len(step_s)
    out, t = [], 0.0
    for i, (s, w) in enumerate(zip(step_s, wait_s, strict=False), start=1):
        t += s
        out.append({"step": i, "t_s": t, "step_s": s, "wait_s": w, "samples": 8, "warmup": i <= warmup})
    return out


def ctx(summary=None, steps=None, system=None, meta=None, **thresholds):
    return Context(summary or Summary(), steps, system, meta or {}, Thresholds(**thresholds))


def only(outcome):
    assert len(outcome.verdicts) == 1, outcome
    return outcome.verdicts[0]


def data_summary(wait_pct, measured=100, step_s=0.1, **data):
    return Summary(
        steps=Steps(total=measured + 5, warmup=5, measured=measured),
        time=Time(step_s_median=step_s),
        data=Data(wait_pct=wait_pct, wait_s_per_step=step_s * wait_pct / 100, **data),
    )


# ---- data loading ----------------------------------------------------------------------

def test_data_wait_below_warning_is_checked_not_flagged():
    outcome = rules.data_wait(ctx(data_summary(9.9)))
    assert outcome.verdicts == ()
    assert outcome.checked == "data wait 9.9% of the step (< 10%)"


@pytest.mark.parametrize(("wait_pct", "measured", "severity"), [
    (10.0, 100, "warning"), (19.9, 100, "warning"), (20.0, 20, "critical"), (20.0, 19, "warning"),
])
def test_data_wait_bands_and_the_step_count_gate(wait_pct, measured, severity):
    v = only(rules.data_wait(ctx(data_summary(wait_pct, measured))))
    assert v.finding.id == "data_wait"
    assert v.finding.severity == severity
    assert v.bottleneck == "data_loading"
    assert v.lost_pct == wait_pct
    assert v.finding.evidence["wait_pct"] == wait_pct
    assert ("not enough to call it critical" in v.finding.title) == (measured == 19)


def test_data_wait_advice_is_computed_from_the_run():
    summary = data_summary(38.0, step_s=1.0, loader={"num_workers": 0, "pin_memory": False})
    summary = Summary(**{**summary.__dict__, "device": Device(kind="cuda")})
    v = only(rules.data_wait(ctx(summary, meta={"host": {"cpu_count": 16}})))
    assert v.finding.advice[0] == (
        "data wait is 38% of the step with `num_workers=0`; try "
        "`DataLoader(num_workers=2, pin_memory=True, persistent_workers=True)` — expected gain up to 1.6×"
    )


def test_data_wait_reads_loader_settings_from_meta_when_the_summary_has_none():
    v = only(rules.data_wait(ctx(data_summary(30.0), meta={"loader": {"num_workers": 3}})))
    assert v.finding.evidence["loader"] == {"num_workers": 3}
    assert "`num_workers=3`" in v.finding.advice[0]


def test_data_wait_not_measured_or_too_few_steps_is_skipped():
    assert rules.data_wait(ctx(Summary())).skipped.startswith("no data wait measured")
    assert rules.data_wait(ctx(data_summary(50.0, measured=1))).skipped == "only 1 measured steps for the data wait"


def test_h2d_copy_at_its_threshold():
    v = only(rules.data_wait(ctx(data_summary(0.0, h2d_s_per_step=0.01))))  # 10% of 0.1 s
    assert v.finding.id == "h2d_copy"
    assert v.finding.evidence["h2d_pct"] == pytest.approx(10.0)
    assert rules.data_wait(ctx(data_summary(0.0, h2d_s_per_step=0.0099))).verdicts == ()


# ---- device ------------------------------------------------------------------------------

def test_device_busy_below_half_without_data_wait_is_host_overhead():
    s = Summary(device=Device(kind="cuda", util_pct=49.9), data=Data(wait_pct=2.0))
    v = only(rules.device_util(ctx(s)))
    assert v.finding.id == "device_idle"
    assert v.bottleneck == "host_overhead"
    assert v.lost_pct == pytest.approx(100 - 49.9 - 2.0)
    assert rules.device_util(ctx(Summary(device=Device(kind="cuda", util_pct=50.0)))).checked == "device busy 50% (≥ 50%)"


def test_cpu_threads_starved_by_other_processes_is_contention():
    s = Summary(device=Device(kind="cpu", util_pct=48.0), data=Data(wait_pct=0.0),
                host=Host(system_cpu_pct=90.0, cpu_threads=2))
    v = only(rules.device_util(ctx(s)))
    assert v.finding.id == "cpu_contention"
    assert v.finding.title == "Other processes take the CPU: it is 90% busy while this run's threads get 48% of their time"
    assert v.bottleneck == "host_overhead"
    s = Summary(device=Device(kind="cpu", util_pct=48.0), host=Host(system_cpu_pct=89.0, cpu_threads=2))
    assert only(rules.device_util(ctx(s))).finding.id == "device_idle"


def test_idle_device_explained_by_data_wait_is_left_to_the_data_rule():
    s = Summary(device=Device(kind="cuda", util_pct=30.0), data=Data(wait_pct=40.0))
    outcome = rules.device_util(ctx(s))
    assert outcome.verdicts == ()
    assert "explained by the data wait (40%)" in outcome.checked


def test_device_without_a_reading_is_not_checked():
    assert rules.device_util(ctx(Summary(device=Device(kind="mps")))).skipped == "no utilization reading for the mps"


def test_memory_peak_from_the_summary_and_host_memory_on_cpu():
    v = only(rules.memory(ctx(Summary(device=Device(kind="cpu", memory_used_pct=60.0, memory_used_pct_max=97.0)))))
    assert v.finding.title == "Host memory (the CPU's) 97% used: close to running out"


def test_memory_risk_uses_the_peak_of_the_sampler_rows():
    s = Summary(device=Device(kind="cuda", memory_used_pct=80.0))
    v = only(rules.memory(ctx(s, system=[{"memory_used_pct": 70.0}, {"memory_used_pct": 95.0}])))
    assert v.bottleneck == "memory_capacity"
    assert v.finding.evidence["memory_used_pct_max"] == 95.0
    assert rules.memory(ctx(Summary(device=Device(memory_used_pct=94.9)))).checked == "memory 95% used at most"


def test_thermal_margin_and_throttling():
    hot = Device(kind="cuda", temperature_c=80.0, slowdown_temperature_c=85.0)
    v = only(rules.thermal(ctx(Summary(device=hot))))
    assert v.bottleneck == "thermal"
    assert v.finding.evidence["margin_c"] == 5.0
    cool = Device(kind="cuda", temperature_c=79.0, slowdown_temperature_c=85.0)
    assert rules.thermal(ctx(Summary(device=cool))).checked == "79 °C, 6 °C below slowdown"
    throttled = Device(kind="cuda", temperature_c=60.0, throttle_pct=5.0)
    assert only(rules.thermal(ctx(Summary(device=throttled)))).finding.title == "Clocks throttled 5% of the time"
    assert rules.thermal(ctx(Summary(device=Device(kind="cuda", throttle_pct=4.9)))).verdicts == ()
    assert rules.thermal(ctx(Summary(device=Device(kind="cpu")))).skipped is not None


def test_throttle_reasons_are_named_and_power_gets_power_advice():
    d = Device(kind="cuda", throttle_pct=30.0, power_w=698.0, power_limit_w=700.0,
               throttle_reasons={"sw_power_cap": 28.0, "sw_thermal_slowdown": 2.0})
    v = only(rules.thermal(ctx(Summary(device=d))))
    assert v.finding.title == "Clocks throttled 30% of the time (sw_power_cap 28%, sw_thermal_slowdown 2%)"
    assert v.finding.advice[0].startswith("the power limit holds the clocks back (698 W of 700 W)")
    assert v.finding.advice[1].startswith("check cooling and airflow")
    assert v.lost_pct == 30.0


def test_the_hottest_reading_counts():
    d = Device(kind="cuda", temperature_c=70.0, temperature_c_max=81.0, slowdown_temperature_c=85.0)
    v = only(rules.thermal(ctx(Summary(device=d), system=[{"temperature_c": 75.0}])))
    assert v.finding.evidence["temperature_c_max"] == 81.0


# ---- roofline and bandwidth ---------------------------------------------------------------

def test_bandwidth_bound_roofline_names_the_families_moving_the_bytes():
    f = Flops(roofline="bandwidth_bound", intensity_flop_per_byte=0.25, ridge_flop_per_byte=12.0,
              by_family=[{"family": "elementwise", "flops": 1e6, "bytes": 3e6, "intensity": 0.33,
                          "roofline": "bandwidth_bound"},
                         {"family": "matmul", "flops": 9e6, "bytes": 1e6, "intensity": 9.0,
                          "roofline": "compute_bound"}])
    v = only(rules.hardware(ctx(Summary(flops=f))))
    assert v.bottleneck == "memory_bandwidth"
    assert v.finding.severity == "warning"
    assert v.finding.title == "Memory-bandwidth-bound: 0.25 FLOP per byte below the ridge of 12"
    assert v.finding.advice[0] == "elementwise ops move 75% of the bytes at 0.33 FLOP/byte"
    f = Flops(roofline="bandwidth_bound", intensity_flop_per_byte=0.0)
    v = only(rules.hardware(ctx(Summary(flops=f, bandwidth=Bandwidth(achieved_gb_s=23.6)))))
    assert v.finding.title == "Memory-bandwidth-bound: the step only moves data (no matmul FLOPs) at 23.6 GB/s"


def test_high_measured_bandwidth_is_bandwidth_bound_without_a_roofline():
    s = Summary(bandwidth=Bandwidth(util_pct=60.0, source="nvml_memory_busy"))
    v = only(rules.hardware(ctx(s)))
    assert v.finding.title == "Memory-bandwidth-bound: bandwidth 60% of peak (nvml_memory_busy)"
    s = Summary(bandwidth=Bandwidth(util_pct=59.0, source="estimate"))
    assert rules.hardware(ctx(s)).checked == "bandwidth 59% of peak (estimate)"


def test_compute_bound_is_the_healthy_limit_with_mfu():
    f = Flops(roofline="compute_bound", achieved_tflops=0.5, mfu_pct=62.0, peak_source="ceilings",
              dtype="float32")
    v = only(rules.hardware(ctx(Summary(flops=f, device=Device(kind="cpu")))))
    assert (v.finding.id, v.finding.severity, v.bottleneck) == ("compute_bound", "info", "compute")
    assert v.finding.title == "Compute-bound: 0.5 TFLOP/s, 62% of the peak (ceilings)"


def test_fp32_on_cuda_gets_mixed_precision_advice():
    f = Flops(roofline="compute_bound", dtype="float32")
    v = only(rules.hardware(ctx(Summary(flops=f, device=Device(kind="cuda")))))
    assert v.finding.advice[0].startswith("bf16 autocast")


def test_busy_device_without_flop_count_is_compute_with_a_caveat():
    v = only(rules.hardware(ctx(Summary(device=Device(kind="cuda", util_pct=90.0)))))
    assert (v.finding.id, v.bottleneck) == ("device_busy", "compute")
    assert rules.hardware(ctx(Summary(device=Device(util_pct=89.0)))).skipped is not None


# ---- step-time anomalies -------------------------------------------------------------------

def test_one_stall_over_three_medians():
    steps = records([0.1] * 15 + [0.31] + [0.1] * 14)
    v = only(rules.step_outliers(ctx(steps=steps)))
    assert v.finding.id == "stalls"
    ev = v.finding.evidence
    assert (ev["count"], ev["worst_step"], ev["period_steps"]) == (1, 16, None)
    assert ev["lost_s"] == pytest.approx(0.21)
    assert ev["lost_pct"] == pytest.approx(100 * 0.21 / 3.21)
    assert v.finding.severity == "warning"
    assert v.bottleneck == "host_overhead"


def test_a_step_under_three_medians_is_not_a_stall():
    outcome = rules.step_outliers(ctx(steps=records([0.1] * 15 + [0.29] + [0.1] * 14)))
    assert outcome.verdicts == ()
    assert outcome.checked.startswith("no step over 3× the median (100 ms) in 30 steps")


def test_periodic_slow_steps_are_found_with_their_period():
    step_s = [0.2 if i % 10 == 0 else 0.1 for i in range(1, 61)]
    v = only(rules.step_outliers(ctx(steps=records(step_s))))
    assert v.finding.id == "periodic_stall"
    ev = v.finding.evidence
    assert (ev["period_steps"], ev["count"]) == (10, 6)
    assert ev["outlier_steps"] == [10, 20, 30, 40, 50, 60]
    assert ev["lost_pct"] == pytest.approx(100 * 0.6 / 6.6)
    assert v.finding.title.startswith("Periodic slow step every 10 steps: 6 steps took 200 ms instead of 100 ms")
    assert "checkpoint save" in v.finding.advice[0]


def test_periodic_stall_in_the_data_wait_points_at_the_loader():
    step_s = [0.5 if i % 8 == 0 else 0.1 for i in range(1, 41)]
    wait_s = [0.4 if i % 8 == 0 else 0.0 for i in range(1, 41)]
    v = only(rules.step_outliers(ctx(steps=records(step_s, wait_s))))
    assert v.finding.title.startswith("Periodic stall every 8 steps")
    assert v.bottleneck == "data_loading"
    assert v.finding.evidence["in_data_wait_pct"] == pytest.approx(100.0)
    assert "persistent_workers=True" in v.finding.advice[0]


def test_small_outlier_cost_is_info_without_a_bottleneck():
    step_s = [0.16 if i % 25 == 0 else 0.1 for i in range(1, 101)]  # 4 × 0.06 s of 10.24 s
    v = only(rules.step_outliers(ctx(steps=records(step_s))))
    assert v.finding.severity == "info"
    assert v.bottleneck is None


def periodic(steps, first=1, last=None, extra=None):
    spikes = {s: (extra or {}).get(s, 1.0) for s in steps}
    return anomalies.periodic(spikes, first, last or max(steps), Thresholds())


def test_period_tolerates_one_step_of_jitter():
    assert periodic([10, 20, 31, 40]) == (10, [10, 20, 31, 40])
    assert periodic([10, 20, 35, 40]) is None
    assert periodic([1, 2, 3]) is None


def test_period_survives_unrelated_stalls_and_keeps_one_step_per_cycle():
    assert periodic([10, 20, 27, 30, 40, 50, 60]) == (10, [10, 20, 30, 40, 50, 60])
    # the step after each slow step is slow too (cold caches): one per cycle, the nearest
    assert periodic([10, 11, 20, 21, 30, 31, 40, 41]) == (10, [10, 20, 30, 40])


def test_the_period_that_explains_the_most_time_wins():
    # big stalls every 10 steps, smaller slow steps clustered after each (cold caches)
    slow = [10, 13, 14, 20, 23, 24, 30, 33, 34, 40, 43, 44, 50, 53, 54]
    extra = {s: 0.25 if s % 10 == 0 else 0.015 for s in slow}
    assert periodic(slow, extra=extra) == (10, [10, 20, 30, 40, 50])


def test_noise_between_periodic_stalls_does_not_halve_the_period():
    # stalls every 10 steps; on a loaded machine, slow steps also fall on the 5s in between
    slow = list(range(5, 61, 5))
    extra = {s: 0.25 if s % 10 == 0 else 0.02 for s in slow}
    assert periodic(slow, extra=extra) == (10, [10, 20, 30, 40, 50, 60])


def test_a_period_must_fill_most_of_its_places_in_the_run():
    assert periodic([10, 20, 30], last=200) is None  # 3 of the 20 places every 10 steps
    assert periodic([10, 20, 30, 40, 60, 70, 80, 90, 100], last=100) == (10, [10, 20, 30, 40, 60, 70, 80, 90, 100])


def test_period_search_is_bounded_on_a_noisy_run():
    import random
    import time as clock

    rng = random.Random(0)
    steps = sorted(rng.sample(range(1, 100_000), 3000))
    start = clock.perf_counter()
    assert periodic(steps, last=100_000) is None
    assert clock.perf_counter() - start < 2.0


def test_an_unrelated_stall_beside_a_periodic_one_is_its_own_finding():
    step_s = [0.1] * 60
    for i in (10, 20, 30, 40, 50, 60):
        step_s[i - 1] = 0.2
    step_s[26] = 0.5  # step 27
    outcome = rules.step_outliers(ctx(steps=records(step_s)))
    assert [v.finding.id for v in outcome.verdicts] == ["periodic_stall", "stalls"]
    assert outcome.verdicts[1].finding.evidence["outlier_steps"] == [27]


def test_warmup_steps_are_not_outliers_and_few_steps_are_skipped():
    steps = records([2.0, 1.0] + [0.1] * 20, warmup=2)
    assert rules.step_outliers(ctx(steps=steps)).verdicts == ()
    assert rules.step_outliers(ctx(steps=records([0.1] * 9))).skipped == "only 9 measured steps; the stall check needs 10"
    assert rules.step_outliers(ctx()).skipped.startswith("no per-step records")


def test_drift_at_ten_percent():
    step_s = [1.0] * 10 + [1.05] * 20 + [1.1] * 10
    v = only(rules.drift(ctx(steps=records(step_s))))
    assert v.finding.id == "drift"
    assert v.finding.evidence["drift_pct"] == pytest.approx(10.0)
    assert "in the step itself" in v.finding.advice[0]
    steady = rules.drift(ctx(steps=records([1.0] * 10 + [1.05] * 20 + [1.099] * 10)))
    assert steady.verdicts == ()
    assert steady.checked.startswith("step time steady (+10% from 1 s to 1.1 s over 40 steps")


def test_drift_in_the_data_wait_says_so():
    step_s = [0.1] * 10 + [0.13] * 10
    wait_s = [0.0] * 10 + [0.03] * 10
    v = only(rules.drift(ctx(steps=records(step_s, wait_s))))
    assert v.finding.advice[0].startswith("the growth is in the data wait")


def test_falling_step_time_hints_at_warmup():
    v = only(rules.drift(ctx(Summary(steps=Steps(warmup=3)), steps=records([0.2] * 10 + [0.1] * 30))))
    assert v.finding.severity == "info"
    assert v.finding.advice[0].startswith("exclude more warm-up, e.g. Meter(warmup=12)")


def test_drift_ignores_stalls_and_needs_twenty_steps():
    step_s = [0.1] * 30 + [1.0]
    assert rules.drift(ctx(steps=records(step_s))).verdicts == ()
    assert rules.drift(ctx(steps=records([0.1] * 19))).skipped == "only 19 measured steps; the drift check needs 20"


# ---- host overhead --------------------------------------------------------------------------

def test_launch_bound_kernels_from_a_trace():
    s = Summary(device=Device(kind="cuda", util_pct=40.0),
                kernels=Kernels(per_step=900, median_us=4.0, short_pct=50.0, source="trace"))
    v = only(rules.host_overhead(ctx(s)))
    assert v.finding.id == "launch_bound"
    assert v.finding.title == "Launch-bound: 900 kernels per step, 50% of them short (median 4 µs)"
    assert v.lost_pct == 60.0
    s = Summary(kernels=Kernels(short_pct=49.0))
    assert rules.host_overhead(ctx(s)).checked == "49% short kernels"


def test_saturated_host_cpu_matters_only_when_a_device_does_the_compute():
    busy = Host(system_cpu_pct=95.0, process_cpu_pct=180.0)
    v = only(rules.host_overhead(ctx(Summary(device=Device(kind="cuda"), host=busy))))
    assert v.finding.id == "host_cpu"
    assert rules.host_overhead(ctx(Summary(device=Device(kind="cpu"), host=busy))).verdicts == ()
    assert rules.host_overhead(ctx(Summary())).skipped is not None


# ---- communication and ranks ----------------------------------------------------------------

@pytest.mark.parametrize(("share", "severity"), [(9.9, None), (10.0, "warning"), (29.9, "warning"), (30.0, "critical")])
def test_communication_bands(share, severity):
    s = Summary(world_size=8, communication=Communication(share_pct=share, overlap_pct=20.0, source="trace"))
    outcome = rules.communication(ctx(s))
    if severity is None:
        assert outcome.verdicts == ()
    else:
        v = only(outcome)
        assert (v.finding.severity, v.bottleneck) == (severity, "communication")
        assert v.finding.advice[0].startswith("only 20% of it overlaps compute")


def test_communication_single_process_and_missing_source():
    assert rules.communication(ctx(Summary())).checked == "one process, nothing to exchange"
    assert rules.communication(ctx(Summary(world_size=4))).skipped.startswith("no communication time")


def test_straggler_at_ten_percent_names_the_rank_and_the_culprit():
    ranks = [RankEntry(rank=0, host="a", step_s_median=1.0, wait_pct=2.0),
             RankEntry(rank=1, host="a", step_s_median=1.0, wait_pct=3.0),
             RankEntry(rank=2, host="b", step_s_median=1.1, wait_pct=15.0)]
    v = only(rules.ranks(ctx(Summary(world_size=3, ranks=ranks))))
    assert v.finding.title == "Rank 2 is 10% slower than the median rank"
    assert (v.finding.severity, v.bottleneck) == ("warning", "straggler")
    assert v.finding.advice[0].startswith("rank 2 on b waits for data 15% of its step against 3%")
    ranks[2] = RankEntry(rank=2, host="b", step_s_median=1.09, wait_pct=3.0)
    assert rules.ranks(ctx(Summary(world_size=3, ranks=ranks))).checked == "slowest rank 9% over the median"


def test_straggler_in_compute_and_critical():
    ranks = [RankEntry(rank=r, step_s_median=1.0) for r in range(3)] + [RankEntry(rank=3, step_s_median=1.25)]
    v = only(rules.ranks(ctx(Summary(world_size=4, ranks=ranks))))
    assert v.finding.severity == "critical"
    assert "slower in compute" in v.finding.advice[0]
    assert rules.ranks(ctx(Summary(ranks=[RankEntry()]))).checked == "one rank"


def test_rules_run_in_the_experts_order():
    names = [name for name, _ in rules.RULES]
    assert names.index("step-time outliers") < names.index("roofline and bandwidth")
    assert names.index("roofline and bandwidth") < names.index("device utilization")
    assert names.index("device utilization") < names.index("data loading")
    assert names.index("data loading") < names.index("communication") < names.index("rank imbalance")


def test_samples_per_step_for_advice():
    s = Summary(throughput=Throughput(samples_per_s=640.0, steps_per_s=10.0),
                device=Device(kind="cuda", util_pct=20.0))
    v = only(rules.device_util(ctx(s)))
    assert "(now 64 samples per step)" in v.finding.advice[0]


def test_steps_within_the_summarys_warmup_are_not_measured():
    # records written before warm-up was decided say warmup=false; the summary knows better
    c = ctx(Summary(steps=Steps(warmup=5)), steps=records([1.0] * 5 + [0.1] * 30))
    assert c.times.step[0] == 6
    assert c.times.step_s == [0.1] * 30


@given(period=st.integers(3, 200), offset=st.integers(0, 199), cycles=st.integers(4, 30),
       noise=st.lists(st.tuples(st.integers(1, 6000), st.floats(0.001, 0.05)), max_size=60))
@settings(max_examples=100, deadline=None)
def test_a_periodic_event_is_found_among_random_slow_steps(period, offset, cycles, noise):
    last = period * cycles
    events = dict.fromkeys(range(1 + offset % period, last + 1, period), 0.5)
    spikes = {s: extra for s, extra in noise if s <= last} | events
    found = anomalies.periodic(spikes, 1, last, Thresholds())
    assert found is not None
    assert found[0] == period
    assert set(events) <= set(found[1])
