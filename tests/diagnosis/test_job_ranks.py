"""One of several ranks on a host: the job's own ranks are not "other processes" in the
diagnosis (slow phases, host CPU, a CPU run's threads); hand-made readings, exact figures."""

import pytest

from diagnosis.helpers import ctx, only, records
from trainpace.diagnosis import phases
from trainpace.diagnosis.hardware import device_util
from trainpace.diagnosis.overhead import host_overhead
from trainpace.summary import Data, Device, Host, Steps, Summary, Time


def host_row(t_s, system, process, job):
    return {"t_s": t_s, "host": {"system_cpu_pct": system, "process_cpu_pct": process,
                                 "main_cpu_pct": process, "memory_used_pct": 20.0,
                                 "job_cpu_pct": job}}


def slow_phase(job_then):
    """20 slow steps (2 s) while the machine is 100% busy and this rank has 25% of its 2
    cores, the job ``job_then`` % (100 = one core); then 100 steady steps (2 s)."""
    system = [host_row(t / 2, 100.0, 50.0, job_then) if t / 2 <= 2.0
              else host_row(t / 2, 55.0, 100.0, 100.0) for t in range(1, 9)]
    c = ctx(Summary(steps=Steps(total=120, warmup=20, measured=100), time=Time(wall_s=4.0)),
            steps=records([0.1] * 20 + [0.02] * 100), system=system, meta={"cpu_count": 2})
    finding = next(v.finding for v in phases.slow_phases(c).verdicts
                   if v.finding.id == "slow_phase")
    [phase] = finding.evidence["phases"]
    return phase, finding


def test_a_phase_where_the_sibling_ranks_had_the_cpu_is_not_contention():
    phase, _ = slow_phase(job_then=200.0)  # the other rank had the rest: the job's own load
    assert phase["cause"] == "unknown"  # no sign names one (it was cpu_contention)
    signs = phase["signs"]
    assert signs["process_share_pct"] == pytest.approx(25.0)
    assert (signs["job_cpu_pct"], signs["job_share_pct"]) == pytest.approx((200.0, 100.0))
    assert signs["others_pct"] == pytest.approx(0.0)


def test_a_phase_where_an_unrelated_process_had_it_is():
    phase, finding = slow_phase(job_then=100.0)
    assert phase["cause"] == "cpu_contention"
    assert phase["signs"]["others_pct"] == pytest.approx(50.0)
    assert ("the machine's CPU was 100% busy, this process had 25% of it, its job's ranks on "
            "this host 50%") in finding.title


def test_a_single_processs_signs_have_no_job_figures():
    system = [{"t_s": t / 2, "host": {"system_cpu_pct": 100.0 if t / 2 <= 2.0 else 55.0,
                                      "process_cpu_pct": 50.0 if t / 2 <= 2.0 else 100.0}}
              for t in range(1, 9)]
    c = ctx(Summary(steps=Steps(total=120, warmup=20, measured=100), time=Time(wall_s=4.0)),
            steps=records([0.1] * 20 + [0.02] * 100), system=system, meta={"cpu_count": 2})
    [phase] = phases.slow_phases(c).verdicts[0].finding.evidence["phases"]
    assert "job_cpu_pct" not in phase["signs"] and "job_share_pct" not in phase["signs"]


def measured_run(system_pct, process_pct, job_pct):
    """10 steps of 1 s, a reading each second."""
    return {"steps": records([1.0] * 10),
            "system": [host_row(float(t), system_pct, process_pct, job_pct)
                       for t in range(0, 11)]}


def test_a_busy_host_cpu_kept_busy_by_the_jobs_ranks_is_the_jobs():
    # 4 cores 95% busy; this rank and its workers 180% (45%); the job's 2 ranks 360% (90%)
    busy = Summary(device=Device(kind="cuda"), host=Host(system_cpu_pct=95.0,
                                                         process_cpu_pct=180.0))
    v = only(host_overhead(ctx(busy, meta={"cpu_count": 4}, **measured_run(95.0, 180.0, 360.0))))
    assert v.bottleneck == "host_overhead"
    assert v.finding.evidence["job_cpu_pct"] == 360.0
    assert v.finding.evidence["others_pct"] == pytest.approx(5.0)
    # the other half taken by an unrelated process: the machine's
    v = only(host_overhead(ctx(busy, meta={"cpu_count": 4}, **measured_run(95.0, 180.0, 180.0))))
    assert v.bottleneck is None
    assert v.finding.title == ("The host CPUs are 95% busy, 50% of them with other processes "
                               "(this job's ranks on this host and their workers: 45%)")


def test_a_cpu_run_whose_ranks_crowd_their_own_host_is_told_to_use_fewer_threads():
    s = Summary(device=Device(kind="cpu", util_pct=48.0), data=Data(wait_pct=0.0),
                host=Host(system_cpu_pct=100.0, process_cpu_pct=96.0, cpu_threads=2))
    v = only(device_util(ctx(s, meta={"cpu_count": 4}, **measured_run(100.0, 96.0, 384.0))))
    assert v.finding.id == "device_idle"
    assert v.finding.title == ("The job's ranks on this host keep its CPU 100% busy: this "
                               "rank's threads get 48% of their time")
    assert v.bottleneck == "host_overhead"
    assert v.finding.evidence["job_cpu_pct"] == 384.0
    # the job's 2 ranks have half the machine, others the rest: contention
    v = only(device_util(ctx(s, meta={"cpu_count": 4}, **measured_run(100.0, 96.0, 192.0))))
    assert v.finding.id == "cpu_contention"
