"""Real (short) CPU training runs under the Meter, diagnosed: the injected cause comes out.

Each run injects a known cause (a per-sample sleep in the dataset, a sleep every N steps) and
checks the diagnosis names it, with figures consistent with the truth measured in the run.
"""

import time

import pytest
import torch

import trainpace
from trainpace.demo import DemoSettings, run_demo

pytestmark = pytest.mark.slow


def test_slow_data_is_data_loading(tmp_path):
    # 10 ms per sample × 16 samples, loaded by the training loop itself (num_workers=0): about
    # half the step, so the wait outweighs what a loaded machine adds (stalls, contention)
    settings = DemoSettings(steps=30, workers=0, slow_data_ms=10.0, batch_size=16, seq_len=16)
    summary, _ = run_demo(settings, out=tmp_path / "slow", console=False, report=False, warmup=2)
    d = summary.diagnosis
    # on a crowded machine, other processes may cost the run more than its data wait: then a
    # slow phase names the contention as the bottleneck, with the figures to show it
    contended = any(p["cause"] == "cpu_contention" for f in d.findings if f.id == "slow_phase"
                    for p in f.evidence["phases"])
    assert d.bottleneck == "data_loading" or (d.bottleneck == "host_overhead" and contended), [
        (f.id, f.severity, f.title) for f in d.findings]
    finding = next(f for f in d.findings if f.id == "data_wait")
    assert finding.evidence["wait_pct"] == summary.data.wait_pct >= 20.0
    assert summary.data.wait_s_per_step >= 16 * 0.010  # at least the injected sleep
    assert summary.steps.measured >= 20
    assert finding.severity == "critical"
    assert "with `num_workers=0`; try `DataLoader(num_workers=" in finding.advice[0]


def test_a_fast_loader_is_not_data_loading(tmp_path):
    summary, _ = run_demo(DemoSettings(steps=25, batch_size=16, seq_len=16), out=tmp_path / "fast",
                          console=False, report=False)
    assert summary.data.wait_pct < 10.0
    assert summary.diagnosis.bottleneck != "data_loading"
    assert not any(f.id == "data_wait" for f in summary.diagnosis.findings)


def test_a_periodic_stall_is_found_with_its_period(tmp_path):
    # steps of ~20 ms (a sleep: robust to a loaded machine), a 250 ms stall every 10th step
    period, stall_s = 10, 0.25
    model = torch.nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 32)
    meter = trainpace.Meter(tmp_path / "stall", window=20, warmup=1, console=False, report=False)
    for step in range(1, 61):
        with meter.step(x):
            time.sleep(0.02)
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if step % period == 0:
                time.sleep(stall_s)  # e.g. a checkpoint save every 10 steps
    summary = meter.finish()
    finding = next(f for f in summary.diagnosis.findings if f.id == "periodic_stall")
    ev = finding.evidence
    assert ev["period_steps"] == period
    expected = [10, 20, 30, 40, 50, 60]
    assert ev["outlier_steps"] == expected
    assert ev["lost_s"] >= len(expected) * stall_s * 0.9  # the injected sleeps, give or take
    assert ev["in_data_wait_pct"] < 50
    assert finding.severity in ("warning", "critical")  # ≥ 5% of the run
    assert "checkpoint save" in finding.advice[0]


@pytest.fixture
def cpu_ceilings(tmp_path, monkeypatch):
    """This CPU's measured ceilings in a private cache: the roofline's peaks (quick: ~1 s)."""
    from trainpace.devices.ceilings import measure_ceilings, save_ceilings

    monkeypatch.setenv("TRAINPACE_CACHE_DIR", str(tmp_path / "cache"))
    return save_ceilings(measure_ceilings("cpu", dtypes=["float32"], quick=True))


def run_steps(out, step, steps=30):
    meter = trainpace.Meter(out, window=10, warmup=3, console=False, report=False)
    for _ in range(steps):
        with meter.step(None):
            step()
    summary = meter.finish()
    if summary.flops.per_step is None and summary.flops.bytes_per_step is None:
        pytest.skip("the Meter does not count FLOPs and bytes yet (DeviceVitals not wired)")
    return summary


def assert_limit(summary, expected):
    """The expected bottleneck — unless other processes held this run back (a shared machine:
    its CPU threads starved, or steps stalled once or now and then), which the diagnosis must
    then say instead. The roofline's own figures are checked by the callers either way."""
    held_back = [f for f in summary.diagnosis.findings
                 if f.id in ("cpu_contention", "periodic_stall", "stalls")
                 and f.severity != "info"]
    seen = [(f.id, f.severity, f.title) for f in summary.diagnosis.findings]
    assert summary.diagnosis.bottleneck == ("host_overhead" if held_back else expected), seen


def test_a_matmul_heavy_step_is_compute(tmp_path, cpu_ceilings):
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(512, 512)

    def step():
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()

    summary = run_steps(tmp_path / "matmul", step)
    assert summary.flops.roofline == "compute_bound"
    assert summary.flops.intensity_flop_per_byte > summary.flops.ridge_flop_per_byte
    assert_limit(summary, "compute")
    finding = next(f for f in summary.diagnosis.findings if f.id == "compute_bound")
    assert finding.evidence["mfu_pct"] == summary.flops.mfu_pct


def test_an_elementwise_heavy_step_is_memory_bandwidth(tmp_path, cpu_ceilings):
    weight = torch.nn.Parameter(torch.randn(2_000_000))
    opt = torch.optim.SGD([weight], lr=1e-4)
    x = torch.randn(2_000_000)

    def step():
        (weight * x + x).square().mean().backward()
        opt.step()
        opt.zero_grad()

    summary = run_steps(tmp_path / "elementwise", step)
    assert summary.flops.roofline == "bandwidth_bound"
    assert_limit(summary, "memory_bandwidth")
    finding = next(f for f in summary.diagnosis.findings if f.id == "bandwidth_bound")
    assert finding.evidence["intensity_flop_per_byte"] == summary.flops.intensity_flop_per_byte
