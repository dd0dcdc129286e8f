"""One verdict per sign, and the same verdict run after run on a shared machine (issue 25 §3, §6).

Hand-made summaries and recorded busy/quiet conditions fed through the real pieces: the ceilings
cache, the peak resolution, the roofline figures, the rules and the console's signs.
"""

import pytest
import torch

from devices.threads import torch_threads
from diagnosis.helpers import ctx
from trainpace.devices.ceilings import Ceilings, device_identity, ensure_ceilings
from trainpace.devices.specs import Peak, Peaks
from trainpace.diagnosis import diagnose
from trainpace.diagnosis.hardware import hardware
from trainpace.measure.device_peaks import resolve_peaks
from trainpace.measure.flops import FamilyCount, StepCount
from trainpace.measure.roofline import step_figures
from trainpace.report._signs import signs
from trainpace.summary import Bandwidth, Device, Host, Summary

# ---- §6: a peak judged wrong is used nowhere; bandwidth-bound needs a real share -----------

ELEMENTWISE = StepCount(flops=2e6, bytes=8e7, ops=3, flops_by_dtype={"torch.float32": 2e6},
                        families=(FamilyCount(family="elementwise", flops=2e6, bytes=8e7,
                                              ops=3),))


def _summary(count, peaks, step_s, **extra):
    flops, estimate = step_figures(count, peaks=peaks, step_s=step_s)
    bandwidth = Bandwidth(util_pct=estimate.util_pct, achieved_gb_s=estimate.achieved_gb_s,
                          peak_gb_s=estimate.peak_gb_s, source="estimate",
                          peak_source=estimate.peak_source, error=estimate.error)
    return Summary(flops=flops, bandwidth=bandwidth, **extra)


def test_an_estimate_above_the_bandwidth_peak_gives_no_verdict_anywhere():
    # the case: "8.54 GB/s of 6.99 GB/s" with peak_wrong, bandwidth_bound and ▲ at once
    peaks = Peaks(tflops={"float32": Peak(0.3, "t")}, bandwidth_gb_s=Peak(6.99, "busy"))
    s = _summary(ELEMENTWISE, peaks, step_s=8e7 / 8.54e9)
    assert s.bandwidth.error is not None and s.bandwidth.util_pct is None
    assert s.flops.roofline is None and s.flops.ridge_flop_per_byte is None
    outcome = hardware(ctx(s))
    assert [v.finding.id for v in outcome.verdicts] == ["peak_wrong"]
    advice = outcome.verdicts[0].finding.advice
    assert len(advice) == 1 and "MFU" not in advice[0]
    assert "bytes that stay in cache" in advice[0]
    row = next(sign for sign in signs(s) if sign.name == "memory bandwidth")
    assert "of 6.99 GB/s" not in " ".join(row.details)
    assert "estimated above the peak, so no share of it (see peak_wrong)" in row.details
    assert not any(d.startswith("roofline") for d in row.details)


def test_an_mfu_above_100_gives_no_roofline_and_its_advice_speaks_of_the_matmul_peak():
    count = StepCount(flops=1e9, bytes=1e6, ops=1, flops_by_dtype={"torch.float32": 1e9},
                      families=(FamilyCount(family="matmul", flops=1e9, bytes=1e6, ops=1),))
    peaks = Peaks(tflops={"float32": Peak(0.0225, "busy")}, bandwidth_gb_s=Peak(26.0, "t"))
    s = _summary(count, peaks, step_s=0.03, device=Device(kind="cpu"), host=Host(cpu_threads=2))
    assert s.flops.error is not None and s.flops.roofline is None
    outcome = hardware(ctx(s))
    assert [v.finding.id for v in outcome.verdicts] == ["peak_wrong"]
    advice = outcome.verdicts[0].finding.advice
    assert len(advice) == 1 and "`trainpace ceilings --threads 2`" in advice[0]
    throughput = next(sign for sign in signs(s) if sign.name == "throughput")
    assert "MFU not shown: the peak is wrong (see peak_wrong)" in throughput.details


@pytest.mark.parametrize(("util_pct", "bound"), [(7.4, False), (59.9, False), (60.0, True)])
def test_bandwidth_bound_needs_a_real_share_of_the_peak(util_pct, bound):
    # MNIST was "bandwidth-bound" at 7.4% of peak bandwidth: below the ridge, far from the roof
    peaks = Peaks(tflops={"float32": Peak(0.3, "t")}, bandwidth_gb_s=Peak(26.0, "t"))
    s = _summary(ELEMENTWISE, peaks, step_s=8e7 / (26e9 * util_pct / 100))
    assert s.flops.roofline == "bandwidth_bound"
    assert s.bandwidth.util_pct == pytest.approx(util_pct)
    outcome = hardware(ctx(s))
    assert [v.finding.id for v in outcome.verdicts] == (["bandwidth_bound"] if bound else [])
    if not bound:
        assert outcome.checked.startswith("below the ridge (0.025 FLOP/byte) but moving only")
        assert "not bandwidth-bound (that needs ≥ 60%)" in outcome.checked


# ---- §3: the same script on the same machine gets the same verdict -------------------------

# recorded conditions of one CPU: a quiet machine's figures, and those of a machine where other
# processes held the CPU (the issue's: 13× lower matmul, 3.7× lower bandwidth)
QUIET = {"bandwidth_gb_s": 26.0, "tflops": 0.304, "others": 0.05}
BUSY = {"bandwidth_gb_s": 6.99, "tflops": 0.0225, "others": 1.3}
# a matmul-heavy step as the run achieved it: the run's own rate does not depend on whether the
# ceilings were measured quietly (slower under load: the verdict must not follow the load either)
MATMUL = StepCount(flops=6e9, bytes=6e7, ops=4, flops_by_dtype={"torch.float32": 6e9},
                   families=(FamilyCount(family="matmul", flops=6e9, bytes=6e7, ops=4),))


def _machine(condition):
    def measure(device, **kwargs):
        kind, name, threads = device_identity(device)
        quiet = condition["others"] < 0.25
        return Ceilings(kind=kind, name=name, threads=threads,
                        bandwidth_gb_s=condition["bandwidth_gb_s"],
                        matmul_tflops={"float32": condition["tflops"]},
                        measured_at="2026-12-01T00:00:00+00:00",
                        method={"quick": True, "quiet": quiet,
                                "others_cpu_cores": condition["others"]})
    return measure


def _run(env, condition, step_s):
    """One run: peaks read at the start, figures, the ceiling after the loop, the verdict."""
    with torch_threads(1):
        peaks, note = resolve_peaks(torch.device("cpu"), device_identity("cpu")[1], None, None)
        flops, estimate = step_figures(MATMUL, peaks=peaks, step_s=step_s)
        achieved = {f"matmul {flops.dtype}": flops.achieved_tflops}
        end = ensure_ceilings("cpu", threads=1, env=env, measure=_machine(condition),
                              achieved=achieved)
        if end.peaks_changed:  # what the Meter does after the loop
            peaks, note = resolve_peaks(torch.device("cpu"), device_identity("cpu")[1], None,
                                        None)
            flops, estimate = step_figures(MATMUL, peaks=peaks, step_s=step_s)
    summary = Summary(
        device=Device(kind="cpu", util_pct=97.0), host=Host(cpu_threads=1), flops=flops,
        bandwidth=Bandwidth(util_pct=estimate.util_pct, achieved_gb_s=estimate.achieved_gb_s,
                            peak_gb_s=estimate.peak_gb_s, source="estimate",
                            error=estimate.error))
    meta = {"vitals": {"peaks": {"note": note}}, "ceilings": end.to_dict()}
    return diagnose(summary, meta=meta), end


@pytest.mark.parametrize("conditions", [
    ("busy", "busy", "quiet", "busy", "quiet"),
    ("quiet", "busy", "busy", "busy", "quiet"),
    ("busy", "quiet", "busy", "quiet", "busy"),
])
def test_the_verdict_is_the_same_run_after_run_whatever_the_load(monkeypatch, tmp_path,
                                                                  conditions):
    monkeypatch.setenv("TRAINPACE_CACHE_DIR", str(tmp_path))
    env = {"TRAINPACE_CACHE_DIR": str(tmp_path)}
    verdicts, statuses, mfus = set(), [], []
    for name in conditions:
        condition = QUIET if name == "quiet" else BUSY
        # the step itself runs slower while others hold the CPU: 0.1 TFLOP/s quiet, 0.03 busy
        diagnosis, end = _run(env, condition, step_s=0.06 if name == "quiet" else 0.2)
        verdicts.add(diagnosis.bottleneck)
        statuses.append(end.status)
        ids = [f.id for f in diagnosis.findings]
        assert "peak_wrong" not in ids  # a busy machine's peak is never used, so never exceeded
        hardware = next(f for f in diagnosis.findings
                        if f.id in ("compute_bound", "device_busy", "bandwidth_bound"))
        mfus.append(hardware.evidence["mfu_pct"])
        if hardware.id == "device_busy":  # no quiet peak yet: the verdict says why
            assert "provisional" in hardware.title
            assert "other processes took 1.30 CPU cores" in hardware.advice[0]
    assert verdicts == {"compute"}
    first_quiet = conditions.index("quiet")
    assert statuses[:first_quiet] == ["provisional"] * first_quiet
    assert statuses[first_quiet] == "measured"
    assert set(statuses[first_quiet + 1:]) == {"cached"}
    # from the quiet measurement on, MFU is against the quiet peak only
    assert all(m is None for m in mfus[:first_quiet])
    assert all(m is not None and m <= 100 for m in mfus[first_quiet:])
