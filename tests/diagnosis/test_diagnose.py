"""diagnose(): the bottleneck chosen from the findings, the checks finding, purity."""

import copy

from trainpace.diagnosis import Thresholds, diagnose
from trainpace.summary import (
    BOTTLENECKS,
    Communication,
    Data,
    Device,
    Flops,
    Kernels,
    RankEntry,
    Steps,
    Summary,
    Time,
)


def steady_records(n=40, step_s=0.1, wait_s=0.002):
    return [{"step": i, "t_s": i * step_s, "step_s": step_s, "wait_s": wait_s, "warmup": False}
            for i in range(1, n + 1)]


def healthy_summary(**kw):
    base = {
        "steps": Steps(total=45, warmup=5, measured=40),
        "time": Time(step_s_median=0.1),
        "data": Data(wait_pct=2.0, wait_s_per_step=0.002),
        "device": Device(kind="cpu", util_pct=85.0, memory_used_pct=40.0),
    }
    base.update(kw)
    return Summary(**base)


def test_healthy_run_says_none_and_what_was_checked():
    d = diagnose(healthy_summary(), steps=steady_records())
    assert d.bottleneck == "none"
    assert [f.id for f in d.findings] == ["checks"]
    checks = d.findings[-1]
    assert checks.title == "No bottleneck found in what was measured (8 checks)"
    assert "data loading: data wait 2.0% of the step (< 10%)" in checks.evidence["checked"]
    assert "device utilization: device busy 85% (≥ 50%)" in checks.evidence["checked"]
    assert "thermal: no temperature or throttle reading for the cpu" in checks.evidence["not_checked"]
    assert "roofline and bandwidth: no FLOP count (flops.roofline) and no bandwidth reading" in checks.evidence["not_checked"]
    assert len(checks.evidence["checked"]) + len(checks.evidence["not_checked"]) == 15  # 15 rules


def test_an_empty_summary_checks_little_and_says_so():
    d = diagnose(Summary())
    assert d.bottleneck == "none"
    assert len(d.findings[-1].evidence["not_checked"]) == 13
    assert d.findings[-1].advice[-1].startswith("some checks could not run")


def test_severity_decides_the_bottleneck_before_order():
    s = healthy_summary(
        data=Data(wait_pct=45.0, wait_s_per_step=0.045),
        flops=Flops(roofline="bandwidth_bound", intensity_flop_per_byte=0.3),
    )
    d = diagnose(s, steps=steady_records(wait_s=0.045))
    assert [f.id for f in d.findings] == ["bandwidth_bound", "data_wait", "checks"]
    assert d.findings[1].severity == "critical"
    assert d.bottleneck == "data_loading"
    assert d.findings[-1].title == "Bottleneck: data loading (data_wait)"


def test_same_severity_the_larger_loss_wins():
    s = healthy_summary(
        data=Data(wait_pct=45.0, wait_s_per_step=0.045),
        device=Device(kind="cuda", util_pct=20.0),  # idle 80%, over half of it waiting for data
    )
    assert diagnose(s).bottleneck == "data_loading"
    s = healthy_summary(
        data=Data(wait_pct=12.0, wait_s_per_step=0.012),
        device=Device(kind="cuda", util_pct=20.0),  # idle 80%, 68% of it not waiting for data
    )
    assert diagnose(s).bottleneck == "host_overhead"
    s = healthy_summary(
        data=Data(wait_pct=5.0, wait_s_per_step=0.005),
        device=Device(kind="cuda", util_pct=20.0),
        communication=Communication(share_pct=15.0),
        world_size=2,
    )
    d = diagnose(s)
    assert {f.id for f in d.findings} == {"device_idle", "communication", "checks"}
    assert d.bottleneck == "host_overhead"  # 75% idle beats 15% communicating


def test_compute_bound_when_nothing_else_is_wrong():
    s = healthy_summary(flops=Flops(roofline="compute_bound", mfu_pct=70.0, achieved_tflops=0.2))
    d = diagnose(s, steps=steady_records())
    assert d.bottleneck == "compute"
    assert d.findings[-1].title == "Bottleneck: compute (compute_bound)"


def test_info_findings_never_make_a_bottleneck_of_their_own_category():
    step_s = [0.16 if i % 25 == 0 else 0.1 for i in range(1, 101)]
    steps = [{"step": i, "step_s": s, "wait_s": 0.0} for i, s in enumerate(step_s, 1)]
    d = diagnose(healthy_summary(), steps=steps)
    assert d.findings[0].id == "periodic_stall"
    assert d.findings[0].severity == "info"
    assert d.bottleneck == "none"


def test_a_summary_built_from_a_trace_is_diagnosed_from_what_it_has():
    s = Summary(
        world_size=2,
        time=Time(step_s_median=0.05),
        device=Device(kind="cuda", util_pct=35.0),
        kernels=Kernels(per_step=1200, median_us=3.0, short_pct=80.0, source="trace"),
        communication=Communication(share_pct=8.0, overlap_pct=90.0, source="trace"),
        ranks=[RankEntry(rank=0, step_s_median=0.05), RankEntry(rank=1, step_s_median=0.051)],
    )
    d = diagnose(s)
    assert d.bottleneck == "host_overhead"
    assert [f.id for f in d.findings] == ["device_idle", "launch_bound", "checks"]
    not_checked = d.findings[-1].evidence["not_checked"]
    assert "step-time outliers: no per-step records (steps.jsonl) for the stall check" in not_checked
    assert "data loading: no data wait measured (wrap the DataLoader with meter.loader)" in not_checked


def test_diagnose_is_pure_and_deterministic():
    s = healthy_summary(data=Data(wait_pct=30.0, wait_s_per_step=0.03, loader={"num_workers": 0}))
    steps = steady_records(wait_s=0.03)
    meta = {"loader": {"num_workers": 0}}
    before = (copy.deepcopy(s), copy.deepcopy(steps), copy.deepcopy(meta))
    first = diagnose(s, steps=steps, meta=meta)
    assert diagnose(s, steps=steps, meta=meta) == first
    assert (s, steps, meta) == before


def test_thresholds_are_configurable():
    s = healthy_summary(data=Data(wait_pct=6.0, wait_s_per_step=0.006))
    assert diagnose(s).bottleneck == "none"
    assert diagnose(s, thresholds=Thresholds(data_wait_warning_pct=5.0)).bottleneck == "data_loading"


def test_every_bottleneck_is_a_contract_category():
    categories = set()
    for s in [
        healthy_summary(data=Data(wait_pct=45.0, wait_s_per_step=0.045)),
        healthy_summary(device=Device(kind="cuda", util_pct=20.0)),
        healthy_summary(flops=Flops(roofline="bandwidth_bound")),
        healthy_summary(flops=Flops(roofline="compute_bound")),
        healthy_summary(device=Device(kind="cuda", util_pct=90.0, memory_used_pct=99.0)),
        healthy_summary(device=Device(kind="cuda", util_pct=90.0, throttle_pct=50.0)),
        healthy_summary(world_size=2, communication=Communication(share_pct=40.0)),
        healthy_summary(ranks=[RankEntry(rank=0, step_s_median=1.0), RankEntry(rank=1, step_s_median=2.0)]),
        healthy_summary(),
    ]:
        categories.add(diagnose(s).bottleneck)
    assert categories == set(BOTTLENECKS)


def test_nothing_timed_is_said_as_nothing_measured_not_as_a_healthy_run():
    d = diagnose(Summary())
    assert d.bottleneck == "none"  # the schema's value; the title says why
    checks = d.findings[-1]
    assert checks.title == "Nothing was measured: no step was timed, so no bottleneck can be named"
    assert checks.evidence["nothing_measured"] is True
    assert diagnose(healthy_summary(), steps=steady_records()).findings[-1].evidence[
        "nothing_measured"] is False
